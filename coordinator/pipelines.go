package coordinator

// Pipelined models (docs/cluster.md, "Pipelined models"): a managed model
// that fits no single worker (weights + the per-model KV budget) runs split
// by decoder layers over several workers.
//
//   - Its layout (bytes per layer, embedding, head, KV per token) comes
//     from a worker that holds its files: while it is unknown the leader
//     gives the model to one seed worker "store only" (get the files,
//     report the layout, load nothing).
//   - The leader then computes a pipeline.Plan with pipeline.Place from the
//     workers' room left after the whole models (a --memory-limit caps it;
//     each stage needs its weights ×1.1 plus its worker's KV budget: the
//     worker's --kv-bytes, gossiped, else the placement's KVBudget) and
//     stores it as Raft state (cmdSetPipeline); every change gets a new
//     Epoch (assigned by Apply, so it only grows). A plan is kept while its
//     workers live, keep their pipeline address and still have room (no
//     needless moves); a stage whose worker died or drains is re-placed on
//     the survivors and spares. Within the placement grace after a leader
//     change no stage worker is withdrawn (restart.go).
//   - A stage worker that reports its stage failed for the plan's epoch
//     (ModelProgress.StageFailed: the stage did not load, or its pipeline
//     was lost and not re-connected) gets no stage of the model for
//     stageFailWait: the model is re-placed without it, or, when no
//     placement is left, its plan is removed, so that its requests fail
//     with the 503 of a model no worker serves instead of queueing.
//   - Each stage worker gets the plan in its assignment (Assignment) and
//     fetches only its stage's files and tensor ranges; the first stage's
//     worker serves the model's jobs, so routing sends them only there.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/pipeline"
)

// cmdSetPipeline stores (or, with a nil Plan, removes) a pipelined model's
// plan and seed (explicit value: the other ranges are taken).
const cmdSetPipeline cmdType = 17

// pipelineCmd is the body of cmdSetPipeline. The Epoch of Plan is ignored:
// Apply gives the plan the model's next epoch.
type pipelineCmd struct {
	Model string         `json:"model"`
	Plan  *pipeline.Plan `json:"plan,omitempty"`
	// Seed is the worker that holds the whole model's files for the stages
	// ("" keeps none).
	Seed string `json:"seed,omitempty"`
}

// applySetPipeline runs under f.mu (from apply). It is deterministic: the
// epoch is the last one stored for the model plus one.
func (f *fsm) applySetPipeline(body []byte) error {
	var c pipelineCmd
	if err := json.Unmarshal(body, &c); err != nil {
		return fmt.Errorf("set pipeline: %w", err)
	}
	spec, ok := f.state.Models[c.Model]
	if !ok {
		return fmt.Errorf("set pipeline: model %q is not registered", c.Model)
	}
	if f.state.Pipelines == nil {
		f.state.Pipelines = map[string]pipeline.Plan{}
	}
	if f.state.Seeds == nil {
		f.state.Seeds = map[string]string{}
	}
	if f.state.Epochs == nil {
		f.state.Epochs = map[string]uint64{}
	}
	if c.Seed == "" {
		delete(f.state.Seeds, c.Model)
	} else {
		f.state.Seeds[c.Model] = c.Seed
	}
	if c.Plan == nil {
		delete(f.state.Pipelines, c.Model)
		return nil
	}
	if c.Plan.Model != c.Model {
		return fmt.Errorf("set pipeline: plan of model %q given for %q", c.Plan.Model, c.Model)
	}
	if spec.Layout == nil {
		return fmt.Errorf("set pipeline: model %q has no layout", c.Model)
	}
	if err := c.Plan.Validate(len(spec.Layout.Layers)); err != nil {
		return fmt.Errorf("set pipeline: %w", err)
	}
	p := pipeline.Plan{Model: c.Model, Epoch: f.state.Epochs[c.Model] + 1, Stages: slices.Clone(c.Plan.Stages)}
	f.state.Epochs[c.Model] = p.Epoch
	f.state.Pipelines[c.Model] = p
	return nil
}

// clonePipelines copies the pipeline part of a State.
func clonePipelines(s State, c *State) {
	c.Pipelines = make(map[string]pipeline.Plan, len(s.Pipelines))
	for k, p := range s.Pipelines {
		p.Stages = slices.Clone(p.Stages)
		c.Pipelines[k] = p
	}
	c.Seeds = make(map[string]string, len(s.Seeds))
	for k, v := range s.Seeds {
		c.Seeds[k] = v
	}
	c.Epochs = make(map[string]uint64, len(s.Epochs))
	for k, v := range s.Epochs {
		c.Epochs[k] = v
	}
}

// modelSize converts a reported layout for pipeline.Place, with the
// placement's load overhead on the weights (the same rule as
// PlacementConfig.Need for a whole model).
func (p PlacementConfig) modelSize(l *admin.ModelLayout) pipeline.ModelSize {
	scale := func(b int64) int64 { return b + int64(float64(b)*p.Overhead) }
	m := pipeline.ModelSize{Embed: scale(l.Embed), Head: scale(l.Head),
		KVPerToken: slices.Clone(l.KVPerToken), StatePerSeq: slices.Clone(l.StatePerSeq)}
	for _, b := range l.Layers {
		m.Layers = append(m.Layers, scale(b))
	}
	return m
}

// stageBudget is what every stage holds besides its weights: the per-model
// KV budget, so that a one-stage plan needs what a whole placement needs.
// A worker whose gossiped --kv-bytes differs offers its room less the
// difference (pipeWorker.kv).
func (p PlacementConfig) stageBudget() pipeline.Budget {
	return pipeline.Budget{Overhead: p.KVBudget}
}

// stageFailWait is how long a worker whose stage of a model failed gets no
// stage of that model.
const stageFailWait = time.Minute

// PipelinePlace splits a model of layout l over workers (Free: the room
// each offers it) as the leader does: pipeline.Place with this config's
// load overhead on the weights and its KV budget per stage, two stages at
// least.
func (p PlacementConfig) PipelinePlace(l *admin.ModelLayout, workers []pipeline.Worker) ([]pipeline.Assignment, error) {
	size, budget := p.modelSize(l), p.stageBudget()
	as, err := pipeline.Place(size, budget, workers)
	if err == nil && len(as) == 1 {
		// One worker holds it by the stage rule (the whole rule also
		// counts non-weight files): a pipeline has two stages at least.
		ws := slices.Clone(workers)
		for i := range ws {
			ws[i].Free = min(ws[i].Free, as[0].Need-1)
		}
		as, err = pipeline.Place(size, budget, ws)
	}
	return as, err
}

// pipeWorker is a candidate stage worker in a placement round.
type pipeWorker struct {
	name, addr, store string
	room              int64
	// kv is the KV budget a stage here holds (Meta.KVBytes, the worker's
	// --kv-bytes); 0: the placement's KVBudget.
	kv int64
}

// kvExtra is what a stage on w holds beyond the budget's Overhead.
func (w pipeWorker) kvExtra(b pipeline.Budget) int64 {
	if w.kv <= 0 {
		return 0
	}
	return w.kv - b.Overhead
}

// placePipelines is the leader's pipeline round for the managed models
// that got no whole placement (placed[name] empty), over the workers' room
// left (free); failed[model] are the workers that get no stage of it (their
// stage failed). It returns the commands that change the state.
func placePipelines(pc PlacementConfig, st State, placed map[string][]string, free map[string]int64, workers []pipeWorker, young bool, failed map[string]map[string]bool) []pipelineCmd {
	var names []string
	for name, spec := range st.Models {
		if spec.Managed {
			names = append(names, name)
		}
	}
	// Big models first, as for whole placement.
	slices.SortFunc(names, func(a, b string) int {
		if c := cmp.Compare(st.Models[b].Size, st.Models[a].Size); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	alive := map[string]pipeWorker{}
	for _, w := range workers {
		w.room = free[w.name]
		alive[w.name] = w
	}
	var cmds []pipelineCmd
	for _, name := range names {
		spec := st.Models[name]
		old, hadPlan := st.Pipelines[name]
		oldSeed := st.Seeds[name]
		if len(placed[name]) > 0 || (spec.Size == 0 && spec.Layout == nil) {
			// Served whole (or not known to be too big yet): no pipeline.
			if (hadPlan || oldSeed != "") && !(young && hadPlan) {
				cmds = append(cmds, pipelineCmd{Model: name})
			}
			continue
		}
		seed := chooseSeed(spec, oldSeed, alive)
		if spec.Layout == nil {
			// Too big for any worker, layout unknown: a seed gets the files.
			if seed != oldSeed || hadPlan {
				cmds = append(cmds, pipelineCmd{Model: name, Seed: seed})
			}
			continue
		}
		size := pc.modelSize(spec.Layout)
		budget := pc.stageBudget()
		bad := failed[name]
		stageFailed := hadPlan && slices.ContainsFunc(old.Stages, func(s pipeline.StageAddr) bool { return bad[s.Worker] })
		if hadPlan && !stageFailed && planHolds(old, size, budget, alive) {
			take(old, size, budget, alive)
			if seed != oldSeed {
				cmds = append(cmds, pipelineCmd{Model: name, Plan: &old, Seed: seed})
			}
			continue
		}
		var cands []pipeline.Worker
		for _, w := range workers {
			if w.addr != "" && !bad[w.name] {
				cands = append(cands, pipeline.Worker{Name: w.name, Free: alive[w.name].room - alive[w.name].kvExtra(budget)})
			}
		}
		as, err := pc.PipelinePlace(spec.Layout, cands)
		if err != nil {
			// A failed stage is news, not a young view: its plan goes.
			if hadPlan && (!young || stageFailed) {
				cmds = append(cmds, pipelineCmd{Model: name, Seed: seed})
			}
			continue
		}
		plan := pipeline.Plan{Model: name, Epoch: old.Epoch}
		for _, a := range as {
			plan.Stages = append(plan.Stages, pipeline.StageAddr{Worker: a.Worker, Addr: alive[a.Worker].addr, First: a.Stage.First, Last: a.Stage.Last})
		}
		if hadPlan && young && !stageFailed && withdrawsStage(old, plan) {
			// A stage worker may still be rejoining after a restart.
			continue
		}
		take(plan, size, budget, alive)
		cmds = append(cmds, pipelineCmd{Model: name, Plan: &plan, Seed: seed})
	}
	return cmds
}

// chooseSeed picks the worker that holds a pipelined model's files: its
// source node, else the current seed while it lives, else the first live
// worker by name that runs a model store.
func chooseSeed(spec ModelSpec, old string, alive map[string]pipeWorker) string {
	if spec.SourceNode != "" {
		return spec.SourceNode
	}
	if _, ok := alive[old]; ok && old != "" {
		return old
	}
	var names []string
	for n, w := range alive {
		if w.store != "" {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return old
	}
	return names[0]
}

// stageNeed is the memory stage s of a model of size m needs on worker w.
func stageNeed(m pipeline.ModelSize, b pipeline.Budget, s pipeline.StageAddr, w pipeWorker) int64 {
	need := b.Overhead + w.kvExtra(b)
	for i := s.First; i < s.Last && i < len(m.Layers); i++ {
		need += m.Layers[i] + int64(b.Tokens)*m.KVPerToken[i] + int64(b.Seqs)*m.StatePerSeq[i]
	}
	if s.First == 0 {
		need += m.Embed
	}
	if s.Last == len(m.Layers) {
		need += m.Head
	}
	return need
}

// planHolds reports whether every stage worker of p is alive at the same
// pipeline address and still has room for its stage.
func planHolds(p pipeline.Plan, m pipeline.ModelSize, b pipeline.Budget, alive map[string]pipeWorker) bool {
	if p.Validate(len(m.Layers)) != nil {
		return false
	}
	for _, s := range p.Stages {
		w, ok := alive[s.Worker]
		if !ok || w.addr == "" || w.addr != s.Addr || w.room < stageNeed(m, b, s, w) {
			return false
		}
	}
	return true
}

// take subtracts p's stages from their workers' room.
func take(p pipeline.Plan, m pipeline.ModelSize, b pipeline.Budget, alive map[string]pipeWorker) {
	for _, s := range p.Stages {
		if w, ok := alive[s.Worker]; ok {
			w.room -= stageNeed(m, b, s, w)
			alive[s.Worker] = w
		}
	}
}

// withdrawsStage reports whether next drops a worker of old.
func withdrawsStage(old, next pipeline.Plan) bool {
	for _, s := range old.Stages {
		if next.Index(s.Worker) < 0 {
			return true
		}
	}
	return false
}

// pipelineRound runs placePipelines on the leader and applies its commands
// (from placeModels).
func (c *Coordinator) pipelineRound(pc PlacementConfig, st State, placed map[string][]string, free map[string]int64, members []cluster.Member, young bool) {
	var workers []pipeWorker
	for _, m := range members {
		if m.Meta.Role != cluster.RoleWorker || m.Meta.Store == "" || m.Meta.Leaving {
			continue
		}
		workers = append(workers, pipeWorker{name: m.Name, addr: m.Meta.Pipeline, store: m.Meta.Store, kv: m.Meta.KVBytes})
	}
	for _, cmd := range placePipelines(pc, st, placed, free, workers, young, c.stageFailures(st)) {
		if cmd.Plan != nil {
			c.log.Info("placing pipelined model", "model", cmd.Model, "stages", stagesText(cmd.Plan), "seed", cmd.Seed)
		} else {
			c.log.Info("pipeline placement", "model", cmd.Model, "plan", "none", "seed", cmd.Seed)
		}
		if err := c.applyCmd(cmdSetPipeline, cmd); err != nil {
			c.log.Warn("set pipeline", "model", cmd.Model, "err", err)
		}
	}
}

// stageFailures are, by model, the workers that get no stage of it: each
// reported its stage of the model's current plan failed (StageFailed, for
// that epoch, within progressTTL) less than stageFailWait ago. Leader
// memory: a new leader learns them again from the reports.
func (c *Coordinator) stageFailures(st State) map[string]map[string]bool {
	c.models.mu.Lock()
	defer c.models.mu.Unlock()
	if c.models.stageFails == nil {
		c.models.stageFails = map[string]map[string]time.Time{}
	}
	now := time.Now()
	for w, byModel := range c.models.progress {
		for model, p := range byModel {
			plan, ok := st.Pipelines[model]
			if !p.StageFailed || !ok || p.Epoch != plan.Epoch || plan.Index(w) < 0 || now.Sub(p.at) > progressTTL {
				continue
			}
			if c.models.stageFails[model] == nil {
				c.models.stageFails[model] = map[string]time.Time{}
			}
			if _, seen := c.models.stageFails[model][w]; !seen {
				c.log.Warn("pipeline stage failed; re-placing the model without its worker", "model", model, "worker", w, "epoch", p.Epoch, "err", p.Error)
				c.models.stageFails[model][w] = now
			}
		}
	}
	out := map[string]map[string]bool{}
	for model, ws := range c.models.stageFails {
		for w, t := range ws {
			if now.Sub(t) > stageFailWait {
				delete(ws, w)
				continue
			}
			if out[model] == nil {
				out[model] = map[string]bool{}
			}
			out[model][w] = true
		}
		if len(ws) == 0 {
			delete(c.models.stageFails, model)
		}
	}
	return out
}

func stagesText(p *pipeline.Plan) string {
	s := ""
	for i, st := range p.Stages {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s[%d,%d)", st.Worker, st.First, st.Last)
	}
	return s
}

// wirePlan is p as a worker gets it.
func wirePlan(p pipeline.Plan) *cluster.PipelinePlan {
	out := &cluster.PipelinePlan{Model: p.Model, Epoch: p.Epoch}
	for _, s := range p.Stages {
		out.Stages = append(out.Stages, cluster.PipelineStage{Worker: s.Worker, Addr: s.Addr, First: s.First, Last: s.Last})
	}
	return out
}

// adminStages is p as models ls, status and the dashboard show it.
func adminStages(p pipeline.Plan) []admin.Stage {
	out := make([]admin.Stage, 0, len(p.Stages))
	for _, s := range p.Stages {
		out = append(out, admin.Stage{Worker: s.Worker, First: s.First, Last: s.Last})
	}
	return out
}

// pipelineAssignments are worker's pipelined models: a stage of a plan, or
// the seed's store-only entry.
func pipelineAssignments(st State, worker string) []cluster.AssignedModel {
	var out []cluster.AssignedModel
	for name, spec := range st.Models {
		seed := st.Seeds[name]
		p, ok := st.Pipelines[name]
		am := cluster.AssignedModel{Name: name, Source: spec.Source, SourceNode: spec.SourceNode, Digest: spec.Digest, Workers: []string{}}
		if seed != "" {
			am.Workers = []string{seed} // the one that fetches from the source
		}
		switch {
		case ok && p.Index(worker) >= 0:
			am.Plan = wirePlan(p)
			if spec.Layout != nil {
				am.Ranges = spec.Layout.Ranges
			}
		case seed == worker:
			am.StoreOnly = true
		default:
			continue
		}
		out = append(out, am)
	}
	return out
}

// pipelined reports whether model runs (or is being placed) as a pipeline:
// its jobs then wait in the queue while no worker serves it, and a failed
// one waits there for the re-placed pipeline.
func (c *Coordinator) pipelined(model string) bool {
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	_, ok := c.fsm.state.Pipelines[model]
	return ok
}
