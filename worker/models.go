package worker

// Placed models (docs/cluster.md, "Model placement and distribution"): besides the
// models it was started with, a worker with Config.Placed serves the
// models the coordinators' placement gives it. It
//   - runs a modelstore server so that peers can pull its models
//     (address gossiped in Meta.Store);
//   - asks a coordinator for its assignment every PollInterval;
//   - installs each assigned model: a local source path on this node is
//     served in place; a model already fetched is reused; otherwise it is
//     pulled from the peers that have it, verified chunk by chunk; when no
//     peer has it yet, the first live worker of the placement (the seed)
//     gets it from the source (Hugging Face through Resolve), the others
//     wait for a peer;
//   - loads it with Load and starts pulling its jobs;
//   - reports each step (cluster.ModelProgress) for `macpool models ls`;
//   - unloads a model that is no longer assigned once its running jobs end
//     (its files stay on disk and are still offered to peers).

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/modelstore"
	"github.com/macpool/macpool/prefix"
)

// ModelsConfig enables placed models on a worker.
type ModelsConfig struct {
	// Dir keeps fetched models, one folder per model (name path-escaped).
	Dir string
	// Listen is the modelstore peer HTTP listen address (host:port, port
	// 0: any). An unspecified host advertises the gossip host.
	Listen string
	// Load loads the model at path (a folder or a .gguf file) into an
	// engine; close releases it.
	Load func(ctx context.Context, name, path string) (eng Engine, close func() error, err error)
	// LoadStage loads this worker's stage of a pipelined model from path
	// (a whole copy, or one holding only the stage's ranges) and joins the
	// plan (stages.go, Stage). ctx ends when the install is unloaded. Nil:
	// the worker takes no stages.
	LoadStage func(ctx context.Context, name, path string, plan cluster.PipelinePlan) (Stage, error)
	// Layout reads the layout of the model at path (headers only), for the
	// leader's pipeline placement. Nil: never reported.
	Layout func(path string) (*admin.ModelLayout, error)
	// Resolve downloads a Hugging Face reference into the local cache and
	// returns its path, reporting progress (bytes so far, total or -1).
	// Nil: such models only come from peers.
	Resolve func(ctx context.Context, ref string, progress func(bytes, total int64)) (string, error)
	// Offer maps the names of models this worker serves from the start
	// (Config.Models) to their paths, to offer them to peers.
	Offer map[string]string
	// PollInterval is how often the assignment is asked for.
	PollInterval time.Duration
	// SeedWait is how long a non-seed worker waits for a peer before it
	// fetches from the source itself (the seed may be unable to).
	SeedWait time.Duration
	// ChunkSize of the manifests built here (0: modelstore.DefaultChunkSize).
	ChunkSize int64
	// Fetch tunes the peer fetcher (zero: modelstore.DefaultFetcherConfig).
	Fetch modelstore.FetcherConfig
}

// DefaultModelsConfig returns a config polling every 2 s; Dir and Load
// must be set.
func DefaultModelsConfig() ModelsConfig {
	return ModelsConfig{
		Listen:       "0.0.0.0:0",
		PollInterval: 2 * time.Second,
		SeedWait:     time.Minute,
		ChunkSize:    modelstore.DefaultChunkSize,
		Fetch:        modelstore.DefaultFetcherConfig(),
	}
}

func (c *ModelsConfig) validate() error {
	switch {
	case c.Dir == "":
		return errors.New("worker: placed models need a models folder")
	case c.Load == nil:
		return errors.New("worker: placed models need a loader")
	case c.PollInterval <= 0:
		return fmt.Errorf("worker: model poll interval %v must be positive", c.PollInterval)
	case c.SeedWait < 0:
		return fmt.Errorf("worker: seed wait %v must not be negative", c.SeedWait)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("worker: model store listen %q must be host:port: %w", c.Listen, err)
	}
	return nil
}

// placedState is the worker's side of placed models.
type placedState struct {
	cfg     *ModelsConfig
	ln      net.Listener
	store   *modelstore.Server
	fetcher *modelstore.Fetcher
	static  Engine // Config.Engine (serves Config.Models)
	scheme  string // of the peers' store URLs: https with a cluster secret

	mu     sync.Mutex
	nc     *nats.Conn
	models map[string]*placedModel
	// lost maps a model to the assignment key whose engine was lost (a
	// pipeline stage died): not installed again until the key changes.
	lost map[string]string
	// parts are the stage fetches done (stages.go), by model.
	parts map[string]*stagePart
}

// placedModel is an assigned model being installed, or loaded.
type placedModel struct {
	name     string
	key      string             // assignKey of the assignment it installs
	cancel   context.CancelFunc // of the install, and of the pull loops once loaded
	progress cluster.ModelProgress
	eng      Engine
	closeEng func() error
	loops    sync.WaitGroup
	done     chan struct{} // install goroutine ended
	logged   time.Time     // last progress log line (under placedState.mu)
}

// initPlaced opens the model store listener and advertises it (called by
// New once gossip runs).
func (w *Worker) initPlaced() error {
	pc := w.cfg.Placed
	if pc == nil {
		return nil
	}
	if err := pc.validate(); err != nil {
		return err
	}
	// pc.Dir is created by the first fetch (not here: most workers never
	// fetch, and a relative default would litter the working directory).
	p := &w.placed
	p.cfg = pc
	p.models = map[string]*placedModel{}
	p.lost = map[string]string{}
	p.parts = map[string]*stagePart{}
	// With a cluster secret the store speaks mutual TLS (certificates from
	// the cluster CA: peers are authenticated, weights are not readable on
	// the LAN) and requests carry a token keyed by a derived key.
	var secret []byte
	var tc *tls.Config
	if w.cfg.Secret != nil {
		secret = w.cfg.Secret.ModelStoreKey()
		var err error
		if tc, err = w.cfg.Secret.NodeTLS(w.cfg.Name); err != nil {
			return fmt.Errorf("worker: model store tls: %w", err)
		}
	}
	scfg := modelstore.DefaultServerConfig()
	if pc.ChunkSize > 0 {
		scfg.ChunkSize = pc.ChunkSize
	}
	scfg.Secret = secret
	scfg.Logger = w.log
	store, err := modelstore.NewServer(scfg)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	fcfg := pc.Fetch
	if fcfg.Parallel == 0 {
		fcfg = modelstore.DefaultFetcherConfig()
	}
	fcfg.Secret = secret
	p.scheme = "http"
	if tc != nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = tc
		fcfg.Client = &http.Client{Transport: tr}
		p.scheme = "https"
	}
	fcfg.Logger = w.log
	fcfg.Progress = w.fetchProgress
	fetcher, err := modelstore.NewFetcher(fcfg)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	p.store, p.fetcher = store, fetcher
	for name, path := range pc.Offer {
		store.Add(name, path)
	}
	// Models fetched by an earlier run are offered again without hashing.
	if ents, err := os.ReadDir(pc.Dir); err == nil {
		for _, e := range ents {
			name, err := url.PathUnescape(e.Name())
			if err != nil || !e.IsDir() || strings.HasSuffix(e.Name(), ".partial") {
				continue
			}
			dir := filepath.Join(pc.Dir, e.Name())
			if m, err := modelstore.LoadManifest(dir); err == nil {
				store.AddVerified(name, modelstore.ModelPath(dir, m), m)
			}
		}
	}
	ln, err := net.Listen("tcp", pc.Listen)
	if err != nil {
		return fmt.Errorf("worker: model store listen %s: %w", pc.Listen, err)
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	p.ln = ln
	host, _, _ := net.SplitHostPort(pc.Listen)
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host, _, _ = net.SplitHostPort(w.ml.Addr())
	}
	w.meta.Store = net.JoinHostPort(host, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	if w.cfg.Pipeline != "" && pc.LoadStage != nil {
		w.meta.Pipeline = advertised(w.cfg.Pipeline, w.ml.Addr()) // stages.go
	}
	p.static = w.cfg.Engine
	if ps, ok := p.static.(PrefixSummarizer); ok {
		w.cfg.Engine = placedPrefixEngine{placedEngine{w}, ps}
	} else {
		w.cfg.Engine = placedEngine{w}
	}
	if err := w.ml.UpdateMeta(w.meta); err != nil {
		ln.Close()
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

// StoreAddr is the advertised modelstore address ("" without placed models).
func (w *Worker) StoreAddr() string { return w.meta.Store }

// closePlaced releases the listener if Run never served it.
func (w *Worker) closePlaced() {
	if w.placed.ln != nil {
		w.placed.ln.Close()
	}
}

// servedModels are the models whose jobs this worker takes.
func (w *Worker) servedModels() []string {
	if w.cfg.Placed == nil {
		return w.cfg.Models
	}
	out := slices.Clone(w.cfg.Models)
	w.placed.mu.Lock()
	defer w.placed.mu.Unlock()
	for name, pm := range w.placed.models {
		if pm.eng != nil && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	slices.Sort(out[len(w.cfg.Models):])
	return out
}

// placedEngine routes a job to the engine of its model.
type placedEngine struct{ w *Worker }

// engine is the engine of model and, for a placed model, its install
// (nil for a static model).
func (e placedEngine) engine(model string) (Engine, *placedModel, error) {
	p := &e.w.placed
	if slices.Contains(e.w.cfg.Models, model) && p.static != nil {
		return p.static, nil, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pm, ok := p.models[model]; ok && pm.eng != nil {
		return pm.eng, pm, nil
	}
	return nil, nil, openai.Unavailable("model %s is not loaded on worker %s", model, e.w.cfg.Name)
}

// lost passes err on, after unloading pm when its engine was lost
// (stages.go): the install that ran the job, not a newer one of the model.
func (e placedEngine) lost(pm *placedModel, err error) error {
	if pm != nil && errors.Is(err, ErrEngineLost) {
		e.w.engineLost(pm)
	}
	return err
}

func (e placedEngine) Generate(ctx context.Context, job *job.Job, emit func(*job.Event) error) error {
	eng, pm, err := e.engine(job.Model)
	if err != nil {
		return err
	}
	return e.lost(pm, eng.Generate(ctx, job, emit))
}

func (e placedEngine) GenerateResume(ctx context.Context, j *job.Job, r *job.Resume, emit func(*job.Event, []int) error) error {
	eng, pm, err := e.engine(j.Model)
	if err != nil {
		return err
	}
	if re, ok := eng.(ResumeEngine); ok {
		return e.lost(pm, re.GenerateResume(ctx, j, r, emit))
	}
	if r != nil {
		return openai.Unavailable("worker %s cannot resume a generation of %s (its engine reports no token ids)", e.w.cfg.Name, j.Model)
	}
	return eng.Generate(ctx, j, func(ev *job.Event) error { return emit(ev, nil) })
}

// placedPrefixEngine is a placedEngine whose static engine keeps a prefix
// cache: its summary passes through (prefix.go), so that wrapping changes
// nothing for prefix routing of the static models.
type placedPrefixEngine struct {
	placedEngine
	ps PrefixSummarizer
}

func (e placedPrefixEngine) RoutingSummary(max int) prefix.Summary {
	return e.ps.RoutingSummary(max)
}

// runPlaced serves the model store and follows the assignment until ctx
// ends. Pull loops of placed models stop with pctx (drain) or on unassign.
func (w *Worker) runPlaced(ctx, pctx context.Context, nc *nats.Conn, js jetstream.JetStream, wg *sync.WaitGroup) {
	if w.cfg.Placed == nil {
		return
	}
	p := &w.placed
	p.mu.Lock()
	p.nc = nc
	p.mu.Unlock()
	srv := &http.Server{Handler: p.store.Handler(), ReadHeaderTimeout: 10 * time.Second}
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.Serve(p.ln); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
			w.log.Warn("model store stopped", "err", err)
		}
	}()
	go func() {
		defer wg.Done()
		t := time.NewTicker(p.cfg.PollInterval)
		defer t.Stop()
		for {
			w.syncAssignment(ctx, pctx, nc, js, wg)
			select {
			case <-ctx.Done():
				sctx, cancel := context.WithTimeout(context.Background(), time.Second)
				srv.Shutdown(sctx)
				cancel()
				srv.Close()
				p.store.Close()
				w.unloadAll()
				return
			case <-t.C:
			}
		}
	}()
}

// syncAssignment asks for the assignment, starts installs of new models,
// unloads models no longer assigned and reports progress.
func (w *Worker) syncAssignment(ctx, pctx context.Context, nc *nats.Conn, js jetstream.JetStream, wg *sync.WaitGroup) {
	p := &w.placed
	req, _ := json.Marshal(cluster.AssignRequest{Worker: w.cfg.Name})
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	msg, err := nc.RequestWithContext(rctx, cluster.SubjectModelAssigned, req)
	cancel()
	var as cluster.Assignment
	if err == nil {
		err = json.Unmarshal(msg.Data, &as)
	}
	if err == nil && as.Error != "" {
		err = errors.New(as.Error)
	}
	if err != nil {
		if ctx.Err() == nil {
			w.log.Debug("model assignment", "err", err)
		}
		w.publishAll()
		return
	}
	want := map[string]bool{}
	var gone []*placedModel
	p.mu.Lock()
	for _, m := range as.Models {
		want[m.Name] = true
		if slices.Contains(w.cfg.Models, m.Name) {
			continue // served from the start
		}
		key := assignKey(m) // stages.go
		pm, ok := p.models[m.Name]
		if ok && pm.key == key {
			continue
		}
		if ok {
			// Another plan (epoch) or role for the model: unload the old
			// install, start the new one beside it.
			delete(p.models, m.Name)
			gone = append(gone, pm)
		}
		if p.lost[m.Name] == key {
			continue // its engine was lost: wait for a new plan
		}
		delete(p.lost, m.Name)
		ictx, icancel := context.WithCancel(pctx)
		pm = &placedModel{name: m.Name, key: key, cancel: icancel, done: make(chan struct{}),
			progress: cluster.ModelProgress{Worker: w.cfg.Name, Model: m.Name, State: cluster.ModelWaiting}}
		if m.Plan != nil {
			if i := m.Plan.Index(w.cfg.Name); i >= 0 {
				pm.progress.Stage = fmt.Sprintf("layers [%d,%d)", m.Plan.Stages[i].First, m.Plan.Stages[i].Last)
				pm.progress.Epoch = m.Plan.Epoch
			}
		}
		p.models[m.Name] = pm
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(pm.done)
			w.install(ctx, ictx, m, pm, nc, js, wg)
		}()
	}
	for name, pm := range p.models {
		if !want[name] {
			delete(p.models, name)
			gone = append(gone, pm)
		}
	}
	p.mu.Unlock()
	if len(gone) > 0 {
		w.loadChanged() // stop advertising them at once
	}
	for _, pm := range gone {
		w.log.Info("model no longer placed here; unloading", "model", pm.name)
		wg.Add(1)
		go func() { defer wg.Done(); w.unload(pm) }()
	}
	w.publishAll()
}

// unload stops a model's install or pull loops, waits for its running
// jobs, and closes its engine.
func (w *Worker) unload(pm *placedModel) {
	pm.cancel()
	<-pm.done
	pm.loops.Wait()
	w.placed.mu.Lock()
	closeEng := pm.closeEng
	pm.eng, pm.closeEng = nil, nil
	w.placed.mu.Unlock()
	if closeEng != nil {
		if err := closeEng(); err != nil {
			w.log.Warn("close engine", "model", pm.name, "err", err)
		}
	}
}

func (w *Worker) unloadAll() {
	w.placed.mu.Lock()
	all := make([]*placedModel, 0, len(w.placed.models))
	for _, pm := range w.placed.models {
		all = append(all, pm)
	}
	w.placed.models = map[string]*placedModel{}
	w.placed.mu.Unlock()
	for _, pm := range all {
		w.unload(pm)
	}
}

// errNoPeer: no peer has the model yet and this worker waits for one.
var errNoPeer = errors.New("no peer has the model yet")

// install gets, loads and starts serving one model, retrying every poll
// interval until it works or ictx ends (unassigned, drain, shutdown).
func (w *Worker) install(ctx, ictx context.Context, m cluster.AssignedModel, pm *placedModel, nc *nats.Conn, js jetstream.JetStream, wg *sync.WaitGroup) {
	log := w.log.With("model", m.Name)
	waitingSince := time.Now()
	// Waiting for a peer polls every PollInterval; failures (a fetch or a
	// load that failed) back off up to a minute: loading a model that does
	// not fit again and again would keep the machine busy for nothing.
	wait := time.Duration(0)
	for {
		if wait > 0 {
			select {
			case <-ictx.Done():
				return
			case <-time.After(wait):
			}
		}
		var path, from, digest string
		var err error
		if m.Plan != nil {
			path, from, digest, err = w.obtainStage(ictx, m, waitingSince) // stages.go
		} else {
			path, from, digest, err = w.obtain(ictx, m, waitingSince)
		}
		if errors.Is(err, errNoPeer) {
			w.setProgress(pm, func(p *cluster.ModelProgress) { p.State, p.Error = cluster.ModelWaiting, "" })
			wait = w.placed.cfg.PollInterval
			continue
		}
		wait = min(max(2*wait, w.placed.cfg.PollInterval), time.Minute)
		if err != nil {
			if ictx.Err() != nil {
				return
			}
			log.Warn("get model", "err", err)
			w.setProgress(pm, func(p *cluster.ModelProgress) { p.State, p.Error = cluster.ModelFailed, err.Error() })
			continue
		}
		if m.StoreOnly {
			// Too big for any worker: report the layout, load nothing.
			if err := w.storeOnly(pm, path, from, digest); err != nil { // stages.go
				log.Warn("model layout", "path", path, "err", err)
				w.setProgress(pm, func(p *cluster.ModelProgress) { p.State, p.Error = cluster.ModelFailed, err.Error() })
				continue
			}
			return
		}
		w.setProgress(pm, func(p *cluster.ModelProgress) {
			p.State, p.From, p.Digest, p.Error = cluster.ModelLoading, from, digest, ""
			if p.Total > 0 && m.Plan == nil {
				p.Bytes = p.Total
			}
		})
		var eng Engine
		var closeEng func() error
		var stage Stage
		if m.Plan != nil {
			stage, err = w.placed.cfg.LoadStage(ictx, m.Name, path, *m.Plan)
			eng, closeEng = stage.Engine, stage.Close
		} else {
			eng, closeEng, err = w.placed.cfg.Load(ictx, m.Name, path)
		}
		if err != nil {
			if ictx.Err() != nil {
				return
			}
			log.Warn("load model", "path", path, "err", err)
			// A stage that does not load here is reported failed: the
			// leader re-places the model without this worker (stages.go).
			// A whole model that does not load still has all its files
			// here: their layout tells the leader its size, so one too
			// big for every worker gets pipelined rather than retried.
			layout := w.wholeLayout(m, path)
			w.setProgress(pm, func(p *cluster.ModelProgress) {
				p.State, p.Error, p.StageFailed = cluster.ModelFailed, fmt.Sprintf("load: %v", err), m.Plan != nil
				if layout != nil {
					p.Layout = layout
				}
			})
			continue
		}
		w.placed.mu.Lock()
		if ictx.Err() != nil { // unassigned while loading
			w.placed.mu.Unlock()
			closeEng()
			return
		}
		pm.eng, pm.closeEng = eng, closeEng
		pm.progress.State, pm.progress.StageFailed = cluster.ModelReady, false
		if stage.Lost != nil {
			wg.Add(1)
			go func() { defer wg.Done(); w.watchStage(ictx, pm, stage) }() // stages.go
		}
		for i := 0; i < w.cfg.Slots && eng != nil; i++ { // a later pipeline stage takes no jobs
			pm.loops.Add(1)
			wg.Add(1)
			go func() { defer wg.Done(); defer pm.loops.Done(); w.pullLoop(ctx, ictx, nc, js, m.Name) }()
		}
		w.placed.mu.Unlock()
		log.Info("serving placed model", "path", path, "from", from)
		w.loadChanged()
		w.publish(pm)
		return
	}
}

func isLocalPath(s string) bool {
	return strings.HasPrefix(s, "/") || strings.HasPrefix(s, "./") || strings.HasPrefix(s, "../") || strings.HasPrefix(s, "~")
}

// obtain returns the local path of a model: the source on this node, an
// earlier fetch, a fetch from peers, or (the seed) the source.
func (w *Worker) obtain(ctx context.Context, m cluster.AssignedModel, waitingSince time.Time) (path, from, digest string, err error) {
	p := &w.placed
	mine := m.SourceNode == "" || m.SourceNode == w.cfg.Name
	if isLocalPath(m.Source) && mine {
		if _, err := os.Stat(m.Source); err == nil {
			p.store.Add(m.Name, m.Source)
			man, _, err := p.store.Manifest(ctx, m.Name) // for the digest, and ready for peers
			if err != nil {
				return "", "", "", fmt.Errorf("hash %s: %w", m.Source, err)
			}
			w.setTotal(m.Name, man.Size())
			return m.Source, "local", man.Digest(), nil
		} else if m.SourceNode == w.cfg.Name {
			return "", "", "", fmt.Errorf("source %s: %w", m.Source, err)
		}
	}
	dest := filepath.Join(p.cfg.Dir, url.PathEscape(m.Name))
	if man, err := modelstore.LoadManifest(dest); err == nil {
		if m.Digest == "" || man.Digest() == m.Digest {
			path := modelstore.ModelPath(dest, man)
			p.store.AddVerified(m.Name, path, man)
			w.setTotal(m.Name, man.Size())
			return path, "local", man.Digest(), nil
		}
		// An earlier version of the model under this name: fetch anew.
		w.log.Info("replacing an outdated copy", "model", m.Name, "have", man.Digest()[:12], "want", m.Digest[:min(12, len(m.Digest))])
		p.store.Remove(m.Name)
		if err := os.RemoveAll(dest); err != nil {
			return "", "", "", fmt.Errorf("remove outdated %s: %w", dest, err)
		}
	}
	var peers []string
	for _, mem := range w.ml.Members() {
		if mem.Name != w.cfg.Name && mem.Meta.Role == cluster.RoleWorker && mem.Meta.Store != "" {
			peers = append(peers, p.scheme+"://"+mem.Meta.Store)
		}
	}
	if len(peers) > 0 {
		res, err := p.fetcher.Fetch(ctx, modelstore.Request{Model: m.Name, Peers: peers, Dest: dest, Digest: m.Digest,
			// Share the chunks we have with peers fetching it at the same time.
			OnStart: func(dir string, man *modelstore.Manifest, have func() map[string]string) {
				p.store.AddPartial(m.Name, dir, man, have)
			}})
		if err == nil {
			p.store.AddVerified(m.Name, res.Path, res.Manifest)
			return res.Path, "peers", res.Manifest.Digest(), nil
		}
		p.store.Remove(m.Name)
		if ctx.Err() != nil {
			return "", "", "", err
		}
		if !strings.Contains(err.Error(), "no usable manifest") {
			return "", "", "", err
		}
		w.log.Debug("no peer has the model", "model", m.Name, "err", err)
	}
	if isLocalPath(m.Source) || p.cfg.Resolve == nil {
		return "", "", "", errNoPeer // a path on another node: wait for it to be offered
	}
	if !w.isSeed(m) && time.Since(waitingSince) < p.cfg.SeedWait {
		return "", "", "", errNoPeer
	}
	w.setState(m.Name, cluster.ModelFetching, "source")
	path, err = p.cfg.Resolve(ctx, m.Source, func(bytes, total int64) {
		w.placed.mu.Lock()
		if pm, ok := w.placed.models[m.Name]; ok {
			pm.progress.Bytes = bytes
			if total > 0 {
				pm.progress.Total = total
			}
		}
		w.placed.mu.Unlock()
	})
	if err != nil {
		return "", "", "", fmt.Errorf("from source %s: %w", m.Source, err)
	}
	p.store.Add(m.Name, path)
	man, _, err := p.store.Manifest(ctx, m.Name)
	if err != nil {
		return "", "", "", fmt.Errorf("hash %s: %w", path, err)
	}
	w.setTotal(m.Name, man.Size())
	return path, "source", man.Digest(), nil
}

// isSeed reports whether this worker is the first live one of the
// model's placement: it downloads from the source.
func (w *Worker) isSeed(m cluster.AssignedModel) bool {
	for _, name := range m.Workers {
		if name == w.cfg.Name {
			return true
		}
		if mem, ok := w.ml.Member(name); ok && !mem.Meta.Leaving {
			return false
		}
	}
	return true
}

func (w *Worker) setTotal(model string, total int64) {
	w.placed.mu.Lock()
	if pm, ok := w.placed.models[model]; ok {
		pm.progress.Total = total
		pm.progress.Bytes = total
	}
	w.placed.mu.Unlock()
}

func (w *Worker) setState(model, state, from string) {
	w.placed.mu.Lock()
	pm, ok := w.placed.models[model]
	w.placed.mu.Unlock()
	if ok {
		w.setProgress(pm, func(p *cluster.ModelProgress) { p.State, p.From, p.Error = state, from, "" })
	}
}

// fetchProgress is the peer fetcher's progress callback.
func (w *Worker) fetchProgress(pr modelstore.Progress) {
	w.placed.mu.Lock()
	pm, ok := w.placed.models[pr.Model]
	logNow := ok && time.Since(pm.logged) >= 10*time.Second
	if logNow {
		pm.logged = time.Now()
	}
	w.placed.mu.Unlock()
	if logNow && !pr.Done {
		w.log.Info("fetching model from peers", "model", pr.Model, "bytes", pr.Bytes, "total", pr.Total,
			"mb_per_s", fmt.Sprintf("%.1f", pr.BytesPerSec/1e6), "peers", pr.Peers)
	}
	if ok {
		w.setProgress(pm, func(p *cluster.ModelProgress) {
			p.State, p.From, p.Bytes, p.Total, p.Error = cluster.ModelFetching, "peers", pr.Bytes, pr.Total, ""
		})
	}
}

func (w *Worker) setProgress(pm *placedModel, f func(p *cluster.ModelProgress)) {
	w.placed.mu.Lock()
	f(&pm.progress)
	w.placed.mu.Unlock()
	w.publish(pm)
}

func (w *Worker) publish(pm *placedModel) {
	w.placed.mu.Lock()
	nc := w.placed.nc
	b, err := json.Marshal(pm.progress)
	w.placed.mu.Unlock()
	if err != nil || nc == nil {
		return
	}
	if err := nc.Publish(cluster.SubjectModelProgress, b); err != nil {
		w.log.Debug("publish model progress", "err", err)
	}
}

func (w *Worker) publishAll() {
	w.placed.mu.Lock()
	all := make([]*placedModel, 0, len(w.placed.models))
	for _, pm := range w.placed.models {
		all = append(all, pm)
	}
	w.placed.mu.Unlock()
	for _, pm := range all {
		w.publish(pm)
	}
}

// PlacedModels reports the install state of each placed model (tests, status).
func (w *Worker) PlacedModels() map[string]cluster.ModelProgress {
	w.placed.mu.Lock()
	defer w.placed.mu.Unlock()
	out := map[string]cluster.ModelProgress{}
	for name, pm := range w.placed.models {
		out[name] = pm.progress
	}
	return out
}
