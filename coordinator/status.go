package coordinator

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
)

// StatusPath is where StatusHandler is mounted on the HTTP API.
const StatusPath = "/v1/cluster/status"

// NodeStatus is one live node in a Status.
type NodeStatus struct {
	Name     string   `json:"name"`
	Role     string   `json:"role"`
	Addr     string   `json:"gossip_addr"`
	Version  string   `json:"version,omitempty"`
	Chip     string   `json:"chip,omitempty"`
	Cores    int      `json:"cores,omitempty"`
	MemoryMB int64    `json:"memory_mb,omitempty"`
	Models   []string `json:"models,omitempty"`
	Slots    int      `json:"slots,omitempty"`
	Running  int      `json:"running"`
	Free     int      `json:"free"`
	Ready    bool     `json:"ready,omitempty"`   // worker: pulling jobs
	Leaving  bool     `json:"leaving,omitempty"` // draining or leaving: gets no new work
	Raft     string   `json:"raft,omitempty"`    // "leader" | "voter" | "" for coordinators outside the configuration
	HTTP     string   `json:"http,omitempty"`
	NATS     string   `json:"nats,omitempty"`

	// Apple GPU of a Mac (gossiped; zero elsewhere): cores and the
	// recommended working set.
	GPUCores     int   `json:"gpu_cores,omitempty"`
	GPUWorkingMB int64 `json:"gpu_working_set_mb,omitempty"`

	// Worker KV cache from its prefix summaries (routing.go): blocks in
	// the pool and blocks free or evictable now; 0 if not reported.
	KVBlocks     int `json:"kv_blocks,omitempty"`
	KVFreeBlocks int `json:"kv_free_blocks,omitempty"`
}

// Status is the cluster as seen by one coordinator (GET /v1/cluster/status).
type Status struct {
	Coordinator string            `json:"coordinator"`
	Leader      string            `json:"leader"`
	Nodes       []NodeStatus      `json:"nodes"`
	Queued      map[string]uint64 `json:"queued"` // model -> jobs waiting in its queue
	Models      []ModelSpec       `json:"models"`
	// Installs: managed model -> its placed workers' install state
	// (distrib, models.go), for the dashboard's progress.
	Installs map[string][]WorkerModelState `json:"installs,omitempty"`
}

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
	for _, m := range c.fsm.snapshot().Models {
		st.Models = append(st.Models, m)
		models[m.Name] = true
	}
	st.Installs = c.modelInstalls() // distrib: models.go
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

// StatusHandler serves Status as JSON. Once API keys are stored it wants
// one (Authorization: Bearer KEY), like the OpenAI routes.
func (c *Coordinator) StatusHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", "GET")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		// Same rule as the API: open while no keys are stored.
		scheme, key, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") {
			key = ""
		}
		if _, err := c.Check(r.Context(), strings.TrimSpace(key)); err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			json.NewEncoder(w).Encode(openai.ErrorResponse{Error: unauthorized("a valid API key is required")})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(c.Status(r.Context()))
	})
}
