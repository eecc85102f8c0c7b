package coordinator

// Model registry and distribution (docs/cluster.md, "Model placement and distribution"):
//
//   - `macpool models add|rm|ls` talk to the admin endpoints below; entries
//     they add are Managed and replicated by Raft (cmdRegisterModel,
//     cmdRemoveModel; placement in cmdSetAssignment).
//   - The Raft leader places managed models on workers (placement.go)
//     whenever membership changes, and learns a model's size and digest
//     from the first worker that reports them.
//   - Workers ask any coordinator for their assignment (request/reply on
//     cluster.SubjectModelAssigned) and report their progress
//     (cluster.SubjectModelProgress); every coordinator keeps the last
//     report of each live worker for `models ls` and the dashboard.
//
// The api package serves the registry under ModelsPath (api/admin lists
// the endpoints) through ModelStatuses, AddManagedModel and
// RemoveManagedModel.

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
)

// cmdSetAssignment stores the leader's placement of one managed model
// (explicit value: drain's commands start at 32).
const cmdSetAssignment cmdType = 16

// ModelsPath is the admin endpoint of the model registry.
const ModelsPath = admin.ModelsPath

// ErrModelNotFound is returned by RemoveManagedModel for a name not in the registry.
var ErrModelNotFound = admin.ErrModelNotFound

// The registry's wire types live in api/admin (the HTTP layer and the CLI
// use them without importing the coordinator).
type (
	AddModelRequest  = admin.AddModelRequest
	WorkerModelState = admin.WorkerModelState
	ModelStatus      = admin.ModelStatus
)

// applySetAssignment runs under f.mu (from apply).
func (f *fsm) applySetAssignment(body []byte) error {
	var c placementCmd
	if err := json.Unmarshal(body, &c); err != nil {
		return fmt.Errorf("set assignment: %w", err)
	}
	if _, ok := f.state.Models[c.Model]; !ok {
		return fmt.Errorf("set assignment: model %q is not registered", c.Model)
	}
	if f.state.Assign == nil {
		f.state.Assign = map[string][]string{}
	}
	w := slices.Clone(c.Workers)
	slices.Sort(w)
	f.state.Assign[c.Model] = w
	return nil
}

// modelState is a coordinator's view of the workers' install progress.
type modelState struct {
	mu       sync.Mutex
	progress map[string]map[string]progressEntry // worker -> model -> last report
	// removed remembers (leader) managed models removed recently, so that
	// the gossip-driven registration in reconcile does not bring them back
	// while their workers unload them.
	removed map[string]time.Time
	managed map[string]bool // managed models seen in the last placement round
	// stageFails (leader) are the workers whose stage of a model failed,
	// by model, since when (pipelines.go, stageFailures).
	stageFails map[string]map[string]time.Time
}

// progressTTL: a report older than this is not shown (workers repeat
// theirs every poll interval, 2 s by default).
const progressTTL = 30 * time.Second

type progressEntry struct {
	cluster.ModelProgress
	at time.Time
}

func (s *modelState) report(p cluster.ModelProgress) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.progress == nil {
		s.progress = map[string]map[string]progressEntry{}
	}
	if s.progress[p.Worker] == nil {
		s.progress[p.Worker] = map[string]progressEntry{}
	}
	s.progress[p.Worker][p.Model] = progressEntry{p, time.Now()}
}

// recentlyRemoved reports whether model was a managed model removed in the
// last minute (leader only).
func (c *Coordinator) recentlyRemoved(model string) bool {
	c.models.mu.Lock()
	defer c.models.mu.Unlock()
	if c.models.managed[model] {
		// Managed in the last placement round and gone from the registry
		// now (the caller found it missing): removed just now.
		if c.models.removed == nil {
			c.models.removed = map[string]time.Time{}
		}
		c.models.removed[model] = time.Now()
		delete(c.models.managed, model)
		return true
	}
	t, ok := c.models.removed[model]
	return ok && time.Since(t) < time.Minute
}

// modelsLoop answers workers' assignment requests and collects their
// progress reports until ctx ends.
func (c *Coordinator) modelsLoop(ctx context.Context) {
	asub, err := c.nc.QueueSubscribe(cluster.SubjectModelAssigned, cluster.QueueModels, c.onAssignRequest)
	if err != nil {
		c.log.Error("subscribe model assignments", "err", err)
		return
	}
	defer asub.Unsubscribe()
	psub, err := c.nc.Subscribe(cluster.SubjectModelProgress, func(m *nats.Msg) {
		var p cluster.ModelProgress
		if err := json.Unmarshal(m.Data, &p); err != nil || p.Worker == "" || p.Model == "" {
			c.log.Debug("bad model progress", "err", err)
			return
		}
		c.models.report(p)
	})
	if err != nil {
		c.log.Error("subscribe model progress", "err", err)
		return
	}
	defer psub.Unsubscribe()
	<-ctx.Done()
}

func (c *Coordinator) onAssignRequest(m *nats.Msg) {
	var req cluster.AssignRequest
	var out cluster.Assignment
	if err := json.Unmarshal(m.Data, &req); err != nil || req.Worker == "" {
		out.Error = fmt.Sprintf("bad assignment request: %v", err)
	} else if !c.stateCurrent() { // restart.go: an error keeps the worker's models
		out.Error = "coordinator state still loading after a restart"
	} else {
		out = c.Assignment(req.Worker)
	}
	b, _ := json.Marshal(out)
	m.Respond(b)
}

// Assignment lists the managed models placed on worker.
func (c *Coordinator) Assignment(worker string) cluster.Assignment {
	st := c.fsm.snapshot()
	out := cluster.Assignment{Models: []cluster.AssignedModel{}}
	for name, workers := range st.Assign {
		spec, ok := st.Models[name]
		if !ok || !slices.Contains(workers, worker) {
			continue
		}
		out.Models = append(out.Models, cluster.AssignedModel{
			Name: name, Source: spec.Source, SourceNode: spec.SourceNode, Digest: spec.Digest, Workers: slices.Clone(workers),
		})
	}
	for _, am := range pipelineAssignments(st, worker) { // pipelines.go
		if !slices.ContainsFunc(out.Models, func(x cluster.AssignedModel) bool { return x.Name == am.Name }) {
			out.Models = append(out.Models, am)
		}
	}
	slices.SortFunc(out.Models, func(a, b cluster.AssignedModel) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// modelSpecFromRequest validates req and builds the registry entry.
func modelSpecFromRequest(req AddModelRequest) (ModelSpec, *openai.Error) {
	src := strings.TrimSpace(req.Source)
	if src == "" {
		return ModelSpec{}, openai.InvalidRequest("source", "source must be a Hugging Face reference or a local path")
	}
	name := strings.TrimSpace(req.Name)
	if name == "" {
		if strings.HasPrefix(src, "/") || strings.HasPrefix(src, ".") || strings.HasPrefix(src, "~") {
			name = path.Base(strings.TrimRight(src, "/"))
		} else {
			name = strings.TrimPrefix(src, "hf.co/")
		}
	}
	if len(name) > 128 || strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 || name == "." || name == "/" {
		return ModelSpec{}, openai.InvalidRequest("name", "model name %q must be 1-128 printable characters without spaces", name)
	}
	if req.Size < 0 {
		return ModelSpec{}, openai.InvalidRequest("size", "size %d must not be negative", req.Size)
	}
	if req.Replicas < 0 {
		return ModelSpec{}, openai.InvalidRequest("replicas", "replicas %d must not be negative", req.Replicas)
	}
	return ModelSpec{Name: name, Source: src, SourceNode: req.SourceNode, Size: req.Size, Replicas: req.Replicas, Managed: true}, nil
}

// AddManagedModel registers a model for placement (replacing an entry of
// the same name).
func (c *Coordinator) AddManagedModel(ctx context.Context, req AddModelRequest) (ModelSpec, error) {
	spec, oe := modelSpecFromRequest(req)
	if oe != nil {
		return ModelSpec{}, oe
	}
	if old, ok := c.fsm.snapshot().Models[spec.Name]; ok && old.Source == spec.Source {
		if spec.Size == 0 {
			spec.Size = old.Size
		}
		spec.Digest = old.Digest
		spec.Layout = old.Layout
	}
	spec.Created = time.Now().Unix()
	if err := c.propose(ctx, cmdRegisterModel, spec); err != nil {
		return ModelSpec{}, err
	}
	c.log.Info("model added", "model", spec.Name, "source", spec.Source, "node", spec.SourceNode)
	return spec, nil
}

// RemoveManagedModel removes a model from the registry; its workers unload it.
func (c *Coordinator) RemoveManagedModel(ctx context.Context, name string) error {
	spec, ok := c.fsm.snapshot().Models[name]
	if !ok {
		return fmt.Errorf("%w: %q", ErrModelNotFound, name)
	}
	if spec.Managed {
		// Tombstone before the removal commits: workers still gossip the
		// model until they unload it, and the leader's reconcile would
		// otherwise register it again as a worker's own model if no
		// placement round saw it managed yet. (A removal forwarded from
		// another coordinator is caught by recentlyRemoved's inference.)
		c.models.mu.Lock()
		if c.models.removed == nil {
			c.models.removed = map[string]time.Time{}
		}
		c.models.removed[name] = time.Now()
		c.models.mu.Unlock()
	}
	if err := c.RemoveModel(ctx, name); err != nil {
		return err
	}
	c.log.Info("model removed", "model", name)
	return nil
}

// ModelStatuses lists the registry with placement and live progress.
func (c *Coordinator) ModelStatuses() []ModelStatus {
	st := c.fsm.snapshot()
	serving := map[string][]string{}
	alive := map[string]bool{}
	for _, m := range c.ml.Members() {
		if m.Meta.Role != cluster.RoleWorker {
			continue
		}
		alive[m.Name] = true
		for _, x := range m.Meta.Models {
			serving[x] = append(serving[x], m.Name)
		}
	}
	c.models.mu.Lock()
	defer c.models.mu.Unlock()
	out := []ModelStatus{}
	for name, spec := range st.Models {
		ms := ModelStatus{ModelSpec: spec, Assigned: slices.Clone(st.Assign[name]), Serving: serving[name], Workers: []WorkerModelState{}}
		if p, ok := st.Pipelines[name]; ok { // pipelines.go: the stage workers are its placement
			ms.Stages, ms.Epoch = adminStages(p), p.Epoch
			for _, s := range p.Stages {
				ms.Assigned = append(ms.Assigned, s.Worker)
			}
		}
		if seed := st.Seeds[name]; seed != "" && !slices.Contains(ms.Assigned, seed) {
			ms.Assigned = append(ms.Assigned, seed)
		}
		if ms.Assigned == nil {
			ms.Assigned = []string{}
		}
		if ms.Serving == nil {
			ms.Serving = []string{}
		}
		slices.Sort(ms.Serving)
		seen := map[string]bool{}
		for _, w := range ms.Assigned {
			seen[w] = true
			ws := WorkerModelState{Worker: w, State: "assigned"}
			if p, ok := c.models.progress[w][name]; ok && alive[w] && time.Since(p.at) < progressTTL {
				ws = WorkerModelState{Worker: w, State: p.State, Bytes: p.Bytes, Total: p.Total, From: p.From, Error: p.Error, Stage: p.Stage}
			} else if !alive[w] {
				ws.State = "gone"
			}
			ms.Workers = append(ms.Workers, ws)
		}
		for _, w := range ms.Serving {
			if !seen[w] {
				ms.Workers = append(ms.Workers, WorkerModelState{Worker: w, State: "serving"})
			}
		}
		out = append(out, ms)
	}
	slices.SortFunc(out, func(a, b ModelStatus) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// placeModels is the leader's placement round (called from reconcile).
func (c *Coordinator) placeModels(members []cluster.Member, st State) {
	// Tombstones for managed models that disappeared since the last round.
	c.models.mu.Lock()
	if c.models.removed == nil {
		c.models.removed = map[string]time.Time{}
	}
	now := make(map[string]bool)
	for name, spec := range st.Models {
		if spec.Managed {
			now[name] = true
		}
	}
	for name := range c.models.managed {
		if !now[name] {
			c.models.removed[name] = time.Now()
		}
	}
	for name, t := range c.models.removed {
		if now[name] || time.Since(t) > time.Minute {
			delete(c.models.removed, name)
		}
	}
	c.models.managed = now
	// Learn sizes and digests from the workers' reports.
	var updates []ModelSpec
	for name, spec := range st.Models {
		if !spec.Managed || (spec.Size > 0 && spec.Digest != "" && spec.Layout != nil) {
			continue
		}
		for _, byModel := range c.models.progress {
			p, ok := byModel[name]
			if !ok {
				continue
			}
			changed := false
			if spec.Layout == nil && p.Layout != nil && len(p.Layout.Layers) > 0 {
				// A report with a layout comes from a worker holding all the
				// files: its Total and Digest are the model's too.
				spec.Layout, changed = p.Layout, true
				if spec.Size == 0 && p.Total > 0 {
					spec.Size = p.Total
				}
				if spec.Digest == "" && p.Digest != "" {
					spec.Digest = p.Digest
				}
			}
			// Only a ready worker's numbers are the model's (while
			// downloading from the source, Total is one file's size).
			if p.State != cluster.ModelReady {
				if changed {
					updates = append(updates, spec)
					break
				}
				continue
			}
			if spec.Size == 0 && p.Total > 0 {
				spec.Size, changed = p.Total, true
			}
			if spec.Digest == "" && p.Digest != "" {
				spec.Digest, changed = p.Digest, true
			}
			if changed {
				updates = append(updates, spec)
				break
			}
		}
	}
	c.models.mu.Unlock()
	for _, spec := range updates {
		if err := c.applyCmd(cmdRegisterModel, spec); err != nil {
			c.log.Warn("update model size", "model", spec.Name, "err", err)
		}
		st.Models[spec.Name] = spec
	}
	if len(now) == 0 {
		return
	}
	var workers []PlaceWorker
	for _, m := range members {
		// Only workers that run a model store take placed models.
		if m.Meta.Role != cluster.RoleWorker || m.Meta.Store == "" || m.Meta.Leaving {
			continue
		}
		workers = append(workers, PlaceWorker{Name: m.Name, MemoryMB: m.Meta.MemoryMB, GPUWorkingMB: m.Meta.GPUWorkingMB, MemLimit: m.Meta.MemLimit, KVBytes: m.Meta.KVBytes, Serving: m.Meta.Models})
	}
	models := make([]ModelSpec, 0, len(st.Models))
	for _, m := range st.Models {
		models = append(models, m)
	}
	pc := c.cfg.Placement
	if pc.UsableFraction <= 0 {
		pc = DefaultPlacementConfig()
	}
	placed, free := place(pc, models, workers, st.Assign)
	young := c.placementYoung()                                 // restart.go
	defer c.pipelineRound(pc, st, placed, free, members, young) // pipelines.go: models no worker holds whole
	live := map[string]bool{}
	for _, w := range workers {
		live[w.Name] = true
	}
	for name, ws := range placed {
		old, ok := st.Assign[name]
		if young {
			if kept := keepAbsent(old, ws, live); !slices.Equal(kept, ws) {
				c.log.Debug("not withdrawing absent workers yet: the cluster view is younger than the grace period", "model", name, "workers", old, "would_be", ws)
				ws = kept
			}
		}
		// The pipeline round sees what is applied: a model kept whole is
		// not also pipelined.
		placed[name] = ws
		if ok && slices.Equal(old, ws) {
			continue
		}
		c.log.Info("placing model", "model", name, "workers", ws, "size", st.Models[name].Size)
		if err := c.applyCmd(cmdSetAssignment, placementCmd{Model: name, Workers: ws}); err != nil {
			c.log.Warn("set model placement", "model", name, "err", err)
		}
	}
}

// modelInstalls maps each managed model with a placement to its workers'
// install states (Status, for the dashboard).
func (c *Coordinator) modelInstalls() map[string][]WorkerModelState {
	out := map[string][]WorkerModelState{}
	for _, ms := range c.ModelStatuses() {
		if ms.Managed && len(ms.Workers) > 0 {
			out[ms.Name] = ms.Workers
		}
	}
	return out
}
