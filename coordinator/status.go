package coordinator

import (
	"context"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/cluster"
)

// StatusPath is where the api package serves Status.
const StatusPath = admin.StatusPath

// The status wire types live in api/admin (served by the api package,
// decoded by the CLI and the dashboard).
type (
	NodeStatus = admin.NodeStatus
	Status     = admin.Status
)

// Status reports the live nodes, their load and the queue depths.
func (c *Coordinator) Status(ctx context.Context) Status {
	st := Status{Coordinator: c.cfg.Name, Leader: c.Leader(), Queued: map[string]uint64{}}
	voters := map[string]bool{}
	for _, id := range c.RaftServers() {
		voters[id] = true
	}
	models := map[string]bool{}
	for _, m := range c.ml.Members() {
		n := NodeStatus{
			Name: m.Name, Role: m.Meta.Role, Addr: m.Addr, Version: m.Meta.Version,
			Chip: m.Meta.Chip, Cores: m.Meta.Cores, MemoryMB: m.Meta.MemoryMB,
			Models: m.Meta.Models, Slots: m.Meta.Slots, Running: m.Meta.Running, Free: m.Meta.Free, Ready: m.Meta.Ready, Leaving: m.Meta.Leaving,
			HTTP: m.Meta.HTTP, NATS: m.Meta.NATS,
			GPUCores: m.Meta.GPUCores, GPUWorkingMB: m.Meta.GPUWorkingMB,
		}
		n.KVBlocks, n.KVFreeBlocks = c.kvRoom(m.Name) // routing.go
		if m.Meta.Role == cluster.RoleCoordinator {
			switch {
			case m.Name == st.Leader:
				n.Raft = "leader"
			case voters[m.Name]:
				n.Raft = "voter"
			}
		}
		for _, x := range m.Meta.Models {
			models[x] = true
		}
		st.Nodes = append(st.Nodes, n)
	}
	fst := c.fsm.snapshot()
	for _, m := range fst.Models {
		if p, ok := fst.Pipelines[m.Name]; ok {
			m.Stages = adminStages(p) // pipelines.go
		}
		st.Models = append(st.Models, m)
		models[m.Name] = true
	}
	st.Installs = c.modelInstalls() // models.go
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
