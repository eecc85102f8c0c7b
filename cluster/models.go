package cluster

import "github.com/macpool/macpool/api/admin"

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
	// StoreOnly: the model fits no worker whole and its layout is not
	// known yet; get its files, report their layout (ModelProgress.Layout)
	// and load nothing. The leader then splits it into pipeline stages.
	StoreOnly bool `json:"store_only,omitempty"`
	// Plan, if set, is the pipeline plan of the model and this worker runs
	// one of its stages (Plan.Stages[i].Worker == the asking worker):
	// fetch only that stage's files and tensor ranges, load the stage and
	// join the plan. Workers is then empty.
	Plan *PipelinePlan `json:"plan,omitempty"`
	// Ranges, with Plan, are where the model's tensors lie in its files:
	// the stage's worker fetches only the chunks its ranges need.
	Ranges *admin.LayoutRanges `json:"ranges,omitempty"`
}

// PipelinePlan is pipeline.Plan on the wire (the same JSON): a pipelined
// model's stages in layer order, with each stage worker's pipeline
// listener. cluster does not import the pipeline package (it would pull
// the engine into every cluster user); the coordinator and the worker's
// stage loader convert.
type PipelinePlan struct {
	Model  string          `json:"model"`
	Epoch  uint64          `json:"epoch"`
	Stages []PipelineStage `json:"stages"`
}

// PipelineStage is pipeline.StageAddr on the wire: decoder layers [First, Last).
type PipelineStage struct {
	Worker string `json:"worker"`
	Addr   string `json:"addr"`
	First  int    `json:"first"`
	Last   int    `json:"last"`
}

// Index is the position of worker's stage in the plan, or -1.
func (p *PipelinePlan) Index(worker string) int {
	for i, s := range p.Stages {
		if s.Worker == worker {
			return i
		}
	}
	return -1
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
	ModelStored   = "stored"   // files held and offered to peers, nothing loaded (AssignedModel.StoreOnly)
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
	// Layout is the model's memory by layer, sent once the worker has all
	// its files (Total is then the model's size); the leader stores the
	// first one it gets (pipeline placement needs it).
	Layout *admin.ModelLayout `json:"layout,omitempty"`
	// Stage is the stage this worker installs, for a pipelined model
	// ("" for a whole model): "layers [F,L)" and the plan's epoch.
	Stage string `json:"stage,omitempty"`
	Epoch uint64 `json:"epoch,omitempty"`
	// StageFailed (with State failed): this worker cannot run its stage of
	// plan Epoch (the stage did not load, or its pipeline was lost and not
	// re-connected). The leader re-places the model without this worker
	// for a while, or removes its plan when no placement is left.
	StageFailed bool `json:"stage_failed,omitempty"`
}
