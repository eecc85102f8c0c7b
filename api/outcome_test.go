package api

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// The access log's status is the request's outcome as /metrics counts it
// (a stream whose client went away: 499, though 200 went out), and every
// request refused before it reached the Service (which the metrics never
// saw: bad JSON, unknown routes) is reported to OnRejected.
func TestOutcomeLoggedAndRejectedCounted(t *testing.T) {
	var logs lockedBuffer
	var mu sync.Mutex
	rejected := map[string]int{}
	cfg := DefaultConfig()
	cfg.OnRejected = func(path string, e *openai.Error) {
		mu.Lock()
		rejected[path] = e.HTTPStatus()
		mu.Unlock()
	}
	svc := &fakeService{events: []job.Event{{Worker: "mac-1", Text: "hel"}, {Worker: "mac-1", Text: "lo"}}, hold: true}
	s, err := New(cfg, svc, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()

	post := func(body string) int {
		resp, err := http.Post(hs.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post(`{"model":`); got != 400 {
		t.Fatalf("bad JSON: %d, want 400", got)
	}
	if resp, err := http.Get(hs.URL + "/v1/nope"); err != nil || resp.StatusCode != 404 {
		t.Fatalf("unknown route: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	// A stream whose client leaves after the first chunk.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+"/v1/chat/completions",
		strings.NewReader(`{"model":"qwen3-8b","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() && !strings.HasPrefix(sc.Text(), "data: ") {
	}
	cancel()
	resp.Body.Close()
	eventually(t, "the cancelled stream's access log line", func() bool {
		return strings.Contains(logs.String(), "status=499 http_status=200")
	})

	mu.Lock()
	defer mu.Unlock()
	if rejected["/v1/chat/completions"] != 400 || rejected["/v1/nope"] != 404 || len(rejected) != 2 {
		t.Fatalf("rejected requests reported: %v, want the 400 and the 404 only (the stream reached the service)", rejected)
	}
}
