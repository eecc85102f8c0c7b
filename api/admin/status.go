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
	// BandwidthMBs is the memory bandwidth a worker gossips for pipeline
	// placement, MB/s (a Mac's published figure or a measured one; 0:
	// unknown).
	BandwidthMBs int64 `json:"memory_bandwidth_mb_s,omitempty"`

	// Worker KV cache from its prefix summaries: blocks in
	// the pool and blocks free or evictable now; 0 if not reported.
	KVBlocks     int `json:"kv_blocks,omitempty"`
	KVFreeBlocks int `json:"kv_free_blocks,omitempty"`
	// The same in tokens (positions) and bytes, where the worker says its
	// block size and block bytes.
	KVTokens     int   `json:"kv_tokens,omitempty"`
	KVFreeTokens int   `json:"kv_free_tokens,omitempty"`
	KVBytes      int64 `json:"kv_bytes,omitempty"`
	KVFreeBytes  int64 `json:"kv_free_bytes,omitempty"`

	// Started is when the node joined gossip (unix seconds; 0: an older
	// node that does not say); its uptime is Status.Time - Started.
	Started int64 `json:"started,omitempty"`
}

// ServedModel is what a worker reports about a model it serves (its
// prefix summaries; zero where the engine does not say).
type ServedModel struct {
	Model        string `json:"model"`
	Worker       string `json:"worker"`
	Context      int    `json:"context,omitempty"` // most prompt + completion tokens of a sequence
	Format       string `json:"format,omitempty"`  // safetensors | mlx | gguf
	Quantization string `json:"quantization,omitempty"`
	Size         int64  `json:"size,omitempty"` // bytes on disk
}

// Security says how the cluster is protected, as the answering
// coordinator is configured.
type Security struct {
	// ClusterSecret: gossip is encrypted and NATS and Raft run over
	// mutual TLS, all from the cluster secret; false: plaintext
	// (--insecure).
	ClusterSecret bool `json:"cluster_secret"`
	// API is who may call the API: "keys" (an API key is required),
	// "open" (no key, and the API listens beyond loopback: --open-api),
	// "loopback" (no key, only this machine can connect).
	API string `json:"api"`
	// Keys is the number of API keys stored.
	Keys int `json:"keys"`
}

// Security.API values.
const (
	APIKeys     = "keys"
	APIOpen     = "open"
	APILoopback = "loopback"
)

// RequestOutcome is a failed request: answered 4xx or 5xx, or ended by
// its client (499, Error "cancelled").
type RequestOutcome struct {
	Time    int64  `json:"time"` // unix milliseconds
	Status  int    `json:"status"`
	Model   string `json:"model,omitempty"` // as the client sent it ("" when refused before it was read)
	Kind    string `json:"kind,omitempty"`  // chat, completion, embedding, ...
	Error   string `json:"error"`           // error kind, as macpool_errors_total counts it
	Message string `json:"message"`         // the message the client got (truncated)
}

// Traffic is the answering coordinator's recent requests: counts over the
// last WindowS seconds (requests finished, of which errors were 4xx/5xx
// and cancelled 499), and the queue wait of the jobs taken in the last
// QueueWindowS seconds (milliseconds, nearest rank; 0 with no samples).
type Traffic struct {
	WindowS        int     `json:"window_s"`
	Requests       int     `json:"requests"`
	Errors         int     `json:"errors"`
	Cancelled      int     `json:"cancelled"`
	QueueWindowS   int     `json:"queue_window_s"`
	QueueWaits     int     `json:"queue_waits"`
	QueueWaitP50MS float64 `json:"queue_wait_p50_ms"`
	QueueWaitP95MS float64 `json:"queue_wait_p95_ms"`
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
	// Placement: managed model -> the workers the leader placed it on.
	Placement map[string][]string `json:"placement,omitempty"`
	// Served: what each worker reports about each model it serves.
	Served []ServedModel `json:"served,omitempty"`

	// Time is when the answering coordinator built this status (unix
	// milliseconds): uptimes are relative to it, not to a reader's clock.
	Time int64 `json:"time"`
	// Version of the answering coordinator.
	Version  string   `json:"version,omitempty"`
	Security Security `json:"security"`
	// Traffic and RecentErrors are what the answering coordinator saw
	// (each coordinator admits its own clients' requests); RecentErrors
	// newest first, at most 50.
	Traffic      Traffic          `json:"traffic"`
	RecentErrors []RequestOutcome `json:"recent_errors"`
}
