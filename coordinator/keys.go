package coordinator

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/api/openai"
)

// API key administration and worker drain (macpool keys, macpool drain).
// The api package serves them over HTTP under AdminPath (the endpoints are
// listed in api/admin); the coordinator decides who is an admin
// (CheckAdmin): a stored API key created with admin rights, or
// Config.AdminToken. While the cluster stores no key at all (and has no
// AdminToken) everyone is, like on the API itself.

// AdminPath is the prefix of the admin endpoints.
const AdminPath = admin.Path

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

// The admin wire types live in api/admin, where the HTTP layer and the CLI
// find them without importing the coordinator.
type (
	KeyInfo        = admin.KeyInfo
	CreatedKey     = admin.CreatedKey
	KeyRequest     = admin.KeyRequest
	DrainResponse  = admin.DrainResponse
	NodeDrainState = admin.NodeDrainState
)

var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// ErrKeyExists is returned by CreateAPIKey for an id already in use.
var ErrKeyExists = admin.ErrKeyExists

// ErrInvalidKey is returned by CreateAPIKey for a malformed id or name.
var ErrInvalidKey = admin.ErrInvalidKey

// ErrKeyNotFound is returned by RevokeAPIKey for an unknown id.
var ErrKeyNotFound = admin.ErrKeyNotFound

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

// CreateAPIKey stores an API key through Raft: req.ID (validated; default
// key-<random>) with req.Secret, or a new random secret, which is returned
// (shown once; only its hash is stored). An id already stored is
// ErrKeyExists, except with a given secret: the operator's flags are
// authoritative, so a restart with the same --api-key (or a changed one)
// replaces the key.
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
	secret := req.Secret
	if secret == "" {
		for _, k := range c.Keys() {
			if k.ID == req.ID {
				return CreatedKey{}, fmt.Errorf("create api key %s: %w", req.ID, ErrKeyExists)
			}
		}
		secret = "mp-" + hex.EncodeToString(raw[4:])
	}
	k := APIKey{ID: req.ID, Name: req.Name, Hash: HashKey(secret), Admin: req.Admin, Created: time.Now().Unix()}
	if err := c.propose(ctx, cmdPutAPIKey, k); err != nil {
		return CreatedKey{}, fmt.Errorf("create api key %s: %w", req.ID, err)
	}
	c.log.Info("api key created", "key", k.ID, "admin", k.Admin)
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
	if err := c.propose(ctx, cmdDeleteAPIKey, nameCmd{Name: id}); err != nil {
		return fmt.Errorf("revoke api key %s: %w", id, err)
	}
	c.log.Info("api key revoked", "key", id)
	return nil
}

// CheckAdmin authorises a bearer token ("" when none was sent) for the
// admin endpoints: the cluster's admin token or a stored admin key. While
// the cluster is open (no key stored, no admin token) everyone passes;
// otherwise the error is a 401 or 403 *openai.Error.
func (c *Coordinator) CheckAdmin(_ context.Context, token string) error {
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

// AdminOpen reports whether the admin endpoints need no credential; the
// first key created then must be an admin key, so that keys can still be
// managed once it exists.
func (c *Coordinator) AdminOpen() bool {
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	return len(c.fsm.state.APIKeys) == 0 && c.cfg.AdminToken == ""
}

// HashKey is the stored form of an API key secret.
func HashKey(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// Check implements api.KeyChecker against the replicated key hashes. While
// no keys are stored everyone is let in; the id is then derived from the
// bearer token the client sent (if any) so that fairness still tells
// clients apart.
func (c *Coordinator) Check(ctx context.Context, key string) (string, error) {
	h := HashKey(key)
	c.fsm.mu.RLock()
	defer c.fsm.mu.RUnlock()
	if len(c.fsm.state.APIKeys) == 0 {
		if key == "" {
			return "", nil
		}
		return "anon-" + h[:12], nil
	}
	if k, ok := c.fsm.state.APIKeys[h]; ok && key != "" {
		c.keyUse.used(k.ID) // last use, recorded through Raft
		return k.ID, nil
	}
	return "", unauthorized("Incorrect API key provided.")
}
