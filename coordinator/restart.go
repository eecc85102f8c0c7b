package coordinator

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Surviving a restart of every coordinator (docs/cluster.md, "Restarts").
//
// Raft keeps each voter's address in its configuration, and only a leader
// can change it. A coordinator whose Raft port is ephemeral (no -raft) would
// come back on a new port after a restart; once every coordinator has
// restarted that way, no voter can reach a quorum at the addresses the
// others have stored, and the cluster never elects a leader again. So an
// ephemeral Raft port is remembered in the data dir and bound again.

const raftPortFile = "raft-port"

// raftTransport is newRaftTransport with a remembered port in place of an
// ephemeral one (when it is still free).
func (c *Coordinator) raftTransport(addr string, adv net.Addr, logw io.Writer) (*raft.NetworkTransport, error) {
	path := filepath.Join(c.cfg.DataDir, "raft", raftPortFile)
	host, port, err := splitPort(addr)
	if err == nil && port == 0 && adv == nil {
		if b, err := os.ReadFile(path); err == nil {
			if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p > 0 && p < 1<<16 {
				if t, err := c.newRaftTransport(net.JoinHostPort(host, strconv.Itoa(p)), nil, logw); err == nil {
					return t, nil
				}
				c.log.Warn("remembered raft port is taken; voters must learn the new one from a leader", "port", p)
			}
		}
	}
	t, err := c.newRaftTransport(addr, adv, logw)
	if err != nil {
		return nil, err
	}
	if port == 0 {
		if _, p, err := net.SplitHostPort(string(t.LocalAddr())); err == nil {
			if err := os.WriteFile(path, []byte(p+"\n"), 0o600); err != nil {
				c.log.Warn("remember raft port", "err", err)
			}
		}
	}
	return t, nil
}

// stateCurrent reports whether the FSM holds the cluster's state: after a
// restart it holds only the last snapshot until the log entries after it
// are committed again, which takes an elected leader. Until then an empty
// placement or key set means "not loaded yet", not "none": answering a
// worker's assignment request from it would make the worker unload its
// models, and an empty key set would open the API. Once current it stays
// so (a follower's usual lag is not a restart). A coordinator joining an
// existing cluster for the first time is not current until it has caught
// up either.
func (c *Coordinator) stateCurrent() bool {
	if c.current.Load() {
		return true
	}
	if c.cfg.Bootstrap && c.startIndex <= 1 {
		// A cluster created here (its log holds at most the bootstrap
		// configuration): the empty state is the state.
		c.current.Store(true)
		return true
	}
	applied := c.raft.AppliedIndex()
	if applied < c.startIndex {
		return false
	}
	commit, err := strconv.ParseUint(c.raft.Stats()["commit_index"], 10, 64)
	if err != nil || commit == 0 || applied < commit {
		return false
	}
	c.current.Store(true)
	return true
}

// StateLoaded reports whether this coordinator's state is the cluster's
// (stateCurrent): after a restart or a first join, not before it caught up.
func (c *Coordinator) StateLoaded() bool { return c.stateCurrent() }

// placementYoung reports whether this leader's view of the cluster is
// younger than Config.PlacementGrace: workers may still be rejoining, so
// no placement is withdrawn yet.
func (c *Coordinator) placementYoung() bool {
	since := c.leadSince.Load()
	return since == 0 || time.Since(time.Unix(0, since)) < c.cfg.PlacementGrace
}

// keepAbsent is placement next as a young leader applies it: workers of
// old that are not in the cluster view (live) stay, as they may still be
// rejoining; a live worker the placement drops (no room for the model any
// more, say once its size is known) is withdrawn at once. Sorted.
func keepAbsent(old, next []string, live map[string]bool) []string {
	out := slices.Clone(next)
	for _, w := range old {
		if !live[w] && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	slices.Sort(out)
	return out
}
