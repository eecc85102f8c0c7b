package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/api/openai"
)

// fakeAdmin follows the coordinator's rules with fixed credentials: tokens
// maps a bearer token to whether it is an admin's; an empty map is an open
// cluster. It is also the KeyChecker, as the coordinator is in the product.
type fakeAdmin struct {
	tokens map[string]bool

	mu      sync.Mutex
	drained []string
	removed []string
}

func (f *fakeAdmin) open() bool { return len(f.tokens) == 0 }

func (f *fakeAdmin) Check(_ context.Context, key string) (string, error) {
	if _, ok := f.tokens[key]; ok || f.open() {
		return "id-" + key, nil
	}
	return "", openai.Unauthorized("Incorrect API key provided.")
}

func (f *fakeAdmin) CheckAdmin(_ context.Context, token string) error {
	isAdmin, ok := f.tokens[token]
	switch {
	case f.open() || isAdmin:
		return nil
	case ok:
		return &openai.Error{Status: http.StatusForbidden, Type: openai.TypeInvalidRequest, Code: "insufficient_permissions", Message: "not an admin key"}
	}
	return openai.Unauthorized("an admin API key is required")
}

func (f *fakeAdmin) AdminOpen() bool { return f.open() }

func (f *fakeAdmin) Keys() []admin.KeyInfo {
	return []admin.KeyInfo{{ID: "alice", Created: 1}, {ID: "root", Admin: true, Created: 1}}
}

func (f *fakeAdmin) CreateAPIKey(_ context.Context, req admin.KeyRequest) (admin.CreatedKey, error) {
	switch req.ID {
	case "alice":
		return admin.CreatedKey{}, fmt.Errorf("create api key alice: %w", admin.ErrKeyExists)
	case "bad id":
		return admin.CreatedKey{}, fmt.Errorf("create api key: %w: id %q", admin.ErrInvalidKey, req.ID)
	case "no-leader":
		return admin.CreatedKey{}, errors.New("create api key: no raft leader")
	}
	return admin.CreatedKey{KeyInfo: admin.KeyInfo{ID: req.ID, Name: req.Name, Admin: req.Admin, Created: 1}, Secret: "mp-secret"}, nil
}

func (f *fakeAdmin) RevokeAPIKey(_ context.Context, id string) error {
	if id != "alice" {
		return fmt.Errorf("revoke api key %s: %w", id, admin.ErrKeyNotFound)
	}
	return nil
}

func (f *fakeAdmin) DrainNode(_ context.Context, node string, timeout time.Duration) (admin.DrainResponse, error) {
	switch node {
	case "gone":
		return admin.DrainResponse{}, fmt.Errorf("drain gone: %w", admin.ErrNodeNotFound)
	case "c1":
		return admin.DrainResponse{}, fmt.Errorf("drain c1: %w (it is a coordinator)", admin.ErrNotWorker)
	}
	f.mu.Lock()
	f.drained = append(f.drained, fmt.Sprintf("%s %v", node, timeout))
	f.mu.Unlock()
	return admin.DrainResponse{Node: node, Running: 2}, nil
}

func (f *fakeAdmin) NodeDrainState(node string) admin.NodeDrainState {
	return admin.NodeDrainState{Node: node, Present: true, Leaving: true, Running: 1}
}

func (f *fakeAdmin) ModelStatuses() []admin.ModelStatus {
	return []admin.ModelStatus{{ModelSpec: admin.ModelSpec{Name: "Qwen/Qwen3-8B", Managed: true}, Assigned: []string{"w1"}, Serving: []string{}, Workers: []admin.WorkerModelState{{Worker: "w1", State: "ready"}}}}
}

func (f *fakeAdmin) AddManagedModel(_ context.Context, req admin.AddModelRequest) (admin.ModelSpec, error) {
	switch req.Source {
	case "":
		return admin.ModelSpec{}, openai.InvalidRequest("source", "source must be a Hugging Face reference or a local path")
	case "no-leader":
		return admin.ModelSpec{}, errors.New("no raft leader")
	}
	return admin.ModelSpec{Name: req.Source, Source: req.Source, Managed: true}, nil
}

func (f *fakeAdmin) RemoveManagedModel(_ context.Context, name string) error {
	if name == "missing" {
		return fmt.Errorf("%w: %q", admin.ErrModelNotFound, name)
	}
	f.mu.Lock()
	f.removed = append(f.removed, name)
	f.mu.Unlock()
	return nil
}

func (f *fakeAdmin) Status(context.Context) admin.Status {
	return admin.Status{Coordinator: "c1", Leader: "c1", Nodes: []admin.NodeStatus{{Name: "w1", Role: "worker", Slots: 2, Running: 1, Free: 1}}, Queued: map[string]uint64{"m": 3}}
}

func newAdminServer(t *testing.T, a *fakeAdmin) string {
	t.Helper()
	_, hs := newTestServer(t, &fakeService{}, func(c *Config) { c.Auth = a; c.Admin = a })
	return hs.URL
}

// adminDo sends a request with an optional bearer token and raw body.
func adminDo(t *testing.T, method, url, token, body string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, b
}

// Status codes, error shapes and auth rules of the admin endpoints on a
// cluster with keys: admin routes want an admin, listing models and the
// status want any valid key.
func TestAdminEndpoints(t *testing.T) {
	a := &fakeAdmin{tokens: map[string]bool{"root": true, "alice": false}}
	base := newAdminServer(t, a)
	const inv = openai.TypeInvalidRequest
	for _, tc := range []struct {
		name, method, path, token, body string
		want                            int
		wantType, wantParam             string // error answers
		wantBody                        string // a substring of a success answer
	}{
		{"list keys", "GET", "/v1/admin/keys", "root", "", 200, "", "", `{"data":[{"id":"alice","created":1},{"id":"root","admin":true,"created":1}],"object":"list"}`},
		{"list keys without a key", "GET", "/v1/admin/keys", "", "", 401, inv, "", ""},
		{"list keys with a wrong key", "GET", "/v1/admin/keys", "nope", "", 401, inv, "", ""},
		{"list keys as non-admin", "GET", "/v1/admin/keys", "alice", "", 403, inv, "", ""},
		{"create key", "POST", "/v1/admin/keys", "root", `{"id":"bob","name":"Bob"}`, 201, "", "", `"secret":"mp-secret"`},
		{"create duplicate key", "POST", "/v1/admin/keys", "root", `{"id":"alice"}`, 409, inv, "id", ""},
		{"create bad id", "POST", "/v1/admin/keys", "root", `{"id":"bad id"}`, 400, inv, "id", ""},
		{"create without a leader", "POST", "/v1/admin/keys", "root", `{"id":"no-leader"}`, 503, openai.TypeUnavailable, "", ""},
		{"create with an unknown field", "POST", "/v1/admin/keys", "root", `{"id":"x","bogus":1}`, 400, inv, "", ""},
		{"create with bad JSON", "POST", "/v1/admin/keys", "root", `{"id":`, 400, inv, "", ""},
		{"create without a body", "POST", "/v1/admin/keys", "root", "", 400, inv, "", ""},
		{"create with a huge body", "POST", "/v1/admin/keys", "root", `{"name":"` + strings.Repeat("x", maxAdminBody) + `"}`, 413, inv, "", ""},
		{"create as non-admin", "POST", "/v1/admin/keys", "alice", `{"id":"x"}`, 403, inv, "", ""},
		{"revoke", "DELETE", "/v1/admin/keys/alice", "root", "", 200, "", "", `{"id":"alice","revoked":true}`},
		{"revoke unknown", "DELETE", "/v1/admin/keys/carol", "root", "", 404, inv, "id", ""},
		{"drain", "POST", "/v1/admin/drain", "root", `{"node":"w1","timeout_ms":1500}`, 202, "", "", `{"node":"w1","running":2}`},
		{"drain without node", "POST", "/v1/admin/drain", "root", `{}`, 400, inv, "node", ""},
		{"drain negative timeout", "POST", "/v1/admin/drain", "root", `{"node":"w1","timeout_ms":-1}`, 400, inv, "timeout_ms", ""},
		{"drain unknown node", "POST", "/v1/admin/drain", "root", `{"node":"gone"}`, 404, inv, "node", ""},
		{"drain a coordinator", "POST", "/v1/admin/drain", "root", `{"node":"c1"}`, 400, inv, "node", ""},
		{"drain as non-admin", "POST", "/v1/admin/drain", "alice", `{"node":"w1"}`, 403, inv, "", ""},
		{"drain state", "GET", "/v1/admin/drain/w1", "root", "", 200, "", "", `{"node":"w1","present":true,"leaving":true,"running":1}`},
		{"list models with a key", "GET", "/v1/admin/models", "alice", "", 200, "", "", `"name":"Qwen/Qwen3-8B"`},
		{"list models without a key", "GET", "/v1/admin/models", "", "", 401, inv, "", ""},
		{"add model", "POST", "/v1/admin/models", "root", `{"source":"Qwen/Qwen3-0.6B"}`, 201, "", "", `"managed":true`},
		{"add model without source", "POST", "/v1/admin/models", "root", `{"name":"x"}`, 400, inv, "source", ""},
		{"add model without a leader", "POST", "/v1/admin/models", "root", `{"source":"no-leader"}`, 503, openai.TypeUnavailable, "", ""},
		{"add model with an unknown field", "POST", "/v1/admin/models", "root", `{"source":"a","x":1}`, 400, inv, "", ""},
		{"add model as non-admin", "POST", "/v1/admin/models", "alice", `{"source":"a"}`, 403, inv, "", ""},
		{"remove model with a slash", "DELETE", "/v1/admin/models/Qwen%2FQwen3-8B", "root", "", 200, "", "", `{"name":"Qwen/Qwen3-8B","removed":true}`},
		{"remove unknown model", "DELETE", "/v1/admin/models/missing", "root", "", 404, inv, "name", ""},
		{"remove model as non-admin", "DELETE", "/v1/admin/models/x", "alice", "", 403, inv, "", ""},
		{"status with a key", "GET", "/v1/cluster/status", "alice", "", 200, "", "", `"coordinator":"c1"`},
		{"status without a key", "GET", "/v1/cluster/status", "", "", 401, inv, "", ""},
		{"status with a wrong method", "POST", "/v1/cluster/status", "alice", "", 405, inv, "", ""},
		{"unknown admin path without a key", "GET", "/v1/admin/nope", "", "", 401, inv, "", ""},
		{"unknown admin path as non-admin", "GET", "/v1/admin/nope", "alice", "", 403, inv, "", ""},
		{"unknown admin path as admin", "GET", "/v1/admin/nope", "root", "", 404, inv, "", ""},
		{"wrong method on an admin path without a key", "PUT", "/v1/admin/keys", "", "", 401, inv, "", ""},
		{"wrong method on an admin path", "PUT", "/v1/admin/keys", "root", "", 405, inv, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, h, body := adminDo(t, tc.method, base+tc.path, tc.token, tc.body)
			if code != tc.want {
				t.Fatalf("got %d %s, want %d", code, body, tc.want)
			}
			if ct := h.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q, want JSON", ct)
			}
			if tc.wantType != "" {
				checkErrorBody(t, body, tc.wantType, tc.wantParam)
				return
			}
			if !bytes.Contains(body, []byte(tc.wantBody)) {
				t.Errorf("body %s lacks %s", body, tc.wantBody)
			}
		})
	}
	if len(a.drained) != 1 || a.drained[0] != "w1 1.5s" {
		t.Errorf("drained %q, want w1 with its timeout", a.drained)
	}
	if len(a.removed) != 1 || a.removed[0] != "Qwen/Qwen3-8B" {
		t.Errorf("removed %q, want the unescaped name", a.removed)
	}
}

// On an open cluster everyone may manage keys, but the first key must be an
// admin key so that keys can still be managed once it exists.
func TestAdminOpenCluster(t *testing.T) {
	base := newAdminServer(t, &fakeAdmin{})
	code, _, body := adminDo(t, "POST", base+"/v1/admin/keys", "", `{"id":"alice"}`)
	if code != 400 {
		t.Fatalf("first key not admin: got %d %s, want 400", code, body)
	}
	if e := checkErrorBody(t, body, openai.TypeInvalidRequest, "admin"); !strings.Contains(e["message"].(string), "admin") {
		t.Errorf("message %q does not name admin", e["message"])
	}
	var k admin.CreatedKey
	code, _, body = adminDo(t, "POST", base+"/v1/admin/keys", "", `{"id":"root","admin":true}`)
	if err := json.Unmarshal(body, &k); code != 201 || err != nil || k.Secret == "" || !k.Admin || k.ID != "root" {
		t.Fatalf("first admin key: got %d %s", code, body)
	}
	for _, p := range []string{"/v1/admin/keys", "/v1/admin/models", "/v1/cluster/status"} {
		if code, _, body := adminDo(t, "GET", base+p, "", ""); code != 200 {
			t.Errorf("GET %s on an open cluster: got %d %s, want 200", p, code, body)
		}
	}
}

// Without Config.Admin the endpoints do not exist.
func TestAdminNotServedWithoutAdmin(t *testing.T) {
	_, hs := newTestServer(t, &fakeService{}, nil)
	for _, p := range []string{"/v1/admin/keys", "/v1/admin/models", "/v1/cluster/status"} {
		code, _, body := adminDo(t, "GET", hs.URL+p, "", "")
		if code != 404 {
			t.Errorf("GET %s: got %d, want 404", p, code)
		}
		checkErrorBody(t, body, openai.TypeInvalidRequest, "")
	}
}
