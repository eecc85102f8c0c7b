package coordinator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/worker"
)

// serveHTTP serves the coordinator like the CLI does: the OpenAI API with
// the coordinator as key checker, and its admin endpoints (keys, drain,
// model registry, status).
func serveHTTP(t testing.TB, c *coordinator.Coordinator) *httptest.Server {
	t.Helper()
	acfg := api.DefaultConfig()
	acfg.Auth = c
	acfg.Admin = c
	srv, err := api.New(acfg, c, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs
}

// adminCall sends an admin request and decodes the JSON answer into out.
func adminCall(t *testing.T, method, url, token string, body any, out any) int {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
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
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: decode %q: %v", method, url, b, err)
		}
	}
	return resp.StatusCode
}

func chatAs(hsURL, key string) error {
	client := oai.NewClient(option.WithBaseURL(hsURL+"/v1/"), option.WithAPIKey(key), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := client.Chat.Completions.New(ctx, oai.ChatCompletionNewParams{
		Model:    testModel,
		Messages: []oai.ChatCompletionMessageParamUnion{oai.UserMessage("hello there")},
	})
	if err != nil {
		return err
	}
	if got := resp.Choices[0].Message.Content; got != "hello there" {
		return errors.New("unexpected answer " + got)
	}
	return nil
}

func statusOf(err error) int {
	var apiErr *oai.Error
	if errors.As(err, &apiErr) {
		return apiErr.StatusCode
	}
	return 0
}

func TestAPIKeyAdmin(t *testing.T) {
	c, _ := startCoordinator(t, coordConfig(t, "c1", nil))
	startWorker(t, "w1", c.GossipAddr(), 2, &worker.TestEngine{})
	waitWorkers(t, c, 1)
	hs := serveHTTP(t, c)
	keys := hs.URL + "/v1/admin/keys"

	// Open cluster: anyone may manage keys, but the first must be an admin key.
	var e openai.ErrorResponse
	if code := adminCall(t, "POST", keys, "", coordinator.KeyRequest{ID: "alice"}, &e); code != 400 || !strings.Contains(e.Error.Message, "admin") {
		t.Fatalf("first key not admin: got %d %+v, want 400 naming admin", code, e.Error)
	}
	var root coordinator.CreatedKey
	if code := adminCall(t, "POST", keys, "", coordinator.KeyRequest{ID: "root", Admin: true}, &root); code != 201 || root.Secret == "" || !root.Admin {
		t.Fatalf("create admin key: got %d %+v", code, root)
	}
	if code := adminCall(t, "GET", keys, "", nil, &e); code != 401 {
		t.Fatalf("list without a key once keys exist: got %d, want 401", code)
	}
	var alice coordinator.CreatedKey
	if code := adminCall(t, "POST", keys, root.Secret, coordinator.KeyRequest{ID: "alice", Name: "Alice"}, &alice); code != 201 || alice.Secret == "" || alice.Admin {
		t.Fatalf("create alice: got %d %+v", code, alice)
	}
	if code := adminCall(t, "POST", keys, root.Secret, coordinator.KeyRequest{ID: "alice"}, &e); code != 409 {
		t.Fatalf("duplicate id: got %d, want 409", code)
	}
	if code := adminCall(t, "POST", keys, root.Secret, coordinator.KeyRequest{ID: "bad id/x"}, &e); code != 400 || e.Error.Param != "id" {
		t.Fatalf("bad id: got %d %+v, want 400 param id", code, e.Error)
	}
	if code := adminCall(t, "GET", keys, alice.Secret, nil, &e); code != 403 {
		t.Fatalf("non-admin key on admin endpoint: got %d, want 403", code)
	}

	// The API: alice's key works, a wrong one is refused.
	if err := chatAs(hs.URL, alice.Secret); err != nil {
		t.Fatalf("chat with alice's key: %v", err)
	}
	if err := chatAs(hs.URL, "mp-wrong"); statusOf(err) != 401 {
		t.Fatalf("chat with a wrong key: got %v, want 401", err)
	}

	// List: ids, created, last used; never a secret or hash.
	var list struct {
		Data []coordinator.KeyInfo `json:"data"`
	}
	eventually(t, 10*time.Second, "alice's last use recorded", func() bool {
		adminCall(t, "GET", keys, root.Secret, nil, &list)
		for _, k := range list.Data {
			if k.ID == "alice" {
				return k.LastUsed > 0
			}
		}
		return false
	})
	if len(list.Data) != 2 || list.Data[0].ID != "alice" || list.Data[1].ID != "root" || list.Data[0].Created == 0 || list.Data[0].Name != "Alice" {
		t.Fatalf("list: got %+v", list.Data)
	}
	req, _ := http.NewRequest("GET", keys, nil)
	req.Header.Set("Authorization", "Bearer "+root.Secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, secret := range []string{root.Secret, alice.Secret, coordinator.HashKey(alice.Secret)} {
		if bytes.Contains(raw, []byte(secret)) {
			t.Fatalf("list shows a secret or hash: %s", raw)
		}
	}
	for _, k := range c.State().APIKeys {
		if k.ID == "alice" && k.Hash != coordinator.HashKey(alice.Secret) {
			t.Fatalf("stored hash %q is not the SHA-256 of the secret", k.Hash)
		}
	}

	// Revoke: later requests with the key get 401 (on every coordinator: Raft).
	if code := adminCall(t, "DELETE", keys+"/alice", root.Secret, nil, nil); code != 200 {
		t.Fatalf("revoke: got %d", code)
	}
	if err := chatAs(hs.URL, alice.Secret); statusOf(err) != 401 {
		t.Fatalf("chat with a revoked key: got %v, want 401", err)
	}
	if code := adminCall(t, "DELETE", keys+"/alice", root.Secret, nil, &e); code != 404 {
		t.Fatalf("revoke twice: got %d, want 404", code)
	}
	if code := adminCall(t, "POST", keys, root.Secret, map[string]any{"id": "x", "bogus": 1}, &e); code != 400 {
		t.Fatalf("unknown field: got %d, want 400", code)
	}
	if code := adminCall(t, "GET", hs.URL+"/v1/admin/nope", root.Secret, nil, &e); code != 404 {
		t.Fatalf("unknown admin path: got %d, want 404", code)
	}
}

func TestAdminToken(t *testing.T) {
	cfg := coordConfig(t, "c1", nil)
	cfg.AdminToken = "tok-admin"
	c, _ := startCoordinator(t, cfg)
	hs := serveHTTP(t, c)
	keys := hs.URL + "/v1/admin/keys"
	var e openai.ErrorResponse
	if code := adminCall(t, "GET", keys, "", nil, &e); code != 401 {
		t.Fatalf("no token with an admin token configured: got %d, want 401", code)
	}
	if code := adminCall(t, "GET", keys, "tok-wrong", nil, &e); code != 401 {
		t.Fatalf("wrong token: got %d, want 401", code)
	}
	var k coordinator.CreatedKey
	if code := adminCall(t, "POST", keys, "tok-admin", coordinator.KeyRequest{ID: "bob"}, &k); code != 201 || k.Secret == "" {
		t.Fatalf("create with the admin token: got %d %+v", code, k)
	}
}

// KeyMaxStreams: the N+1th concurrent request of one key gets 429 at once;
// other keys are not affected; a finished stream frees its place.
func TestKeyMaxStreams(t *testing.T) {
	cfg := coordConfig(t, "c1", nil)
	cfg.KeyMaxStreams = 2
	c, _ := startCoordinator(t, cfg)
	startWorker(t, "w1", c.GossipAddr(), 4, &worker.TestEngine{TokenDelay: 50 * time.Millisecond})
	waitWorkers(t, c, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var open []job.Stream
	for i := 0; i < 2; i++ {
		s, err := c.Submit(ctx, chatJob("a", "alice", words(40), 40))
		if err != nil {
			t.Fatalf("request %d of alice: %v", i+1, err)
		}
		open = append(open, s)
	}
	_, err := c.Submit(ctx, chatJob("a3", "alice", "x", 1))
	var oe *openai.Error
	if !errors.As(err, &oe) || oe.HTTPStatus() != 429 || !strings.Contains(oe.Message, "limit 2") || oe.RetryAfter <= 0 {
		t.Fatalf("third concurrent request of alice: got %v, want 429 naming the limit with Retry-After", err)
	}
	if r, err := submit(ctx, c, chatJob("b", "bob", "one two", 2)); err != nil || r.err != nil || r.text != "one two" {
		t.Fatalf("bob while alice is at her limit: got %+v %v", r, err)
	}
	if r, err := collect(ctx, open[0]); err != nil || r.err != nil {
		t.Fatalf("alice's first stream: %+v %v", r, err)
	}
	if n := c.OpenStreams("alice"); n != 1 {
		t.Fatalf("open streams of alice after one finished: got %d, want 1", n)
	}
	s, err := c.Submit(ctx, chatJob("a4", "alice", "x", 1))
	if err != nil {
		t.Fatalf("alice after one stream finished: %v", err)
	}
	s.Close()
	open[1].Close()
	if n := c.OpenStreams("alice"); n != 0 {
		t.Fatalf("open streams of alice after all closed: got %d, want 0", n)
	}
}

// TestCreateAPIKeyWithSecret: an operator-chosen secret (coordinator
// --api-key) goes through the same validation as a key created over HTTP,
// replaces a stored key of its id (a restart with the same or a changed
// flag), and authenticates with exactly that secret.
func TestCreateAPIKeyWithSecret(t *testing.T) {
	c, _ := startCoordinator(t, coordConfig(t, "c1", nil))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.CreateAPIKey(ctx, coordinator.KeyRequest{ID: "bad id", Secret: "sk-x"}); !errors.Is(err, coordinator.ErrInvalidKey) {
		t.Fatalf("id with a space: error %v, want ErrInvalidKey", err)
	}
	for _, secret := range []string{"sk-one", "sk-one", "sk-two"} {
		k, err := c.CreateAPIKey(ctx, coordinator.KeyRequest{ID: "team", Name: "team", Secret: secret})
		if err != nil || k.Secret != secret {
			t.Fatalf("create team with %s: %+v, %v", secret, k, err)
		}
	}
	if n := len(c.Keys()); n != 1 {
		t.Fatalf("%d keys stored, want 1 (re-creating with a secret replaces)", n)
	}
	if id, err := c.Check(ctx, "sk-two"); err != nil || id != "team" {
		t.Errorf("check sk-two: %q, %v; want team", id, err)
	}
	if _, err := c.Check(ctx, "sk-one"); err == nil {
		t.Error("the replaced secret sk-one still authenticates")
	}
	if _, err := c.CreateAPIKey(ctx, coordinator.KeyRequest{ID: "team"}); !errors.Is(err, coordinator.ErrKeyExists) {
		t.Errorf("random secret for a stored id: error %v, want ErrKeyExists", err)
	}
}
