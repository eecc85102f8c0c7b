package modelstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Files the fetcher keeps next to the model (hidden: Build and the peer
// protocol ignore dot files).
const (
	// ManifestFile is written into every fetched model folder, so that a
	// restarted node offers it again without hashing it.
	ManifestFile = ".macpool-manifest.json"
	// stateFile, in the DEST.partial folder, lists the chunks already
	// written and verified (for resuming after a restart).
	stateFile = ".macpool-fetch.json"
)

// diskFree is freeSpace, replaceable by tests.
var diskFree = freeSpace

// FetcherConfig configures a Fetcher.
type FetcherConfig struct {
	Client *http.Client
	// Parallel is the number of chunks downloaded at once (spread over the peers).
	Parallel int
	// Attempts bounds the tries of one chunk (over all peers) before the
	// fetch fails.
	Attempts int
	// PeerStrikes is the number of failed chunks (transport errors or bad
	// data) after which a peer is no longer asked during this fetch.
	PeerStrikes int
	// ChunkTimeout bounds one chunk request (a stalled peer is given up),
	// and the wait for a chunk that only peers still fetching could give.
	ChunkTimeout time.Duration
	// Shuffle takes the chunks in random order, so that peers fetching
	// the same model at once have different chunks to share.
	Shuffle bool
	// PeerRefresh is how often peers that lacked the model when the fetch
	// began are asked again (they may be fetching it too by now).
	PeerRefresh time.Duration
	// RetryWait is the pause before a failed chunk is tried again.
	RetryWait time.Duration
	// Secret is the cluster secret (see ServerConfig.Secret).
	Secret []byte
	// Progress, if set, is called at most every ProgressInterval and once
	// at the end with Done set.
	Progress         func(Progress)
	ProgressInterval time.Duration
	Logger           *slog.Logger
}

// DefaultFetcherConfig returns 4 parallel chunks, 8 attempts per chunk.
func DefaultFetcherConfig() FetcherConfig {
	return FetcherConfig{
		Parallel:         4,
		Attempts:         8,
		PeerStrikes:      3,
		ChunkTimeout:     5 * time.Minute,
		Shuffle:          true,
		PeerRefresh:      2 * time.Second,
		RetryWait:        200 * time.Millisecond,
		ProgressInterval: time.Second,
	}
}

// Validate checks the configuration.
func (c FetcherConfig) Validate() error {
	switch {
	case c.Parallel < 1:
		return fmt.Errorf("modelstore: parallel %d must be at least 1", c.Parallel)
	case c.Attempts < 1:
		return fmt.Errorf("modelstore: attempts %d must be at least 1", c.Attempts)
	case c.PeerStrikes < 1:
		return fmt.Errorf("modelstore: peer strikes %d must be at least 1", c.PeerStrikes)
	case c.PeerRefresh <= 0:
		return fmt.Errorf("modelstore: peer refresh %v must be positive", c.PeerRefresh)
	case c.ChunkTimeout <= 0:
		return fmt.Errorf("modelstore: chunk timeout %v must be positive", c.ChunkTimeout)
	case c.RetryWait < 0:
		return fmt.Errorf("modelstore: retry wait %v must not be negative", c.RetryWait)
	case c.Progress != nil && c.ProgressInterval <= 0:
		return fmt.Errorf("modelstore: progress interval %v must be positive", c.ProgressInterval)
	}
	return nil
}

// Progress is a fetch's state.
type Progress struct {
	Model       string
	Bytes       int64   // verified bytes on disk, including a resumed part
	Total       int64   // model size
	BytesPerSec float64 // rate of this run
	Peers       int     // peers still in use
	Done        bool
}

// Request says what to fetch from where.
type Request struct {
	Model string
	// Peers are base URLs ("http://host:port") of Servers holding the model.
	Peers []string
	// Dest is the final path of the model folder; it appears only complete
	// (the download goes to Dest+".partial", renamed at the end).
	Dest string
	// Digest is the expected Manifest.Digest ("": take the manifest most
	// peers agree on). Peers serving another digest are not used.
	Digest string
	// OnStart, if set, is called once the download begins with the
	// partial folder, the manifest and a function returning the verified
	// chunks so far: pass them to Server.AddPartial to share them.
	OnStart func(dir string, m *Manifest, have func() map[string]string)
	// Want, if set, fetches only part of the model: the chunks for which
	// it returns true (a pipeline stage's tensor ranges and the files it
	// reads whole). The files keep their full size with the other bytes
	// never written (sparse), nothing is renamed: Result.Path is in the
	// partial folder (Dest+".partial"), Result.Partial is set, and a later
	// Fetch of the same model (whole, or another part) resumes from the
	// chunks already there.
	// The chunk is bytes [off, off+n) of f.
	Want func(f File, off, n int64) bool
}

// Result describes a finished fetch.
type Result struct {
	// Path is the model's local path: Dest, or Dest/FILE for a single-file model.
	Path     string
	Manifest *Manifest
	// Fetched is the number of bytes downloaded by this run (not resumed).
	Fetched int64
	// Resumed is the number of bytes found verified from an earlier run.
	Resumed int64
	// Partial: only the chunks Request.Want named were fetched; Have is
	// the done-chunk bitmap of every file then (for Server.AddPartial).
	Partial bool
	Have    map[string]string
	// BadChunks counts chunks that failed verification and were fetched again.
	BadChunks int
	// PeerBytes is the verified bytes each peer supplied.
	PeerBytes map[string]int64
}

// Fetcher downloads models from peers.
type Fetcher struct {
	cfg FetcherConfig
	log *slog.Logger
}

// NewFetcher returns a Fetcher.
func NewFetcher(cfg FetcherConfig) (*Fetcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Fetcher{cfg: cfg, log: logger.With("component", "modelstore")}, nil
}

// ModelPath is the model's path inside its folder dir.
func ModelPath(dir string, m *Manifest) string {
	if m.Single {
		return filepath.Join(dir, filepath.FromSlash(m.Files[0].Path))
	}
	return dir
}

// LoadManifest reads the manifest a Fetch left in a finished model folder.
func LoadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("load manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("load manifest %s: %w", dir, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("load manifest %s: %w", dir, err)
	}
	return &m, nil
}

func (f *Fetcher) authorize(r *http.Request) {
	if len(f.cfg.Secret) > 0 {
		r.Header.Set("Authorization", "Bearer "+Token(f.cfg.Secret))
	}
}

// GetManifest asks one peer for a model's manifest.
func (f *Fetcher) GetManifest(ctx context.Context, peer, model string) (*Manifest, error) {
	m, _, err := f.getManifest(ctx, peer, model)
	return m, err
}

// getManifest also says whether the peer's fetch of the model is still in
// progress (it serves only the chunks it has).
func (f *Fetcher) getManifest(ctx context.Context, peer, model string) (*Manifest, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, f.cfg.ChunkTimeout)
	defer cancel()
	u := strings.TrimRight(peer, "/") + PathManifest + "?" + url.Values{"model": {model}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, false, fmt.Errorf("manifest of %s from %s: %w", model, peer, err)
	}
	f.authorize(req)
	resp, err := f.cfg.Client.Do(req)
	if err != nil {
		return nil, false, fmt.Errorf("manifest of %s from %s: %w", model, peer, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, false, fmt.Errorf("manifest of %s from %s: %w", model, peer, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, false, fmt.Errorf("manifest of %s from %s: %s: %s", model, peer, resp.Status, strings.TrimSpace(string(body)))
	}
	var m Manifest
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, false, fmt.Errorf("manifest of %s from %s: %w", model, peer, err)
	}
	if err := m.Validate(); err != nil {
		return nil, false, fmt.Errorf("manifest of %s from %s: %w", model, peer, err)
	}
	return &m, resp.Header.Get(HeaderPartial) != "", nil
}

// chooseManifest asks every peer and keeps those that agree with the
// wanted digest (or, without one, with the digest most peers serve). At
// least one of them must hold the model complete; peers whose fetch is in
// progress are used for the chunks they have (if they chunk alike).
func (f *Fetcher) chooseManifest(ctx context.Context, req Request) (*Manifest, []*peerState, []string, error) {
	type answer struct {
		m       *Manifest
		partial bool
		err     error
	}
	answers := make([]answer, len(req.Peers))
	var wg sync.WaitGroup
	for i, p := range req.Peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m, partial, err := f.getManifest(ctx, p, req.Model)
			answers[i] = answer{m, partial, err}
		}()
	}
	wg.Wait()
	votes := map[string]int{}
	var errs []error
	best := req.Digest
	for _, a := range answers {
		if a.err != nil {
			errs = append(errs, a.err)
			continue
		}
		d := a.m.Digest()
		votes[d]++
		if req.Digest == "" && (best == "" || votes[d] > votes[best]) {
			best = d
		}
	}
	var man *Manifest
	for _, a := range answers { // the manifest (chunking) of a complete peer
		if a.err == nil && !a.partial && a.m.Digest() == best {
			man = a.m
			break
		}
	}
	var peers []*peerState
	var others []string // no answer yet: asked again during the fetch
	for i, a := range answers {
		if a.err != nil {
			others = append(others, strings.TrimRight(req.Peers[i], "/"))
		}
		if man != nil && a.err == nil && a.m.Digest() == best && (!a.partial || a.m.ChunkSize == man.ChunkSize) {
			peers = append(peers, &peerState{url: strings.TrimRight(req.Peers[i], "/"), partial: a.partial})
		} else if a.err == nil && a.m.Digest() != best {
			f.log.Warn("peer serves other content", "model", req.Model, "peer", req.Peers[i], "digest", a.m.Digest()[:12], "want", best[:min(12, len(best))])
		}
	}
	if man == nil {
		if req.Digest != "" && len(votes) > 0 && votes[best] == 0 {
			errs = append(errs, fmt.Errorf("no peer serves digest %s", req.Digest))
		} else if len(votes) > 0 {
			errs = append(errs, errors.New("no peer has the complete model yet"))
		}
		return nil, nil, nil, fmt.Errorf("fetch %s: no usable manifest: %w", req.Model, errors.Join(errs...))
	}
	return man, peers, others, nil
}

// fetchState is the persisted resume state: which chunks are on disk and
// verified, per file ("1" = done).
type fetchState struct {
	Digest    string            `json:"digest"`
	ChunkSize int64             `json:"chunk_size"`
	Done      map[string]string `json:"done"`
}

// Fetch downloads req.Model from req.Peers into req.Dest (see Request).
// If Dest already holds a finished fetch it is returned as is. An
// interrupted fetch (ctx ended, process killed) resumes from the chunks
// already verified. Every chunk is checked against the manifest and every
// file against its whole-file SHA-256 before the folder is renamed into place.
func (f *Fetcher) Fetch(ctx context.Context, req Request) (*Result, error) {
	if req.Model == "" || req.Dest == "" {
		return nil, errors.New("fetch: model and dest must be set")
	}
	if m, err := LoadManifest(req.Dest); err == nil {
		if req.Digest != "" && m.Digest() != req.Digest {
			return nil, fmt.Errorf("fetch %s: %s holds digest %s, want %s", req.Model, req.Dest, m.Digest()[:12], req.Digest[:min(12, len(req.Digest))])
		}
		return &Result{Path: ModelPath(req.Dest, m), Manifest: m, PeerBytes: map[string]int64{}}, nil
	} else if _, serr := os.Stat(req.Dest); serr == nil {
		return nil, fmt.Errorf("fetch %s: %s exists but is not a finished fetch: %w", req.Model, req.Dest, err)
	}
	if len(req.Peers) == 0 {
		return nil, fmt.Errorf("fetch %s: no peers", req.Model)
	}
	man, peers, others, err := f.chooseManifest(ctx, req)
	if err != nil {
		return nil, err
	}
	j, err := f.newJob(req, man, peers)
	if err != nil {
		return nil, err
	}
	j.others = others
	defer j.closeFiles()
	if err := j.run(ctx); err != nil {
		j.saveState()
		return nil, err
	}
	if req.Want != nil {
		j.saveState()
		j.res.Path, j.res.Partial, j.res.Have = ModelPath(j.partial, man), true, j.haveMap()
		j.f.log.Info("model part fetched", "model", req.Model, "fetched", j.res.Fetched, "resumed", j.res.Resumed, "of", man.Size(), "took", time.Since(j.start).Round(time.Millisecond))
		return j.res, nil
	}
	if err := j.finish(); err != nil {
		return nil, err
	}
	return j.res, nil
}

type peerState struct {
	url     string
	strikes int
	off     bool
	partial bool              // its fetch is in progress: only chunks in have
	have    map[string]string // partial: path -> done bitmap, refreshed while fetching
}

type task struct {
	file, chunk int
	attempts    int
	avoid       int       // peer that failed this chunk last, -1 none
	waiting     time.Time // since when no peer had it (only peers still fetching were left)
}

// job is one Fetch in progress.
type job struct {
	f       *Fetcher
	req     Request
	man     *Manifest
	partial string
	files   []*os.File
	res     *Result
	start   time.Time

	mu        sync.Mutex
	state     fetchState
	peers     []*peerState // only appended to (indexes stay valid), under mu
	others    []string     // peers that had not the model when the fetch began
	bytes     int64        // verified on disk
	saved     time.Time
	reported  time.Time
	remaining int
}

func (f *Fetcher) newJob(req Request, man *Manifest, peers []*peerState) (*job, error) {
	j := &job{
		f: f, req: req, man: man, partial: req.Dest + ".partial", start: time.Now(),
		res: &Result{Manifest: man, PeerBytes: map[string]int64{}}, peers: peers,
	}
	digest := man.Digest()
	// Resume only a partial download of the same content and chunking.
	if b, err := os.ReadFile(filepath.Join(j.partial, stateFile)); err == nil {
		var st fetchState
		if json.Unmarshal(b, &st) == nil && st.Digest == digest && st.ChunkSize == man.ChunkSize {
			j.state = st
		}
	}
	if j.state.Digest == "" {
		if err := os.RemoveAll(j.partial); err != nil {
			return nil, fmt.Errorf("fetch %s: clear %s: %w", req.Model, j.partial, err)
		}
		j.state = fetchState{Digest: digest, ChunkSize: man.ChunkSize, Done: map[string]string{}}
	}
	if err := os.MkdirAll(j.partial, 0o755); err != nil {
		return nil, fmt.Errorf("fetch %s: %w", req.Model, err)
	}
	for _, file := range man.Files {
		p := filepath.Join(j.partial, filepath.FromSlash(file.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			j.closeFiles()
			return nil, fmt.Errorf("fetch %s: %w", req.Model, err)
		}
		fh, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
		if err == nil {
			var st os.FileInfo
			if st, err = fh.Stat(); err == nil && st.Size() != file.Size {
				err = fh.Truncate(file.Size)
			}
		}
		if err != nil {
			if fh != nil {
				fh.Close()
			}
			j.closeFiles()
			return nil, fmt.Errorf("fetch %s: prepare %s: %w", req.Model, file.Path, err)
		}
		j.files = append(j.files, fh)
		if d := j.state.Done[file.Path]; len(d) != len(file.Chunks) {
			j.state.Done[file.Path] = strings.Repeat("0", len(file.Chunks))
		}
	}
	return j, nil
}

func (j *job) closeFiles() {
	for _, fh := range j.files {
		fh.Close()
	}
	j.files = nil
}

// saveState persists which chunks are done (atomic replace).
func (j *job) saveState() {
	j.mu.Lock()
	b, err := json.Marshal(j.state)
	j.saved = time.Now()
	j.mu.Unlock()
	if err != nil {
		return
	}
	tmp := filepath.Join(j.partial, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		j.f.log.Warn("save fetch state", "err", err)
		return
	}
	if err := os.Rename(tmp, filepath.Join(j.partial, stateFile)); err != nil {
		j.f.log.Warn("save fetch state", "err", err)
	}
}

func setDone(s string, i int, done bool) string {
	b := []byte(s)
	b[i] = '0'
	if done {
		b[i] = '1'
	}
	return string(b)
}

// run re-verifies the chunks an earlier run wrote, then downloads the rest.
func (j *job) run(ctx context.Context) error {
	var tasks []task
	buf := make([]byte, j.man.ChunkSize)
	for fi, file := range j.man.Files {
		done := j.state.Done[file.Path]
		for ci := range file.Chunks {
			if j.req.Want != nil {
				if off, n := j.man.ChunkRange(file, ci); !j.req.Want(file, off, n) {
					continue
				}
			}
			if done[ci] == '1' {
				off, n := j.man.ChunkRange(file, ci)
				if _, err := j.files[fi].ReadAt(buf[:n], off); err == nil && j.man.VerifyChunk(file, ci, buf[:n]) == nil {
					j.bytes += n
					j.res.Resumed += n
					continue
				}
				j.state.Done[file.Path] = setDone(j.state.Done[file.Path], ci, false)
			}
			tasks = append(tasks, task{file: fi, chunk: ci, avoid: -1})
		}
	}
	if j.res.Resumed > 0 {
		j.f.log.Info("resuming fetch", "model", j.req.Model, "verified_bytes", j.res.Resumed, "chunks_left", len(tasks))
	}
	j.remaining = len(tasks)
	if len(tasks) == 0 {
		return nil
	}
	// The files are sparse until written: the chunks still to come need
	// room (checked up front rather than failing at 90 %).
	var need int64
	for _, t := range tasks {
		_, n := j.man.ChunkRange(j.man.Files[t.file], t.chunk)
		need += n
	}
	if free, err := diskFree(j.partial); err == nil && free >= 0 && free < need {
		return fmt.Errorf("fetch %s: %w: %d bytes to write, %d free on the disk of %s", j.req.Model, ErrNoSpace, need, free, j.partial)
	}
	// Fetchers of the same model take the chunks in different orders, so
	// that they have different chunks to give each other.
	if j.f.cfg.Shuffle {
		rand.Shuffle(len(tasks), func(a, b int) { tasks[a], tasks[b] = tasks[b], tasks[a] })
	}
	queue := make(chan task, len(tasks)) // outstanding tasks never exceed it: requeues never block
	for _, t := range tasks {
		queue <- t
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if j.req.OnStart != nil {
		j.req.OnStart(j.partial, j.man, j.haveMap)
	}
	allDone := make(chan struct{})
	var wg sync.WaitGroup
	// Peers still fetching: their bitmaps are read again every
	// haveInterval; peers that did not have the model when this fetch
	// began (e.g. started fetching it at the same moment) are asked again
	// every PeerRefresh.
	if j.hasPartialPeers() || len(j.others) > 0 {
		j.refreshHave(ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			have := time.NewTicker(haveInterval)
			defer have.Stop()
			disc := time.NewTicker(j.f.cfg.PeerRefresh)
			defer disc.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-allDone:
					return
				case <-disc.C:
					j.discover(ctx)
				case <-have.C:
					j.refreshHave(ctx)
				}
			}
		}()
	}
	for range min(j.f.cfg.Parallel, len(tasks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, j.man.ChunkSize)
			for {
				select {
				case <-ctx.Done():
					return
				case <-allDone:
					return
				case t := <-queue:
					if err := j.do(ctx, t, buf, queue, allDone); err != nil {
						cancel(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-allDone:
		return nil
	default:
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return fmt.Errorf("fetch %s: stopped", j.req.Model)
}

// haveInterval is how often the chunk bitmaps of peers whose fetch is in
// progress are read again.
const haveInterval = 500 * time.Millisecond

// errNoHolder: no usable peer has the chunk yet, only peers still fetching
// it (the complete ones were dropped); wait for them.
var errNoHolder = errors.New("no peer has this chunk yet")

func (j *job) hasPartialPeers() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, p := range j.peers {
		if p.partial {
			return true
		}
	}
	return false
}

// haveMap is this fetch's done-chunk bitmaps (for AddPartial).
func (j *job) haveMap() map[string]string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make(map[string]string, len(j.state.Done))
	for k, v := range j.state.Done {
		out[k] = v
	}
	return out
}

// discover asks the peers that lacked the model again; those that now
// serve the same content (complete, or fetching with the same chunking)
// join the fetch.
func (j *job) discover(ctx context.Context) {
	j.mu.Lock()
	others := slices.Clone(j.others)
	j.mu.Unlock()
	var keep []string
	for _, u := range others {
		m, partial, err := j.f.getManifest(ctx, u, j.req.Model)
		switch {
		case err != nil:
			keep = append(keep, u)
		case m.Digest() != j.man.Digest() || (partial && m.ChunkSize != j.man.ChunkSize):
			// other content or chunking: never useful here
		default:
			j.mu.Lock()
			j.peers = append(j.peers, &peerState{url: u, partial: partial})
			j.mu.Unlock()
			j.f.log.Debug("peer joined fetch", "model", j.req.Model, "peer", u, "partial", partial)
		}
	}
	if ctx.Err() != nil {
		return
	}
	j.mu.Lock()
	j.others = keep
	j.mu.Unlock()
}

// refreshHave reads the bitmaps of the peers still fetching.
func (j *job) refreshHave(ctx context.Context) {
	j.mu.Lock()
	var urls []string
	for _, p := range j.peers {
		if p.partial && !p.off {
			urls = append(urls, p.url)
		}
	}
	j.mu.Unlock()
	for _, u := range urls {
		have, err := j.getHave(ctx, u)
		if err != nil {
			j.f.log.Debug("peer chunk bitmap", "model", j.req.Model, "peer", u, "err", err)
			continue
		}
		j.mu.Lock()
		for _, p := range j.peers {
			if p.url == u {
				p.have = have
			}
		}
		j.mu.Unlock()
	}
}

func (j *job) getHave(ctx context.Context, peer string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, peer+PathHave+"?"+url.Values{"model": {j.req.Model}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	j.f.authorize(req)
	resp, err := j.f.cfg.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("peer answered %s", resp.Status)
	}
	var have map[string]string
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&have); err != nil {
		return nil, err
	}
	return have, nil
}

// pick chooses the peer for t: spread over the peers that have the chunk
// (complete ones, and those still fetching that have it already), skipping
// peers that are off and, when another is left, the one that failed t last.
func (j *job) pick(t task) (int, string, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := len(j.peers)
	start := (t.file*7919 + t.chunk + t.attempts) % n
	fallback, lacking := -1, false
	path := j.man.Files[t.file].Path
	for k := range n {
		p := (start + k) % n
		if j.peers[p].off {
			continue
		}
		if ps := j.peers[p]; ps.partial {
			if d := ps.have[path]; t.chunk >= len(d) || d[t.chunk] != '1' {
				lacking = true
				continue
			}
		}
		if p == t.avoid {
			fallback = p
			continue
		}
		return p, j.peers[p].url, nil
	}
	if fallback >= 0 {
		return fallback, j.peers[fallback].url, nil
	}
	if lacking {
		return -1, "", errNoHolder
	}
	return -1, "", fmt.Errorf("fetch %s: every peer failed %d times or more", j.req.Model, j.f.cfg.PeerStrikes)
}

// do fetches one chunk; a failure requeues it (error only when the fetch
// must stop).
func (j *job) do(ctx context.Context, t task, buf []byte, queue chan<- task, allDone chan struct{}) error {
	p, peer, err := j.pick(t)
	if errors.Is(err, errNoHolder) {
		// Only peers still fetching are left and none has this chunk:
		// wait for them, within the chunk timeout.
		if t.waiting.IsZero() {
			t.waiting = time.Now()
		} else if time.Since(t.waiting) > j.f.cfg.ChunkTimeout {
			return fmt.Errorf("fetch %s: %s chunk %d: no peer had it within %v", j.req.Model, j.man.Files[t.file].Path, t.chunk, j.f.cfg.ChunkTimeout)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(haveInterval):
		}
		queue <- t
		return nil
	}
	if err != nil {
		return err
	}
	t.waiting = time.Time{}
	file := j.man.Files[t.file]
	off, n := j.man.ChunkRange(file, t.chunk)
	err = j.getChunk(ctx, peer, file, off, buf[:n])
	if err == nil {
		err = j.man.VerifyChunk(file, t.chunk, buf[:n])
		if err != nil {
			j.mu.Lock()
			j.res.BadChunks++
			j.mu.Unlock()
		}
	}
	if err == nil {
		if _, werr := j.files[t.file].WriteAt(buf[:n], off); werr != nil {
			return fmt.Errorf("fetch %s: write %s: %w", j.req.Model, file.Path, werr)
		}
		j.chunkDone(t, p, n, allDone)
		return nil
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	t.attempts++
	t.avoid = p
	j.mu.Lock()
	ps := j.peers[p]
	ps.strikes++
	if ps.strikes >= j.f.cfg.PeerStrikes && !ps.off {
		ps.off = true
		j.f.log.Warn("peer dropped from fetch", "model", j.req.Model, "peer", peer, "strikes", ps.strikes)
	}
	j.mu.Unlock()
	j.f.log.Warn("chunk failed", "model", j.req.Model, "file", file.Path, "chunk", t.chunk, "peer", peer, "attempt", t.attempts, "err", err)
	if t.attempts >= j.f.cfg.Attempts {
		return fmt.Errorf("fetch %s: %s chunk %d failed %d times, last from %s: %w", j.req.Model, file.Path, t.chunk, t.attempts, peer, err)
	}
	if j.f.cfg.RetryWait > 0 {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(j.f.cfg.RetryWait):
		}
	}
	queue <- t
	return nil
}

func (j *job) chunkDone(t task, p int, n int64, allDone chan struct{}) {
	file := j.man.Files[t.file]
	j.mu.Lock()
	j.state.Done[file.Path] = setDone(j.state.Done[file.Path], t.chunk, true)
	j.bytes += n
	j.res.Fetched += n
	j.res.PeerBytes[j.peers[p].url] += n
	j.remaining--
	last := j.remaining == 0
	save := time.Since(j.saved) > 500*time.Millisecond
	report := j.f.cfg.Progress != nil && time.Since(j.reported) >= j.f.cfg.ProgressInterval
	if report {
		j.reported = time.Now()
	}
	pr := j.progressLocked(false)
	j.mu.Unlock()
	if last {
		close(allDone)
	}
	if save && !last {
		j.saveState()
	}
	if report && !last {
		j.f.cfg.Progress(pr)
	}
}

func (j *job) progressLocked(done bool) Progress {
	pr := Progress{Model: j.req.Model, Bytes: j.bytes, Total: j.man.Size(), Done: done}
	if s := time.Since(j.start).Seconds(); s > 0 {
		pr.BytesPerSec = float64(j.res.Fetched) / s
	}
	for _, p := range j.peers {
		if !p.off {
			pr.Peers++
		}
	}
	return pr
}

// verifyFile hashes file fi whole against the manifest and syncs it.
func (j *job) verifyFile(fi int) error {
	file := j.man.Files[fi]
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(j.files[fi], 0, file.Size)); err != nil {
		return fmt.Errorf("verify %s: %w", file.Path, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != file.SHA256 {
		return fmt.Errorf("%s: %w: whole file %s, manifest %s", file.Path, ErrChecksum, got[:12], file.SHA256[:12])
	}
	if err := j.files[fi].Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", file.Path, err)
	}
	return nil
}

// getChunk reads bytes [off, off+len(buf)) of file from peer into buf.
func (j *job) getChunk(ctx context.Context, peer string, file File, off int64, buf []byte) error {
	ctx, cancel := context.WithTimeout(ctx, j.f.cfg.ChunkTimeout)
	defer cancel()
	u := peer + PathFile + "?" + url.Values{"model": {j.req.Model}, "path": {file.Path}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	n := int64(len(buf))
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, off+n-1))
	req.Header.Set("Accept-Encoding", "identity")
	j.f.authorize(req)
	resp, err := j.f.cfg.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent:
		if !strings.HasPrefix(resp.Header.Get("Content-Range"), "bytes "+strconv.FormatInt(off, 10)+"-") {
			return fmt.Errorf("peer answered range %q, asked bytes %d-%d", resp.Header.Get("Content-Range"), off, off+n-1)
		}
	case resp.StatusCode == http.StatusOK && off == 0 && n == file.Size:
	default:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("peer answered %s: %s", resp.Status, bytes.TrimSpace(b))
	}
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		return fmt.Errorf("read body: %w", err)
	}
	return nil
}

// finish checks every file whole, writes the manifest, and renames the
// folder into place.
func (j *job) finish() error {
	// Files are checked in parallel (shards), Parallel at a time.
	errs := make([]error, len(j.man.Files))
	next := make(chan int, len(j.man.Files))
	for i := range j.man.Files {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(len(j.man.Files), j.f.cfg.Parallel) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for fi := range next {
				errs[fi] = j.verifyFile(fi)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if errors.Is(err, ErrChecksum) {
			// Chunks matched but a whole file does not: the manifest is
			// inconsistent; nothing here can be trusted.
			os.RemoveAll(j.partial)
		}
		return fmt.Errorf("fetch %s: %w", j.req.Model, err)
	}
	j.closeFiles()
	b, err := json.Marshal(j.man)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", j.req.Model, err)
	}
	if err := os.WriteFile(filepath.Join(j.partial, ManifestFile), b, 0o644); err != nil {
		return fmt.Errorf("fetch %s: %w", j.req.Model, err)
	}
	os.Remove(filepath.Join(j.partial, stateFile))
	os.Remove(filepath.Join(j.partial, stateFile+".tmp"))
	if err := os.MkdirAll(filepath.Dir(j.req.Dest), 0o755); err != nil {
		return fmt.Errorf("fetch %s: %w", j.req.Model, err)
	}
	if err := os.Rename(j.partial, j.req.Dest); err != nil {
		return fmt.Errorf("fetch %s: move into place: %w", j.req.Model, err)
	}
	if d, err := os.Open(filepath.Dir(j.req.Dest)); err == nil {
		d.Sync()
		d.Close()
	}
	j.res.Path = ModelPath(j.req.Dest, j.man)
	if j.f.cfg.Progress != nil {
		j.mu.Lock()
		pr := j.progressLocked(true)
		j.mu.Unlock()
		j.f.cfg.Progress(pr)
	}
	j.f.log.Info("model fetched", "model", j.req.Model, "bytes", j.man.Size(), "fetched", j.res.Fetched, "resumed", j.res.Resumed, "bad_chunks", j.res.BadChunks, "peer_bytes", j.res.PeerBytes, "took", time.Since(j.start).Round(time.Millisecond))
	return nil
}
