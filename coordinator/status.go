package coordinator

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/prefix"
)

// StatusPath is where the api package serves Status.
const StatusPath = admin.StatusPath

// The status wire types live in api/admin (served by the api package,
// decoded by the CLI and the dashboard).
type (
	NodeStatus = admin.NodeStatus
	Status     = admin.Status
)

// Status reports the live nodes (load, KV room, uptime), the models (what
// the registry and the workers say of them, placement, installs), the
// queue depths, how the cluster is secured, and the requests this
// coordinator admitted recently (rates, queue wait, failures; from
// Config.Metrics, empty without it).
func (c *Coordinator) Status(ctx context.Context) Status {
	now := time.Now()
	st := Status{Coordinator: c.cfg.Name, Leader: c.Leader(), Queued: map[string]uint64{},
		Time: now.UnixMilli(), Version: c.cfg.Version, Security: c.security()}
	voters := map[string]bool{}
	for _, id := range c.RaftServers() {
		voters[id] = true
	}
	reports := c.reports.fresh(now)
	models := map[string]bool{}
	for _, m := range c.ml.Members() {
		n := NodeStatus{
			Name: m.Name, Role: m.Meta.Role, Addr: m.Addr, Version: m.Meta.Version, Started: m.Meta.Started,
			Chip: m.Meta.Chip, Cores: m.Meta.Cores, MemoryMB: m.Meta.MemoryMB,
			Models: m.Meta.Models, Slots: m.Meta.Slots, Running: m.Meta.Running, Free: m.Meta.Free, Ready: m.Meta.Ready, Leaving: m.Meta.Leaving,
			HTTP: m.Meta.HTTP, NATS: m.Meta.NATS,
			GPUCores: m.Meta.GPUCores, GPUWorkingMB: m.Meta.GPUWorkingMB, BandwidthMBs: m.Meta.BandwidthMBs,
		}
		if m.Meta.Role == cluster.RoleCoordinator {
			switch {
			case m.Name == st.Leader:
				n.Raft = "leader"
			case voters[m.Name]:
				n.Raft = "voter"
			}
		}
		// One engine serves all of a worker's models from one pool:
		// report the largest pool its summaries name.
		var kv prefix.Summary
		for _, model := range m.Meta.Models {
			models[model] = true
			if s, ok := reports[routeKey{m.Name, model}]; ok {
				if s.Blocks > kv.Blocks {
					kv = s
				}
				st.Served = append(st.Served, admin.ServedModel{Model: model, Worker: m.Name,
					Context: s.Context, Format: s.Format, Quantization: s.Quantization, Size: s.Size})
			}
		}
		n.KVBlocks, n.KVFreeBlocks = kv.Blocks, kv.FreeBlocks
		n.KVTokens, n.KVFreeTokens = kv.Blocks*kv.BlockSize, kv.FreeBlocks*kv.BlockSize
		n.KVBytes, n.KVFreeBytes = int64(kv.Blocks)*kv.BlockBytes, int64(kv.FreeBlocks)*kv.BlockBytes
		st.Nodes = append(st.Nodes, n)
	}
	fs := c.fsm.snapshot()
	for _, m := range fs.Models {
		if p, ok := fs.Pipelines[m.Name]; ok {
			m.Stages = adminStages(p) // pipelines.go
		}
		st.Models = append(st.Models, m)
		models[m.Name] = true
	}
	sort.Slice(st.Models, func(i, j int) bool { return st.Models[i].Name < st.Models[j].Name })
	for name, workers := range fs.Assign {
		if len(workers) > 0 {
			if st.Placement == nil {
				st.Placement = map[string][]string{}
			}
			st.Placement[name] = slices.Sorted(slices.Values(workers))
		}
	}
	st.Installs = c.modelInstalls() // models.go

	st.RecentErrors = []admin.RequestOutcome{}
	for _, o := range c.cfg.Metrics.RecentOutcomes() {
		st.RecentErrors = append(st.RecentErrors, admin.RequestOutcome{Time: o.Time.UnixMilli(), Status: o.Status,
			Model: o.Model, Kind: o.Kind, Error: o.Error, Message: o.Message})
	}
	tr := c.cfg.Metrics.Traffic()
	st.Traffic = admin.Traffic{WindowS: int(tr.Window / time.Second), Requests: tr.Requests, Errors: tr.Errors, Cancelled: tr.Cancelled,
		QueueWindowS: int(tr.QueueWindow / time.Second), QueueWaits: tr.QueueWaits,
		QueueWaitP50MS: float64(tr.QueueWaitP50) / float64(time.Millisecond), QueueWaitP95MS: float64(tr.QueueWaitP95) / float64(time.Millisecond)}

	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	for model := range models {
		if s, err := c.js.Stream(ctx, cluster.StreamName(model)); err == nil {
			if info, err := s.Info(ctx); err == nil {
				st.Queued[model] = info.State.Msgs
			}
		}
	}
	return st
}

// security is how this coordinator is configured: what Check (keys.go)
// asks of a caller.
func (c *Coordinator) security() admin.Security {
	s := admin.Security{ClusterSecret: c.cfg.Secret != nil}
	c.fsm.mu.RLock()
	s.Keys = len(c.fsm.state.APIKeys)
	c.fsm.mu.RUnlock()
	switch {
	case s.Keys > 0 || c.cfg.RequireKeys:
		s.API = admin.APIKeys
	case len(cluster.ExposedAddrs(c.cfg.HTTPAddr)) > 0:
		s.API = admin.APIOpen
	default:
		s.API = admin.APILoopback
	}
	return s
}

// workerReports keeps the latest prefix summary of every worker and model
// for Status: the KV room in tokens and bytes and what each model is. The
// router (routing.go) keeps its own copy of the keys for routing; this one
// drops them, so a status never takes the router's lock.
type workerReports struct {
	mu   sync.Mutex
	sums map[routeKey]report
}

type report struct {
	prefix.Summary // without Keys
	at             time.Time
}

// reportLoop records the workers' summaries until ctx ends.
func (c *Coordinator) reportLoop(ctx context.Context) {
	sub, err := c.nc.Subscribe(cluster.PrefixFilter(), c.onReport)
	if err != nil {
		c.log.Warn("status without kv room and model details: subscribe summaries", "err", err)
		return
	}
	defer sub.Unsubscribe()
	<-ctx.Done()
}

func (c *Coordinator) onReport(m *nats.Msg) {
	var s prefix.Summary
	if err := json.Unmarshal(m.Data, &s); err != nil || s.Node == "" || s.Model == "" {
		return // onPrefix (routing.go) logs malformed summaries
	}
	s.Keys = nil
	r := &c.reports
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sums == nil {
		r.sums = map[routeKey]report{}
	}
	r.sums[routeKey{s.Node, s.Model}] = report{Summary: s, at: time.Now()}
}

// fresh returns the summaries younger than prefixTTL and forgets the
// others (workers refresh theirs every second).
func (r *workerReports) fresh(now time.Time) map[routeKey]prefix.Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[routeKey]prefix.Summary, len(r.sums))
	for k, s := range r.sums {
		if now.Sub(s.at) > prefixTTL {
			delete(r.sums, k)
			continue
		}
		out[k] = s.Summary
	}
	return out
}
