package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
)

// Config.Handlers share the API's router: exact paths, subtrees and the
// root, for GET and HEAD, without the API's auth; the API's own routes and
// errors are unchanged around them.
func TestHandlersMounted(t *testing.T) {
	named := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "%s %s", name, r.URL.Path) })
	}
	_, hs := newTestServer(t, &fakeService{}, func(c *Config) {
		c.Auth = NewStaticKeys(map[string]string{"sk-1": "one"})
		c.Handlers = map[string]http.Handler{"/metrics": named("metrics"), "/dashboard": named("dash"), "/dashboard/": named("dash"), "/{$}": named("root")}
	})
	for _, tc := range []struct {
		method, path string
		want         int
		body         string
	}{
		{"GET", "/metrics", 200, "metrics /metrics"},
		{"HEAD", "/metrics", 200, ""},
		{"GET", "/", 200, "root /"},
		{"GET", "/dashboard", 200, "dash /dashboard"},
		{"GET", "/dashboard/static/app.js", 200, "dash /dashboard/static/app.js"},
		{"GET", "/metrics/x", 404, `"type":"invalid_request_error"`},
		{"GET", "/nope", 404, `"type":"invalid_request_error"`},
		{"POST", "/", 405, `"type":"invalid_request_error"`},
		{"GET", "/v1/models", 401, `"code":"invalid_api_key"`}, // the API keeps its auth
	} {
		req, _ := http.NewRequest(tc.method, hs.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || !strings.Contains(string(b), tc.body) {
			t.Errorf("%s %s: got %d %q, want %d with %q", tc.method, tc.path, resp.StatusCode, b, tc.want, tc.body)
		}
	}
}

func TestHandlersValidate(t *testing.T) {
	ok := http.NotFoundHandler()
	for _, tc := range []struct {
		path    string
		h       http.Handler
		wantErr string
	}{
		{"/metrics", ok, ""},
		{"/dashboard/", ok, ""},
		{"/{$}", ok, ""},
		{"metrics", ok, `api handler path "metrics" must start with '/'`},
		{"/", ok, `api handler path "/" must start with '/' and hold no wildcard`},
		{"/x/{id}", ok, `api handler path "/x/{id}" must start with '/' and hold no wildcard`},
		{"/x/*rest", ok, `api handler path "/x/*rest" must start with '/' and hold no wildcard`},
		{"/metrics", nil, `api handler for "/metrics" must not be nil`},
	} {
		cfg := DefaultConfig()
		cfg.Handlers = map[string]http.Handler{tc.path: tc.h}
		err := cfg.Validate()
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Handlers %q: got %v, want %q", tc.path, err, tc.wantErr)
		}
	}
}

// Serve applies Config's listener timeouts: a client that sends its
// headers too slowly is cut off after ReadHeaderTimeout, and an idle
// keep-alive connection is closed after IdleTimeout.
func TestServeAppliesTimeouts(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReadHeaderTimeout = 100 * time.Millisecond
	cfg.IdleTimeout = 200 * time.Millisecond
	s, err := New(cfg, &fakeService{models: []openai.Model{{ID: "m"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	cutAfter(t, ln.Addr().String(), "GET /healthz HTTP/1.1\r\nHost: x\r\n", cfg.ReadHeaderTimeout)
	cutAfter(t, ln.Addr().String(), "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", cfg.IdleTimeout)
}

// cutAfter writes send on a new connection, reads what comes back, and
// checks that the server closes the connection after about d (not before,
// and well before the 10 s that would mean the timeout is not applied).
func cutAfter(t *testing.T, addr, send string, d time.Duration) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, send); err != nil {
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, bufio.NewReader(conn))
	took := time.Since(start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%q: the connection was still open after %v, want it closed after %v", send, took, d)
	}
	if took < d/2 || took > d+5*time.Second {
		t.Errorf("%q: closed after %v, want about %v", send, took, d)
	}
}
