package admin

// ModelSpec is a registry entry. The coordinator also keeps it in its Raft
// state, so a change of its JSON is a change of the stored format.
type ModelSpec struct {
	Name         string `json:"name"`
	Source       string `json:"source,omitempty"`       // folder or Hugging Face repo id
	Format       string `json:"format,omitempty"`       // safetensors | mlx | gguf
	Quantization string `json:"quantization,omitempty"` // e.g. q4_0, 4bit; "" = unquantized
	Created      int64  `json:"created,omitempty"`      // unix seconds, set by the proposer
	// Entries added by `macpool models add` are Managed: the Raft leader
	// places them on workers.
	Managed    bool   `json:"managed,omitempty"`
	SourceNode string `json:"source_node,omitempty"` // worker holding a local-path Source ("" = any that has it)
	Size       int64  `json:"size,omitempty"`        // bytes of the model's files (0 = not known yet)
	Digest     string `json:"digest,omitempty"`      // modelstore manifest digest, once a worker reported it
	Replicas   int    `json:"replicas,omitempty"`    // workers to place it on; 0 = every worker it fits
	// Layout is the model's memory by layer, reported by the first worker
	// that has its files; the leader needs it to split a model that fits
	// no single worker into pipeline stages (nil = not known yet).
	Layout *ModelLayout `json:"layout,omitempty"`
	// Stages is the model's pipeline placement when it runs split over
	// several workers (in layer order; empty for a model served whole).
	// Filled in answers from the coordinator's pipeline plan; the registry
	// entry in the Raft state never holds it.
	Stages []Stage `json:"stages,omitempty"`
}

// ModelLayout is what pipeline placement knows of a model, in bytes.
type ModelLayout struct {
	// Layers is the weight bytes of each decoder layer.
	Layers []int64 `json:"layers"`
	// Embed is the token embedding (first stage); Head the final norm and
	// LM head (last stage; the embedding again when tied).
	Embed int64 `json:"embed"`
	Head  int64 `json:"head"`
	// KVPerToken is, per layer, the KV cache bytes of one cached position
	// (0 for linear-attention layers); StatePerSeq the recurrent state of
	// one sequence (0 for attention layers).
	KVPerToken  []int64 `json:"kv_per_token"`
	StatePerSeq []int64 `json:"state_per_seq"`
	// Ranges are where the tensors lie in the model's files, so that a
	// stage's worker fetches only its byte ranges (nil: fetch whole files).
	Ranges *LayoutRanges `json:"ranges,omitempty"`
}

// LayoutRanges is engine/checkpoint.Ranges on the wire (the same JSON):
// weight-file byte ranges by decoder layer, embedding, head, and the common
// ones (headers) every stage reads. Files without a range are read whole.
type LayoutRanges struct {
	Layers [][]FileRange `json:"layers"`
	Embed  []FileRange   `json:"embed"`
	Head   []FileRange   `json:"head"`
	Common []FileRange   `json:"common"`
}

// FileRange is bytes [Off, Off+Len) of the model file Path (relative to
// the model folder; the file name of a .gguf model).
type FileRange struct {
	Path string `json:"path"`
	Off  int64  `json:"off"`
	Len  int64  `json:"len"`
}

// Stage is one stage of a pipelined model: the worker running decoder
// layers [First, Last). The first stage also embeds tokens and serves the
// model's jobs; the last holds the final norm and LM head.
type Stage struct {
	Worker string `json:"worker"`
	First  int    `json:"first"`
	Last   int    `json:"last"`
}

// AddModelRequest is the body of POST /v1/admin/models.
type AddModelRequest struct {
	// Name clients use; default: the Hugging Face reference, or the base
	// name of a local path.
	Name string `json:"name,omitempty"`
	// Source is a Hugging Face reference (ORG/NAME[@REV][:FILE]) or a path
	// on SourceNode (or on the workers that have it).
	Source     string `json:"source"`
	SourceNode string `json:"source_node,omitempty"`
	Size       int64  `json:"size,omitempty"`     // bytes, if known (placement waits for a report otherwise)
	Replicas   int    `json:"replicas,omitempty"` // 0: every worker with room
}

// WorkerModelState is one worker's state for a model in ModelStatus.
type WorkerModelState struct {
	Worker string `json:"worker"`
	State  string `json:"state"` // a cluster.Model* state, "assigned" before the first report, "serving" for unmanaged models
	Bytes  int64  `json:"bytes,omitempty"`
	Total  int64  `json:"total,omitempty"`
	From   string `json:"from,omitempty"`
	Error  string `json:"error,omitempty"`
	// Stage is the worker's stage of a pipelined model ("layers [F,L)").
	Stage string `json:"stage,omitempty"`
}

// ModelStatus is a registry entry with its placement and progress.
type ModelStatus struct {
	ModelSpec
	Assigned []string           `json:"assigned"`        // placement (managed models)
	Epoch    uint64             `json:"epoch,omitempty"` // of the pipeline plan in Stages (0: none)
	Serving  []string           `json:"serving"`         // workers serving it now (gossip)
	Workers  []WorkerModelState `json:"workers"`
}
