package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Self-healing membership. memberlist forgets a failed node after a while
// and never dials it again, so a cluster whose coordinators all restart
// (power cut, upgrade, kill -9) would otherwise stay split: the restarted
// coordinators see nobody, the workers see no coordinator. Every node
// therefore remembers the gossip addresses of the peers it has seen (in
// Config.PeersFile, so also across its own restart) and keeps dialling the
// ones that are not alive, with backoff, for as long as it runs.

// maxKnownPeers bounds the remembered peers; the least recently seen go first.
const maxKnownPeers = 256

// knownPeer is one remembered peer (the peers file holds a list of them).
type knownPeer struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
	Seen int64  `json:"seen"` // unix seconds of the last join or update
}

// loadPeers reads the peers file; a missing file is no peers.
func loadPeers(path string) (map[string]knownPeer, error) {
	out := map[string]knownPeer{}
	if path == "" {
		return out, nil
	}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("membership: read peers: %w", err)
	}
	var list []knownPeer
	if err := json.Unmarshal(b, &list); err != nil {
		// A damaged file must not keep the node from starting: it only
		// speeds up rejoining.
		return out, nil
	}
	for _, p := range list {
		if p.Name != "" && p.Addr != "" {
			out[p.Name] = p
		}
	}
	return out, nil
}

// savePeers writes the peers atomically (write and rename), mode 0600: the
// file reveals the cluster's layout to nobody but its owner.
func savePeers(path string, peers map[string]knownPeer) error {
	list := make([]knownPeer, 0, len(peers))
	for _, p := range peers {
		list = append(list, p)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	b, err := json.MarshalIndent(list, "", " ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("membership: peers dir: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("membership: write peers: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("membership: write peers: %w", err)
	}
	return nil
}

// remember records a live peer (caller holds m.mu).
func (m *Membership) remember(name, addr string) {
	if name == m.cfg.Name {
		return
	}
	if p, ok := m.known[name]; ok && p.Addr == addr && time.Since(time.Unix(p.Seen, 0)) < time.Minute {
		return
	}
	m.known[name] = knownPeer{Name: name, Addr: addr, Seen: time.Now().Unix()}
	// A node restarted under a new name on the same address (a worker's
	// default name carries its pid) replaces the old entry.
	for n, p := range m.known {
		if n != name && p.Addr == addr {
			delete(m.known, n)
		}
	}
	for len(m.known) > maxKnownPeers {
		oldest := ""
		for n, p := range m.known {
			if oldest == "" || p.Seen < m.known[oldest].Seen {
				oldest = n
			}
		}
		delete(m.known, oldest)
	}
	m.peersDirty()
}

// forget drops a peer that left on purpose (drained, stopped): it is not
// coming back at that address, so it is not dialled (caller holds m.mu).
func (m *Membership) forget(name string) {
	if _, ok := m.known[name]; ok {
		delete(m.known, name)
		m.peersDirty()
	}
}

// peersDirty wakes the rejoin loop to save the peers (caller holds m.mu).
func (m *Membership) peersDirty() {
	m.dirty = true
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// lost wakes the rejoin loop at its shortest interval: a peer just failed,
// and it may be back soon (caller holds m.mu).
func (m *Membership) lost() {
	m.resetBackoff = true
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// rejoinTargets lists the addresses to dial: remembered peers and the
// configured join addresses that are not among the live members.
func (m *Membership) rejoinTargets() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	live := map[string]bool{}
	for _, x := range m.members {
		live[x.Addr] = true
	}
	others := len(m.members)
	if _, self := m.members[m.cfg.Name]; self {
		others--
	}
	seen := map[string]bool{m.addr: true}
	var out []string
	add := func(addr string) {
		if !live[addr] && !seen[addr] {
			seen[addr] = true
			out = append(out, addr)
		}
	}
	names := make([]string, 0, len(m.known))
	for n := range m.known {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if _, alive := m.members[n]; !alive {
			add(m.known[n].Addr) // skipped if another live node has the address
		}
	}
	// A join address may name a live member under another spelling
	// (a host name, 0.0.0.0): dial it only while nobody else is alive.
	if others == 0 {
		for _, a := range m.cfg.Join {
			add(a)
		}
	}
	return out
}

// rejoinLoop dials peers that are not alive, RejoinMin apart at first and
// doubling up to RejoinMax while that brings no new member, and saves the
// peers file when it changed. It runs until ctx ends.
func (m *Membership) rejoinLoop(ctx context.Context) {
	defer m.wg.Done()
	backoff := m.cfg.RejoinMin
	timer := time.NewTimer(backoff)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			m.savePeersNow()
			return
		case <-m.wake:
			m.savePeersNow()
			m.mu.Lock()
			reset := m.resetBackoff
			m.resetBackoff = false
			m.mu.Unlock()
			if reset {
				backoff = m.cfg.RejoinMin
				timer.Reset(backoff)
			}
			continue
		case <-timer.C:
		}
		before := m.othersAlive()
		targets := m.rejoinTargets()
		if m.cfg.Discover != nil && before == 0 {
			dctx, cancel := context.WithTimeout(ctx, m.cfg.RejoinMax)
			if addrs, err := m.cfg.Discover(dctx); err == nil {
				targets = append(targets, addrs...)
			}
			cancel()
		}
		if len(targets) > 0 {
			if n, err := m.ml.Join(targets); n > 0 {
				m.log.Info("rejoined peers", "contacted", n, "tried", targets)
			} else {
				m.log.Debug("rejoin", "tried", targets, "err", err)
			}
		}
		// Back off while dialling brings nobody new (peers still down, or an
		// address now answered by another node); start over when it does.
		if len(targets) == 0 || m.othersAlive() > before {
			backoff = m.cfg.RejoinMin
		} else {
			backoff = min(2*backoff, m.cfg.RejoinMax)
		}
		timer.Reset(backoff)
	}
}

// othersAlive counts the live members other than this node.
func (m *Membership) othersAlive() int {
	m.mu.RLock()
	defer m.mu.RUnlock()
	n := len(m.members)
	if _, self := m.members[m.cfg.Name]; self {
		n--
	}
	return n
}

func (m *Membership) savePeersNow() {
	m.mu.Lock()
	if !m.dirty || m.cfg.PeersFile == "" {
		m.dirty = false
		m.mu.Unlock()
		return
	}
	m.dirty = false
	snap := make(map[string]knownPeer, len(m.known))
	for n, p := range m.known {
		snap[n] = p
	}
	m.mu.Unlock()
	if err := savePeers(m.cfg.PeersFile, snap); err != nil {
		m.log.Warn("remember peers", "err", err)
	}
}
