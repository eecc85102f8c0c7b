package admin

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

	// Worker KV cache from its prefix summaries: blocks in
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
	// Installs: managed model -> its placed workers' install state, for
	// the dashboard's progress.
	Installs map[string][]WorkerModelState `json:"installs,omitempty"`
}
