package worker

// Pipelined models on a worker (docs/cluster.md, "Pipelined models"). A
// model that fits no single worker comes in the assignment either
//   - StoreOnly (this worker is its seed): get the whole files, offer them
//     to peers and report their layout; nothing is loaded; or
//   - with a Plan that names this worker a stage: fetch only that stage's
//     chunks from peers (the files it reads whole, and the chunks that
//     overlap its tensors' byte ranges), load the stage and join the plan
//     (ModelsConfig.LoadStage). The first stage's engine serves the
//     model's jobs, so only that worker gossips the model and pulls its
//     queue.
// A new plan (epoch) is a new assignment: the old install is unloaded and
// the new one started. When a link between stages breaks under a running
// job the engine fails it with ErrEngineInterrupted: the job goes back to
// the coordinator (a handoff, resumed from its tokens) and runs here again
// once the stages re-connected. When the pipeline is lost for good (a
// stage died, or the ring did not come up again: Stage.Lost) the job fails
// with ErrEngineLost and the model takes no more jobs here until its plan
// changes; a stage that does not load, or whose pipeline is lost, is
// reported failed (ModelProgress.StageFailed) so that the leader re-places
// the model without this worker.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/modelstore"
)

// ErrEngineLost is wrapped by an engine's error when the engine can run no
// more jobs through no fault of the job (a pipeline stage of its model
// died). The worker hands the job back to the coordinator, which resumes
// it elsewhere from its tokens, and stops taking the model's jobs.
var ErrEngineLost = errors.New("worker: engine lost")

// ErrEngineInterrupted is wrapped by an engine's error when a job could
// not finish through no fault of the job while the engine still serves (a
// link between pipeline stages broke and is being re-connected). The worker
// hands the job back, which resumes it from its tokens, and keeps the model.
var ErrEngineInterrupted = errors.New("worker: engine interrupted")

// Stage is a pipeline stage that ModelsConfig.LoadStage loaded and joined
// to its plan.
type Stage struct {
	// Engine serves the model's jobs on the first stage; nil on the others.
	Engine Engine
	// Close leaves the plan and releases the stage.
	Close func() error
	// Lost, if not nil, is closed when the stage can serve no more (its
	// pipeline never came up, or broke and was not re-connected in time);
	// Err then says why. The worker reports the stage failed, for the
	// plan's epoch, and unloads it.
	Lost <-chan struct{}
	Err  func() error
}

// watchStage reports pm's stage failed and unloads it when its pipeline is
// lost for good; it returns when ctx (the install's) ends first.
func (w *Worker) watchStage(ctx context.Context, pm *placedModel, st Stage) {
	select {
	case <-ctx.Done():
		return
	case <-st.Lost:
	}
	if ctx.Err() != nil {
		return // lost because it is being unloaded (Close, or no more healing)
	}
	msg := "pipeline lost"
	if st.Err != nil {
		if err := st.Err(); err != nil {
			msg = err.Error()
		}
	}
	w.log.Warn("pipelined model's stage lost; reporting it failed", "model", pm.name, "assignment", pm.key, "err", msg)
	w.setProgress(pm, func(p *cluster.ModelProgress) { p.State, p.Error, p.StageFailed = cluster.ModelFailed, msg, true })
	w.engineLost(pm)
}

// assignKey identifies what an assignment asks of this worker: a change is
// a new install.
func assignKey(m cluster.AssignedModel) string {
	switch {
	case m.Plan != nil:
		return fmt.Sprintf("plan %d", m.Plan.Epoch)
	case m.StoreOnly:
		return "store"
	}
	return "whole"
}

// advertised is addr with an unspecified host replaced by gossip's.
func advertised(addr, gossip string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host, _, _ = net.SplitHostPort(gossip)
	}
	return net.JoinHostPort(host, port)
}

// engineLost stops the placed engine of pm from taking jobs (its pipeline
// broke) and unloads it; the model is installed again with its next plan.
// An install already replaced by a newer plan's (being unloaded) stays
// as it is: the newer one is not touched.
func (w *Worker) engineLost(pm *placedModel) {
	p := &w.placed
	p.mu.Lock()
	cur, ok := p.models[pm.name]
	ok = ok && cur == pm
	if ok {
		delete(p.models, pm.name)
		p.lost[pm.name] = pm.key
	}
	p.mu.Unlock()
	if !ok {
		return
	}
	w.loadChanged() // stop advertising it at once
	w.log.Info("pipelined model lost a stage; waiting for its new plan", "model", pm.name, "assignment", pm.key)
	// Off the job's goroutine: unload waits for the pull loops, one of
	// which runs this job.
	go w.unload(pm)
}

// storeOnly reports a seed's files: state stored, with their layout.
func (w *Worker) storeOnly(pm *placedModel, path, from, digest string) error {
	var layout *admin.ModelLayout
	if w.placed.cfg.Layout != nil {
		l, err := w.placed.cfg.Layout(path)
		if err != nil {
			return fmt.Errorf("layout of %s: %w", path, err)
		}
		layout = l
	}
	w.setProgress(pm, func(p *cluster.ModelProgress) {
		p.State, p.From, p.Digest, p.Error, p.Layout = cluster.ModelStored, from, digest, "", layout
		if p.Total > 0 {
			p.Bytes = p.Total
		}
	})
	w.log.Info("holding pipelined model's files for its stages", "model", pm.name, "path", path)
	return nil
}

// wholeLayout is the layout of a whole model's files at path (nil for a
// stage, without a Layout reader, or when it cannot be read).
func (w *Worker) wholeLayout(m cluster.AssignedModel, path string) *admin.ModelLayout {
	if m.Plan != nil || w.placed.cfg.Layout == nil {
		return nil
	}
	l, err := w.placed.cfg.Layout(path)
	if err != nil {
		w.log.Debug("model layout", "model", m.Name, "path", path, "err", err)
		return nil
	}
	return l
}

// stagePart is a stage fetch done: the partial folder's model path, its
// manifest and which chunks it holds.
type stagePart struct {
	path string
	man  *modelstore.Manifest
	have map[string]string
}

// stageRanges are the file byte ranges stage [first, last) of a model of
// r's layers reads, by file; files in none of r's ranges are read whole.
func stageRanges(r *admin.LayoutRanges, first, last int) (need map[string][]admin.FileRange, weight map[string]bool) {
	need, weight = map[string][]admin.FileRange{}, map[string]bool{}
	add := func(rs []admin.FileRange) {
		for _, x := range rs {
			need[x.Path] = append(need[x.Path], x)
		}
	}
	note := func(rs []admin.FileRange) {
		for _, x := range rs {
			weight[x.Path] = true
		}
	}
	note(r.Common)
	note(r.Embed)
	note(r.Head)
	for _, l := range r.Layers {
		note(l)
	}
	add(r.Common)
	for i := first; i < last && i < len(r.Layers); i++ {
		add(r.Layers[i])
	}
	if first == 0 {
		add(r.Embed)
	}
	if last == len(r.Layers) {
		add(r.Head)
	}
	return need, weight
}

// wantChunks is the modelstore chunk filter of a stage: a chunk of a
// weight file that overlaps one of the stage's ranges, every chunk of
// another file.
func wantChunks(r *admin.LayoutRanges, first, last int) func(modelstore.File, int64, int64) bool {
	need, weight := stageRanges(r, first, last)
	return func(f modelstore.File, off, n int64) bool {
		if !weight[f.Path] {
			return true
		}
		return slices.ContainsFunc(need[f.Path], func(x admin.FileRange) bool { return x.Off < off+n && off < x.Off+x.Len })
	}
}

// covers reports whether have holds every chunk of man that want asks for.
func covers(man *modelstore.Manifest, have map[string]string, want func(modelstore.File, int64, int64) bool) bool {
	for _, f := range man.Files {
		d := have[f.Path]
		for c := range f.Chunks {
			if off, n := man.ChunkRange(f, c); want(f, off, n) && (c >= len(d) || d[c] != '1') {
				return false
			}
		}
	}
	return true
}

// obtainStage returns a local path holding this worker's stage of m: the
// whole model when this node has it (its source, an earlier whole fetch),
// else a fetch of only the stage's chunks from the peers.
func (w *Worker) obtainStage(ctx context.Context, m cluster.AssignedModel, waitingSince time.Time) (path, from, digest string, err error) {
	p := &w.placed
	i := m.Plan.Index(w.cfg.Name)
	dest := filepath.Join(p.cfg.Dir, url.PathEscape(m.Name))
	_, srcErr := os.Stat(m.Source)
	_, manErr := modelstore.LoadManifest(dest)
	local := isLocalPath(m.Source) && (m.SourceNode == "" || m.SourceNode == w.cfg.Name) && srcErr == nil
	if i < 0 || m.Ranges == nil || local || manErr == nil {
		return w.obtain(ctx, m, waitingSince) // whole files (no ranges known, or here already)
	}
	st := m.Plan.Stages[i]
	p.mu.Lock()
	part := p.parts[m.Name]
	p.mu.Unlock()
	want := wantChunks(m.Ranges, st.First, st.Last)
	if part != nil && (m.Digest == "" || part.man.Digest() == m.Digest) && covers(part.man, part.have, want) {
		return part.path, "local", part.man.Digest(), nil
	}
	var peers []string
	for _, mem := range w.ml.Members() {
		if mem.Name != w.cfg.Name && mem.Meta.Role == cluster.RoleWorker && mem.Meta.Store != "" {
			peers = append(peers, p.scheme+"://"+mem.Meta.Store)
		}
	}
	if len(peers) == 0 {
		return "", "", "", errNoPeer
	}
	res, err := p.fetcher.Fetch(ctx, modelstore.Request{Model: m.Name, Peers: peers, Dest: dest, Digest: m.Digest, Want: want,
		OnStart: func(dir string, man *modelstore.Manifest, have func() map[string]string) {
			p.store.AddPartial(m.Name, dir, man, have) // its chunks for other stages' workers
		}})
	if err != nil {
		if ctx.Err() == nil && strings.Contains(err.Error(), "no usable manifest") {
			return "", "", "", errNoPeer // the seed has not offered it yet
		}
		return "", "", "", err
	}
	if res.Partial {
		have := res.Have
		p.store.AddPartial(m.Name, dest+".partial", res.Manifest, func() map[string]string { return have })
		p.mu.Lock()
		p.parts[m.Name] = &stagePart{path: res.Path, man: res.Manifest, have: have}
		p.mu.Unlock()
	} else {
		p.store.AddVerified(m.Name, res.Path, res.Manifest)
	}
	p.mu.Lock()
	pm, ok := p.models[m.Name]
	p.mu.Unlock()
	if ok {
		w.setProgress(pm, func(pr *cluster.ModelProgress) { pr.Bytes, pr.Total = res.Fetched+res.Resumed, res.Manifest.Size() })
	}
	return res.Path, "peers", res.Manifest.Digest(), nil
}
