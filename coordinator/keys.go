package coordinator

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
)

// API key administration and worker drain over HTTP (macpool keys, macpool
// drain). The admin endpoints live under AdminPath and need an admin
// credential: a stored API key created with admin rights, or
// Config.AdminToken. While the cluster stores no key at all (and has no
// AdminToken) they are open, like the API itself; the first key created
// then must be an admin key, so that keys can still be managed afterwards.
//
//	GET    /v1/admin/keys        list: id, name, admin, created, last used (never secrets)
//	POST   /v1/admin/keys        create {id?, name?, admin?}: the secret is in the answer, once
//	DELETE /v1/admin/keys/{id}   revoke: later requests with it get 401
//	POST   /v1/admin/drain       {node, timeout_ms?}: ask a worker to drain and leave
//	GET    /v1/admin/drain/{node} the node's progress: present, leaving, running jobs

// AdminPath is the prefix of the admin endpoints.
const AdminPath = "/v1/admin/"

// cmdTouchAPIKey records the last use of a key. Explicit value: other
// commands are numbered from 1 by iota in fsm.go.
const cmdTouchAPIKey cmdType = 32

type touchCmd struct {
	ID string `json:"id"`
	At int64  `json:"at"` // unix seconds, set by the proposer
}

// applyTouchKey is Apply of cmdTouchAPIKey; f.mu is held. Touching a key
// that was revoked meanwhile does nothing (a late touch never resurrects
// it), and last-used only moves forward.
func (f *fsm) applyTouchKey(body []byte) error {
	var c touchCmd
	if err := json.Unmarshal(body, &c); err != nil {
		return fmt.Errorf("touch api key: %w", err)
	}
	for h, k := range f.state.APIKeys {
		if k.ID == c.ID && c.At > k.LastUsed {
			k.LastUsed = c.At
			f.state.APIKeys[h] = k
		}
	}
	return nil
}

// touchEvery is how often one coordinator records the use of one key in
// Raft at most.
const touchEvery = time.Minute

// keyUse rate-limits last-use records: Check notes a use, touchLoop writes it.
type keyUse struct {
	mu      sync.Mutex
	written map[string]time.Time // key id -> last time a touch was queued
	queue   chan touchCmd
}

// used notes that key id authenticated a request now.
func (u *keyUse) used(id string) {
	now := time.Now()
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.written == nil {
		u.written = map[string]time.Time{}
		u.queue = make(chan touchCmd, 64)
	}
	if now.Sub(u.written[id]) < touchEvery {
		return
	}
	select {
	case u.queue <- touchCmd{ID: id, At: now.Unix()}:
		u.written[id] = now
	default: // a burst of new keys: recorded at a later use
	}
}

func (u *keyUse) ch() chan touchCmd {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.queue == nil {
		u.written = map[string]time.Time{}
		u.queue = make(chan touchCmd, 64)
	}
	return u.queue
}

// touchLoop writes last-use records through Raft until ctx ends.
func (c *Coordinator) touchLoop(ctx context.Context) {
	q := c.keyUse.ch()
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-q:
			tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := c.propose(tctx, cmdTouchAPIKey, t); err != nil && ctx.Err() == nil {
				c.log.Debug("record api key use", "key", t.ID, "err", err)
			}
			cancel()
		}
	}
}

// KeyInfo is an API key as listed (no secret, no hash).
type KeyInfo struct {
	ID       string `json:"id"`
	Name     string `json:"name,omitempty"`
	Admin    bool   `json:"admin,omitempty"`
	Created  int64  `json:"created,omitempty"`   // unix seconds
	LastUsed int64  `json:"last_used,omitempty"` // unix seconds, to within a minute; 0: never
}

// CreatedKey is the answer to a key creation: the only time the secret is shown.
type CreatedKey struct {
	KeyInfo
	Secret string `json:"secret"`
}

// KeyRequest creates a key.
type KeyRequest struct {
	ID    string `json:"id,omitempty"` // default: key-<random>
	Name  string `json:"name,omitempty"`
	Admin bool   `json:"admin,omitempty"`
}

// DrainResponse answers POST /v1/admin/drain.
type DrainResponse struct {
	Node    string `json:"node"`
	Running int    `json:"running"` // jobs running on the node when it began draining
}

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ErrKeyExists is returned by CreateAPIKey for an id already in use.
var ErrKeyExists = errors.New("an api key with this id exists")

// ErrInvalidKey is returned by CreateAPIKey for a malformed id or name.
var ErrInvalidKey = errors.New("invalid api key request")

// ErrKeyNotFound is returned by RevokeAPIKey for an unknown id.
var ErrKeyNotFound = errors.New("no api key with this id")

// Keys lists the stored API keys by id.
func (c *Coordinator) Keys() []KeyInfo {
	st := c.fsm.snapshot()
	out := make([]KeyInfo, 0, len(st.APIKeys))
	for _, k := range st.APIKeys {
		out = append(out, KeyInfo{ID: k.ID, Name: k.Name, Admin: k.Admin, Created: k.Created, LastUsed: k.LastUsed})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// CreateAPIKey makes a new random secret, stores its hash under req.ID
// through Raft and returns the secret (shown once, never stored).
func (c *Coordinator) CreateAPIKey(ctx context.Context, req KeyRequest) (CreatedKey, error) {
	var raw [24]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return CreatedKey{}, fmt.Errorf("create api key: random: %w", err)
	}
	if req.ID == "" {
		req.ID = "key-" + hex.EncodeToString(raw[:4])
	}
	if !keyIDPattern.MatchString(req.ID) {
		return CreatedKey{}, fmt.Errorf("create api key: %w: id %q must be 1-64 letters, digits, '.', '_' or '-' (starting with a letter or digit)", ErrInvalidKey, req.ID)
	}
	if len(req.Name) > 200 {
		return CreatedKey{}, fmt.Errorf("create api key: %w: name of %d bytes exceeds 200", ErrInvalidKey, len(req.Name))
	}
	for _, k := range c.Keys() {
		if k.ID == req.ID {
			return CreatedKey{}, fmt.Errorf("create api key %s: %w", req.ID, ErrKeyExists)
		}
	}
	secret := "mp-" + hex.EncodeToString(raw[4:])
	k := APIKey{ID: req.ID, Name: req.Name, Hash: HashKey(secret), Admin: req.Admin, Created: time.Now().Unix()}
	if err := c.propose(ctx, cmdPutAPIKey, k); err != nil {
		return CreatedKey{}, fmt.Errorf("create api key %s: %w", req.ID, err)
	}
	return CreatedKey{KeyInfo: KeyInfo{ID: k.ID, Name: k.Name, Admin: k.Admin, Created: k.Created}, Secret: secret}, nil
}

// RevokeAPIKey deletes key id through Raft.
func (c *Coordinator) RevokeAPIKey(ctx context.Context, id string) error {
	found := false
	for _, k := range c.Keys() {
		found = found || k.ID == id
	}
	if !found {
		return fmt.Errorf("revoke api key %s: %w", id, ErrKeyNotFound)
	}
	if err := c.RemoveAPIKey(ctx, id); err != nil {
		return fmt.Errorf("revoke api key %s: %w", id, err)
	}
	return nil
}

// DrainNode asks worker node (over NATS) to drain: stop taking jobs,
// finish or after timeout hand off its running jobs, and leave. It returns
// once the worker accepted; watch gossip (or Status) to see it leave.
func (c *Coordinator) DrainNode(ctx context.Context, node string, timeout time.Duration) (DrainResponse, error) {
	m, ok := c.ml.Member(node)
	if !ok {
		return DrainResponse{}, fmt.Errorf("drain %s: %w", node, ErrNodeNotFound)
	}
	if m.Meta.Role != cluster.RoleWorker {
		return DrainResponse{}, fmt.Errorf("drain %s: %w (it is a %s)", node, ErrNotWorker, m.Meta.Role)
	}
	body, _ := json.Marshal(cluster.DrainRequest{TimeoutMS: timeout.Milliseconds()})
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	msg, err := c.nc.RequestWithContext(rctx, cluster.DrainSubject(node), body)
	if err != nil {
		return DrainResponse{}, fmt.Errorf("drain %s: ask the worker over nats: %w", node, err)
	}
	var r cluster.DrainReply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return DrainResponse{}, fmt.Errorf("drain %s: malformed answer: %w", node, err)
	}
	if r.Error != "" {
		return DrainResponse{}, fmt.Errorf("drain %s: worker refused: %s", node, r.Error)
	}
	c.log.Info("worker draining", "node", node, "running", r.Running, "timeout", timeout)
	return DrainResponse{Node: node, Running: r.Running}, nil
}

// NodeDrainState is a node's progress as macpool drain shows it
// (GET /v1/admin/drain/{node}).
type NodeDrainState struct {
	Node    string `json:"node"`
	Present bool   `json:"present"` // still in gossip
	Leaving bool   `json:"leaving"` // gossips that it is draining / leaving
	Running int    `json:"running"` // jobs running (gossiped, at most MetaInterval old)
}

// NodeDrainState reports node as gossip shows it.
func (c *Coordinator) NodeDrainState(node string) NodeDrainState {
	m, ok := c.ml.Member(node)
	if !ok {
		return NodeDrainState{Node: node}
	}
	return NodeDrainState{Node: node, Present: true, Leaving: m.Meta.Leaving, Running: m.Meta.Running}
}

// ErrNodeNotFound and ErrNotWorker are DrainNode's errors for a node that
// gossip does not show and for a node that is not a worker.
var (
	ErrNodeNotFound = errors.New("no such node in the cluster")
	ErrNotWorker    = errors.New("only workers can be drained")
)

// checkAdmin authorises an admin request from its bearer token.
func (c *Coordinator) checkAdmin(r *http.Request) *openai.Error {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") {
		token = ""
	}
	if c.cfg.AdminToken != "" && token != "" &&
		subtle.ConstantTimeCompare([]byte(token), []byte(c.cfg.AdminToken)) == 1 {
		return nil
	}
	h := HashKey(token)
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	if len(c.fsm.state.APIKeys) == 0 && c.cfg.AdminToken == "" {
		return nil // an open cluster, like the API
	}
	k, ok := c.fsm.state.APIKeys[h]
	switch {
	case token == "" || !ok:
		return unauthorized("an admin API key is required (macpool keys create --admin, or the cluster admin token)")
	case !k.Admin:
		return &openai.Error{Status: http.StatusForbidden, Type: openai.TypeInvalidRequest, Code: "insufficient_permissions",
			Message: fmt.Sprintf("API key %q is not an admin key", k.ID)}
	}
	return nil
}

// adminOpen reports whether the admin endpoints need no credential.
func (c *Coordinator) adminOpen() bool {
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	return len(c.fsm.state.APIKeys) == 0 && c.cfg.AdminToken == ""
}

// maxAdminBody bounds admin request bodies.
const maxAdminBody = 64 << 10

// AdminHandler serves the admin endpoints (mount it at AdminPath).
func (c *Coordinator) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/admin/keys", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": c.Keys()})
	})
	mux.HandleFunc("POST /v1/admin/keys", func(w http.ResponseWriter, r *http.Request) {
		var req KeyRequest
		if oe := readJSON(r, &req); oe != nil {
			writeAdminError(w, oe)
			return
		}
		if !req.Admin && c.adminOpen() {
			writeAdminError(w, openai.InvalidRequest("admin",
				"the first API key must be an admin key (admin: true; macpool keys create --admin): once a key exists, only admin keys can manage keys"))
			return
		}
		k, err := c.CreateAPIKey(r.Context(), req)
		switch {
		case errors.Is(err, ErrKeyExists):
			writeAdminError(w, &openai.Error{Status: http.StatusConflict, Type: openai.TypeInvalidRequest, Param: "id", Message: err.Error()})
		case errors.Is(err, ErrInvalidKey):
			writeAdminError(w, openai.InvalidRequest("id", "%v", err))
		case err != nil:
			writeAdminError(w, unavailable("%v", err))
		default:
			c.log.Info("api key created", "key", k.ID, "admin", k.Admin)
			writeJSON(w, http.StatusCreated, k)
		}
	})
	mux.HandleFunc("DELETE /v1/admin/keys/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		err := c.RevokeAPIKey(r.Context(), id)
		switch {
		case errors.Is(err, ErrKeyNotFound):
			writeAdminError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "id", Message: err.Error()})
		case err != nil:
			writeAdminError(w, unavailable("%v", err))
		default:
			c.log.Info("api key revoked", "key", id)
			writeJSON(w, http.StatusOK, map[string]any{"id": id, "revoked": true})
		}
	})
	mux.HandleFunc("POST /v1/admin/drain", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Node      string `json:"node"`
			TimeoutMS int64  `json:"timeout_ms,omitempty"`
		}
		if oe := readJSON(r, &req); oe != nil {
			writeAdminError(w, oe)
			return
		}
		if req.Node == "" {
			writeAdminError(w, openai.InvalidRequest("node", "node must be set"))
			return
		}
		if req.TimeoutMS < 0 {
			writeAdminError(w, openai.InvalidRequest("timeout_ms", "timeout_ms %d must not be negative", req.TimeoutMS))
			return
		}
		resp, err := c.DrainNode(r.Context(), req.Node, time.Duration(req.TimeoutMS)*time.Millisecond)
		switch {
		case errors.Is(err, ErrNodeNotFound):
			writeAdminError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest, Param: "node", Message: err.Error()})
		case errors.Is(err, ErrNotWorker):
			writeAdminError(w, openai.InvalidRequest("node", "%v", err))
		case err != nil:
			writeAdminError(w, unavailable("%v", err))
		default:
			writeJSON(w, http.StatusAccepted, resp)
		}
	})
	mux.HandleFunc("GET /v1/admin/drain/{node}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, c.NodeDrainState(r.PathValue("node")))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if oe := c.checkAdmin(r); oe != nil {
			writeAdminError(w, oe)
			return
		}
		if _, pattern := mux.Handler(r); pattern == "" {
			writeAdminError(w, &openai.Error{Status: http.StatusNotFound, Type: openai.TypeInvalidRequest,
				Message: fmt.Sprintf("Invalid URL (%s %s)", r.Method, r.URL.Path)})
			return
		}
		mux.ServeHTTP(w, r) // sets the path values
	})
}

func readJSON(r *http.Request, v any) *openai.Error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxAdminBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return &openai.Error{Status: http.StatusRequestEntityTooLarge, Type: openai.TypeInvalidRequest,
				Message: fmt.Sprintf("request body exceeds %d bytes", maxAdminBody)}
		}
		return openai.InvalidRequest("", "invalid JSON body: %v", err)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeAdminError(w http.ResponseWriter, e *openai.Error) {
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", fmt.Sprint(int(e.RetryAfter.Seconds()+0.999)))
	}
	writeJSON(w, e.HTTPStatus(), openai.ErrorResponse{Error: e})
}
