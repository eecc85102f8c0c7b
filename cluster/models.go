package cluster

// Model distribution messages (docs/cluster.md, "Model placement and distribution"): a worker asks any
// coordinator which models the placement gives it, and reports how far it
// got installing each (fetch from peers or the source, load).
//
//	macpool.models.assigned      core NATS request (queue group of the coordinators),
//	                             worker -> coordinator: AssignRequest -> Assignment
//	macpool.models.progress      core NATS, worker -> coordinators: ModelProgress
const (
	SubjectModelAssigned = "macpool.models.assigned"
	SubjectModelProgress = "macpool.models.progress"
	// QueueModels is the coordinators' queue group for SubjectModelAssigned.
	QueueModels = "macpool-models"
)

// AssignRequest asks for the models placed on Worker.
type AssignRequest struct {
	Worker string `json:"worker"`
}

// AssignedModel is a registry entry as a worker needs it.
type AssignedModel struct {
	Name string `json:"name"`
	// Source is a Hugging Face reference or a local path (on SourceNode,
	// or on any worker that has it when SourceNode is empty).
	Source     string `json:"source"`
	SourceNode string `json:"source_node,omitempty"`
	// Digest is the expected modelstore manifest digest ("" = unknown).
	Digest string `json:"digest,omitempty"`
	// Workers are all the workers the model is placed on, sorted: the
	// first live one fetches from the source when no peer has the model
	// yet, the others wait for a peer (one download from the source per
	// cluster).
	Workers []string `json:"workers"`
}

// Assignment answers an AssignRequest.
type Assignment struct {
	Models []AssignedModel `json:"models"`
	Error  string          `json:"error,omitempty"`
}

// Install states a worker reports for a placed model.
const (
	ModelWaiting  = "waiting"  // for a peer that has it
	ModelFetching = "fetching" // from peers or the source
	ModelLoading  = "loading"  // into the engine
	ModelReady    = "ready"    // serving
	ModelFailed   = "failed"   // Error says why; retried
)

// ModelProgress is a worker's report on one placed model.
type ModelProgress struct {
	Worker string `json:"worker"`
	Model  string `json:"model"`
	State  string `json:"state"`
	Bytes  int64  `json:"bytes"`            // verified bytes on disk
	Total  int64  `json:"total"`            // model size (0 = not known yet)
	From   string `json:"from,omitempty"`   // "peers" | "source" | "local"
	Digest string `json:"digest,omitempty"` // manifest digest, once known
	Error  string `json:"error,omitempty"`
}
