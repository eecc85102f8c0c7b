package modelstore

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// HTTP paths of the peer protocol (all GET, model and file as query
// parameters because model names contain slashes):
//
//	/modelstore/v1/models                       JSON: names of the complete models held
//	/modelstore/v1/manifest?model=NAME          JSON: Manifest
//	/modelstore/v1/file?model=NAME&path=PATH    file bytes; Range requests (206) supported
//	/modelstore/v1/have?model=NAME              JSON: path -> done-chunk bitmap
//
// A model whose fetch is in progress (AddPartial) answers the manifest with
// X-Macpool-Partial: 1 and serves only single chunks it already verified.
const (
	PathModels   = "/modelstore/v1/models"
	PathManifest = "/modelstore/v1/manifest"
	PathFile     = "/modelstore/v1/file"
	PathHave     = "/modelstore/v1/have" // JSON: path -> done-chunk bitmap ("0110...")

	// HeaderPartial marks answers about a model whose fetch is in progress.
	HeaderPartial = "X-Macpool-Partial"
)

// partialHas reports whether rng ("bytes=A-B") is exactly one chunk of f
// that done ("0110...") marks as on disk.
func partialHas(m *Manifest, f File, done, rng string) bool {
	a, b, ok := strings.Cut(strings.TrimPrefix(rng, "bytes="), "-")
	if !ok || !strings.HasPrefix(rng, "bytes=") {
		return false
	}
	from, err1 := strconv.ParseInt(a, 10, 64)
	to, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || from%m.ChunkSize != 0 {
		return false
	}
	i := int(from / m.ChunkSize)
	if i >= len(f.Chunks) || i >= len(done) || done[i] != '1' {
		return false
	}
	off, n := m.ChunkRange(f, i)
	return off == from && off+n-1 == to
}

// ServerConfig configures a Server.
type ServerConfig struct {
	// ChunkSize is the chunk size of the manifests this server builds.
	ChunkSize int64
	// Secret, when set, is the cluster secret: requests must carry
	// Authorization: Bearer Token(Secret), as a Fetcher with the same
	// Secret sends.
	Secret []byte
	Logger *slog.Logger
}

// DefaultServerConfig returns 16 MiB chunks and no authentication.
func DefaultServerConfig() ServerConfig { return ServerConfig{ChunkSize: DefaultChunkSize} }

// Validate checks the configuration.
func (c ServerConfig) Validate() error {
	if c.ChunkSize < 1<<10 || c.ChunkSize > 1<<30 {
		return fmt.Errorf("modelstore: chunk size %d must be in [1 KiB, 1 GiB]", c.ChunkSize)
	}
	return nil
}

// Token is the bearer token derived from the cluster secret (an HMAC, so
// the secret itself never travels).
func Token(secret []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte("macpool modelstore v1"))
	return hex.EncodeToString(mac.Sum(nil))
}

// Server serves the models of this node to peers.
type Server struct {
	cfg   ServerConfig
	log   *slog.Logger
	token string

	mu     sync.Mutex
	models map[string]*held

	// Manifest builds run on their own goroutines (several requests wait
	// for one build); Close cancels them and waits.
	ctx    context.Context
	cancel context.CancelFunc
	builds sync.WaitGroup
	closed bool // under mu: no new builds
}

// held is a model the server offers. The manifest is built on first use.
type held struct {
	path string // folder or single file
	once sync.Once
	man  *Manifest
	err  error
	done chan struct{}
	// have is set for a fetch in progress (path is its partial folder):
	// the done-chunk bitmaps, path -> "0110..." ('1' = verified on disk).
	// Only those chunks are served.
	have func() map[string]string
}

// NewServer returns a server holding no models.
func NewServer(cfg ServerConfig) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s := &Server{cfg: cfg, log: logger.With("component", "modelstore"), models: map[string]*held{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if len(cfg.Secret) > 0 {
		s.token = Token(cfg.Secret)
	}
	return s, nil
}

// Add offers the model at path (folder or single file) under name. Its
// manifest is built (hashed) on the first request for it, or by Manifest.
func (s *Server) Add(name, path string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.models[name]; ok && h.path == path {
		return
	}
	s.models[name] = &held{path: path, done: make(chan struct{})}
}

// AddVerified offers a model whose manifest is already known (a model this
// node just fetched and verified), so nothing is hashed again.
func (s *Server) AddVerified(name, path string, m *Manifest) {
	h := &held{path: path, man: m, done: make(chan struct{})}
	h.once.Do(func() { close(h.done) })
	s.mu.Lock()
	s.models[name] = h
	s.mu.Unlock()
}

// AddPartial offers the verified chunks of a fetch in progress (dir is its
// partial folder, m its manifest, have its done-chunk bitmaps), so that
// peers fetching the same model at the same time share chunks instead of
// all pulling from the few that have it complete. Replace it with
// AddVerified when the fetch ends, or Remove it if it fails.
func (s *Server) AddPartial(name, dir string, m *Manifest, have func() map[string]string) {
	h := &held{path: dir, man: m, done: make(chan struct{}), have: have}
	h.once.Do(func() { close(h.done) })
	s.mu.Lock()
	s.models[name] = h
	s.mu.Unlock()
}

// Remove stops offering a model.
func (s *Server) Remove(name string) {
	s.mu.Lock()
	delete(s.models, name)
	s.mu.Unlock()
}

// Models lists the names of the complete models offered, sorted.
func (s *Server) Models() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.models))
	for n, h := range s.models {
		if h.have == nil {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// Manifest returns the manifest of a model, building it if needed.
func (s *Server) Manifest(ctx context.Context, name string) (*Manifest, string, error) {
	h, err := s.manifest(ctx, name)
	if err != nil {
		return nil, "", err
	}
	return h.man, h.path, nil
}

func (s *Server) manifest(ctx context.Context, name string) (*held, error) {
	s.mu.Lock()
	h, ok := s.models[name]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownModel, name)
	}
	h.once.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.closed {
			h.err = errors.New("model store closed")
			close(h.done)
			return
		}
		s.builds.Add(1)
		go func() {
			defer s.builds.Done()
			defer close(h.done)
			// Not tied to one request: other requests wait for it too.
			h.man, h.err = Build(s.ctx, h.path, s.cfg.ChunkSize)
			if h.err != nil {
				s.log.Warn("build manifest", "model", name, "err", h.err)
			} else {
				s.log.Info("manifest built", "model", name, "files", len(h.man.Files), "bytes", h.man.Size())
			}
		}()
	})
	select {
	case <-h.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if h.err != nil {
		return nil, h.err
	}
	return h, nil
}

// Close stops manifest builds in progress and waits for them. Safe to
// call twice; the server answers errors for models whose build it stopped.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.builds.Wait()
}

// Handler serves the peer protocol.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+PathModels, s.serveModels)
	mux.HandleFunc("GET "+PathManifest, s.serveManifest)
	mux.HandleFunc("GET "+PathFile, s.serveFile)
	mux.HandleFunc("GET "+PathHave, s.serveHave)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.token != "" {
			scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
			if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.token)) != 1 {
				httpError(w, http.StatusUnauthorized, "modelstore: the cluster secret's token is required")
				return
			}
		}
		mux.ServeHTTP(w, r)
	})
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, msg+"\n")
}

func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(s.Models())
}

func (s *Server) manifestOf(w http.ResponseWriter, r *http.Request) (*held, bool) {
	name := r.URL.Query().Get("model")
	if name == "" {
		httpError(w, http.StatusBadRequest, "modelstore: query parameter model is required")
		return nil, false
	}
	h, err := s.manifest(r.Context(), name)
	switch {
	case errors.Is(err, ErrUnknownModel):
		httpError(w, http.StatusNotFound, err.Error())
		return nil, false
	case err != nil:
		httpError(w, http.StatusInternalServerError, fmt.Sprintf("modelstore: manifest of %s: %v", name, err))
		return nil, false
	}
	return h, true
}

func (s *Server) serveManifest(w http.ResponseWriter, r *http.Request) {
	h, ok := s.manifestOf(w, r)
	if !ok {
		return
	}
	if h.have != nil {
		w.Header().Set(HeaderPartial, "1")
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(h.man)
}

// serveHave answers the done-chunk bitmaps of a partial model (all '1' for
// a complete one).
func (s *Server) serveHave(w http.ResponseWriter, r *http.Request) {
	h, ok := s.manifestOf(w, r)
	if !ok {
		return
	}
	have := map[string]string{}
	if h.have != nil {
		have = h.have()
	} else {
		for _, f := range h.man.Files {
			have[f.Path] = strings.Repeat("1", len(f.Chunks))
		}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(have)
}

// serveFile serves a file listed in the manifest (only those: the path is
// never used to open anything else), with Range support.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request) {
	h, ok := s.manifestOf(w, r)
	if !ok {
		return
	}
	m, root := h.man, h.path
	rel := r.URL.Query().Get("path")
	i := slices.IndexFunc(m.Files, func(f File) bool { return f.Path == rel })
	if i < 0 {
		httpError(w, http.StatusNotFound, fmt.Sprintf("modelstore: model %s has no file %q", r.URL.Query().Get("model"), rel))
		return
	}
	p := filepath.Join(root, filepath.FromSlash(rel))
	if m.Single && h.have == nil {
		p = root
	}
	if h.have != nil && !partialHas(m, m.Files[i], h.have()[rel], r.Header.Get("Range")) {
		w.Header().Set(HeaderPartial, "1")
		httpError(w, http.StatusRequestedRangeNotSatisfiable, fmt.Sprintf("modelstore: %s of %s: this peer has not fetched that range yet", rel, r.URL.Query().Get("model")))
		return
	}
	fh, err := os.Open(p)
	if err != nil {
		httpError(w, http.StatusInternalServerError, fmt.Sprintf("modelstore: open %s: %v", rel, err))
		return
	}
	defer fh.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Sha256", m.Files[i].SHA256)
	http.ServeContent(w, r, "", time.Time{}, fh)
}
