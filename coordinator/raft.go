package coordinator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"

	"github.com/macpool/macpool/cluster"
)

// ErrNoLeader is returned by writes when no Raft leader answers in time.
var ErrNoLeader = errors.New("no raft leader")

type slogWriter struct{ c *Coordinator }

func (w slogWriter) Write(p []byte) (int, error) {
	w.c.log.Debug(string(trimSpace(p)), "sub", "raft")
	return len(p), nil
}

func trimSpace(p []byte) []byte {
	for len(p) > 0 && (p[len(p)-1] == '\n' || p[len(p)-1] == ' ') {
		p = p[:len(p)-1]
	}
	return p
}

func (c *Coordinator) startRaft() error {
	dir := filepath.Join(c.cfg.DataDir, "raft")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("coordinator: raft dir: %w", err)
	}
	logw := slogWriter{c}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(c.cfg.Name)
	rc.HeartbeatTimeout = c.cfg.RaftHeartbeatTimeout
	rc.ElectionTimeout = c.cfg.RaftElectionTimeout
	rc.LeaderLeaseTimeout = c.cfg.RaftLeaderLeaseTimeout
	rc.CommitTimeout = c.cfg.RaftLeaderLeaseTimeout / 2
	rc.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Output: logw, Level: hclog.Info})

	addr := c.cfg.RaftAddr
	if addr == "" {
		addr = net.JoinHostPort(advertiseHost("", c.ml.Addr()), "0")
	}
	host, port, err := splitPort(addr)
	if err != nil {
		return fmt.Errorf("coordinator: raft addr: %w", err)
	}
	var adv net.Addr
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if port == 0 {
			addr = net.JoinHostPort(advertiseHost("", c.ml.Addr()), "0")
		} else {
			adv = &net.TCPAddr{IP: net.ParseIP(advertiseHost("", c.ml.Addr())), Port: port}
		}
	}
	trans, err := c.newRaftTransport(addr, adv, logw) // raftauth.go: mutual TLS with a cluster secret
	if err != nil {
		return fmt.Errorf("coordinator: raft transport %s: %w", addr, err)
	}
	c.raftTrans = trans
	c.meta.Raft = string(trans.LocalAddr())

	store, err := openBoltStore(filepath.Join(dir, "raft.db"))
	if err != nil {
		return fmt.Errorf("coordinator: %w", err)
	}
	c.store = store
	snaps, err := raft.NewFileSnapshotStore(dir, 2, logw)
	if err != nil {
		return fmt.Errorf("coordinator: raft snapshots: %w", err)
	}
	if c.cfg.Bootstrap {
		has, err := raft.HasExistingState(store, store, snaps)
		if err != nil {
			return fmt.Errorf("coordinator: raft state: %w", err)
		}
		if !has {
			err := raft.BootstrapCluster(rc, store, store, snaps, trans, raft.Configuration{
				Servers: []raft.Server{{ID: rc.LocalID, Address: trans.LocalAddr()}},
			})
			if err != nil {
				return fmt.Errorf("coordinator: raft bootstrap: %w", err)
			}
		}
	}
	r, err := raft.NewRaft(rc, c.fsm, store, store, snaps, trans)
	if err != nil {
		return fmt.Errorf("coordinator: raft: %w", err)
	}
	c.raft = r
	return nil
}

// IsLeader reports whether this coordinator is the Raft leader.
func (c *Coordinator) IsLeader() bool { return c.raft.State() == raft.Leader }

// Leader returns the Raft leader's server id ("" if none is known).
func (c *Coordinator) Leader() string {
	_, id := c.raft.LeaderWithID()
	return string(id)
}

// State returns a copy of the replicated state.
func (c *Coordinator) State() State { return c.fsm.snapshot() }

// propose applies a command on the leader: directly when this node leads,
// otherwise forwarded over NATS to the leader, retrying until ctx ends while
// there is none (an election).
func (c *Coordinator) propose(ctx context.Context, t cmdType, body any) error {
	data, err := encodeCmd(t, body)
	if err != nil {
		return err
	}
	for {
		if c.IsLeader() {
			err = c.applyLocal(data)
			if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipLost) {
				return err
			}
		} else {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			var resp *nats.Msg
			resp, err = c.nc.RequestWithContext(rctx, cluster.SubjectRaftApply, data)
			cancel()
			if err == nil {
				if len(resp.Data) == 0 {
					return nil
				}
				err = errors.New(string(resp.Data))
				if string(resp.Data) != raft.ErrNotLeader.Error() {
					return err
				}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %v", ErrNoLeader, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Coordinator) applyLocal(data []byte) error {
	f := c.raft.Apply(data, 5*time.Second)
	if err := f.Error(); err != nil {
		return err
	}
	if err, ok := f.Response().(error); ok && err != nil {
		return err
	}
	return nil
}

// RegisterModel adds or replaces a model registry entry.
func (c *Coordinator) RegisterModel(ctx context.Context, m ModelSpec) error {
	if m.Name == "" {
		return errors.New("register model: name must be set")
	}
	if m.Created == 0 {
		m.Created = time.Now().Unix()
	}
	return c.propose(ctx, cmdRegisterModel, m)
}

// RemoveModel deletes a model from the registry.
func (c *Coordinator) RemoveModel(ctx context.Context, name string) error {
	return c.propose(ctx, cmdRemoveModel, nameCmd{Name: name})
}

// leaderLoop runs the leader-only tasks while this node leads.
func (c *Coordinator) leaderLoop(ctx context.Context) {
	obs := make(chan raft.Observation, 16)
	observer := raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.RaftState)
		return ok
	})
	c.raft.RegisterObserver(observer)
	defer c.raft.DeregisterObserver(observer)

	var (
		lctx   context.Context
		cancel context.CancelFunc
		done   chan struct{}
	)
	stopLeading := func() {
		if cancel != nil {
			cancel()
			<-done
			cancel = nil
		}
	}
	defer stopLeading()
	check := func() {
		if c.raft.State() == raft.Leader {
			if cancel == nil {
				c.log.Info("became raft leader")
				lctx, cancel = context.WithCancel(ctx)
				done = make(chan struct{})
				go func() { defer close(done); c.lead(lctx) }()
			}
		} else if cancel != nil {
			c.log.Info("lost raft leadership")
			stopLeading()
		}
	}
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		check()
		select {
		case <-ctx.Done():
			return
		case <-obs:
		case <-t.C:
		}
	}
}

// lead serves forwarded writes and reconciles Raft membership, the model
// registry and placement with gossip, until ctx ends.
func (c *Coordinator) lead(ctx context.Context) {
	sub, err := c.nc.Subscribe(cluster.SubjectRaftApply, func(m *nats.Msg) {
		if err := c.applyLocal(m.Data); err != nil {
			m.Respond([]byte(err.Error()))
			return
		}
		m.Respond(nil)
	})
	if err != nil {
		c.log.Error("subscribe raft apply", "err", err)
	} else {
		defer sub.Unsubscribe()
	}
	changes, unsub := c.ml.Subscribe()
	defer unsub()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		c.reconcile(ctx)
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-t.C:
		}
	}
}

func (c *Coordinator) reconcile(ctx context.Context) {
	members := c.ml.Members()
	// Raft voters follow the coordinators seen by gossip. A coordinator that
	// failed stays a voter (it may come back); one that left is removed.
	if f := c.raft.GetConfiguration(); f.Error() == nil {
		have := map[raft.ServerID]raft.ServerAddress{}
		for _, s := range f.Configuration().Servers {
			have[s.ID] = s.Address
		}
		for _, m := range members {
			if m.Meta.Role != cluster.RoleCoordinator || m.Meta.Raft == "" {
				continue
			}
			id := raft.ServerID(m.Name)
			if addr, ok := have[id]; ok && addr == raft.ServerAddress(m.Meta.Raft) {
				continue
			}
			c.log.Info("adding raft voter", "id", id, "addr", m.Meta.Raft)
			if err := c.raft.AddVoter(id, raft.ServerAddress(m.Meta.Raft), 0, 5*time.Second).Error(); err != nil {
				c.log.Warn("add raft voter", "id", id, "err", err)
			}
		}
		for id := range have {
			if id == raft.ServerID(c.cfg.Name) {
				continue
			}
			if _, alive := c.ml.Member(string(id)); !alive && c.ml.LeftGracefully(string(id)) {
				c.log.Info("removing raft voter that left", "id", id)
				if err := c.raft.RemoveServer(id, 0, 5*time.Second).Error(); err != nil {
					c.log.Warn("remove raft voter", "id", id, "err", err)
				}
			}
		}
	}
	// Registry and placement follow the workers' gossiped models.
	placement := map[string][]string{}
	for _, m := range members {
		if m.Meta.Role != cluster.RoleWorker {
			continue
		}
		for _, model := range m.Meta.Models {
			placement[model] = append(placement[model], m.Name)
		}
	}
	st := c.fsm.snapshot()
	for model, workers := range placement {
		if _, ok := st.Models[model]; !ok && !c.recentlyRemoved(model) { // a removed managed model being unloaded
			if err := c.applyCmd(cmdRegisterModel, ModelSpec{Name: model, Source: "worker:" + workers[0], Created: time.Now().Unix()}); err != nil {
				c.log.Warn("register model", "model", model, "err", err)
			}
		}
		slices.Sort(workers)
		if !slices.Equal(st.Placement[model], workers) {
			if err := c.applyCmd(cmdSetPlacement, placementCmd{Model: model, Workers: workers}); err != nil {
				c.log.Warn("set placement", "model", model, "err", err)
			}
		}
	}
	for model := range st.Placement {
		if _, ok := placement[model]; !ok {
			if err := c.applyCmd(cmdSetPlacement, placementCmd{Model: model}); err != nil {
				c.log.Warn("clear placement", "model", model, "err", err)
			}
		}
	}
	c.placeModels(members, c.fsm.snapshot()) // managed models onto workers (models.go)
}

func (c *Coordinator) applyCmd(t cmdType, body any) error {
	data, err := encodeCmd(t, body)
	if err != nil {
		return err
	}
	return c.applyLocal(data)
}

// RaftServers lists the ids of the current Raft configuration.
func (c *Coordinator) RaftServers() []string {
	f := c.raft.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	var out []string
	for _, s := range f.Configuration().Servers {
		out = append(out, string(s.ID))
	}
	return out
}
