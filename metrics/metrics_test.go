package metrics

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func scrape(t *testing.T, r *Registry) string {
	t.Helper()
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: got status %d, want 200", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type got %q, want text/plain", ct)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestExposition(t *testing.T) {
	r := New()
	r.ObserveRequest("qwen3-0.6b", "chat", 200, 1500*time.Millisecond)
	r.ObserveRequest("qwen3-0.6b", "chat", 200, 500*time.Millisecond)
	r.ObserveRequest("qwen3-0.6b", "completion", 429, 0)
	r.ObserveRequest("no-such-model-from-a-client", "chat", 404, 0)
	r.SetQueueDepth("qwen3-0.6b", 7)
	r.ObserveQueueWait("qwen3-0.6b", 30*time.Millisecond)
	r.ObserveTTFT("qwen3-0.6b", 200*time.Millisecond)
	r.ObserveTTFT("qwen3-0.6b", 3*time.Second)
	r.ObserveInterToken("qwen3-0.6b", 15*time.Millisecond)
	r.AddGeneratedTokens("mac-1", "qwen3-0.6b", 120)
	r.AddGeneratedTokens("mac-2", "qwen3-0.6b", 30)
	r.AddGeneratedTokens("mac-2", "qwen3-0.6b", 0) // ignored
	r.AddPromptTokens("mac-1", "qwen3-0.6b", 50)
	r.ObservePrefixCache("mac-1", "qwen3-0.6b", true)
	r.ObservePrefixCache("mac-1", "qwen3-0.6b", false)
	r.ObservePrefixCache("mac-1", "qwen3-0.6b", true)
	r.ObservePrefixCache("mac-2", "qwen3-0.6b", false)
	r.SetWorkerLoad("mac-1", "qwen3-0.6b", 3, 8)
	r.Failover("worker")
	r.Error("worker_failed")
	r.Error("worker_failed")
	r.Error("queue_full")

	want := `
# HELP macpool_requests_total API requests finished, by model, kind (chat, completion) and HTTP status.
# TYPE macpool_requests_total counter
macpool_requests_total{kind="chat",model="_unknown",status="404"} 1
macpool_requests_total{kind="chat",model="qwen3-0.6b",status="200"} 2
macpool_requests_total{kind="completion",model="qwen3-0.6b",status="429"} 1
# HELP macpool_generated_tokens_total Tokens generated, by worker and model (rate() gives tokens/s).
# TYPE macpool_generated_tokens_total counter
macpool_generated_tokens_total{model="qwen3-0.6b",worker="mac-1"} 120
macpool_generated_tokens_total{model="qwen3-0.6b",worker="mac-2"} 30
# HELP macpool_prefix_cache_hits_total Prefix-cache lookups that reused cached tokens, by worker and model.
# TYPE macpool_prefix_cache_hits_total counter
macpool_prefix_cache_hits_total{model="qwen3-0.6b",worker="mac-1"} 2
macpool_prefix_cache_hits_total{model="qwen3-0.6b",worker="mac-2"} 0
# HELP macpool_prefix_cache_lookups_total Prefix-cache lookups, by worker and model (hit rate = hits / lookups).
# TYPE macpool_prefix_cache_lookups_total counter
macpool_prefix_cache_lookups_total{model="qwen3-0.6b",worker="mac-1"} 3
macpool_prefix_cache_lookups_total{model="qwen3-0.6b",worker="mac-2"} 1
# HELP macpool_queue_depth Jobs waiting in a model's queue.
# TYPE macpool_queue_depth gauge
macpool_queue_depth{model="qwen3-0.6b"} 7
# HELP macpool_errors_total Errors by kind (e.g. worker_failed, queue_full, no_workers, internal).
# TYPE macpool_errors_total counter
macpool_errors_total{kind="queue_full"} 1
macpool_errors_total{kind="worker_failed"} 2
# HELP macpool_failovers_total Failovers: a job's worker failed, or the Raft leader changed; by kind.
# TYPE macpool_failovers_total counter
macpool_failovers_total{kind="worker"} 1
# HELP macpool_time_to_first_token_seconds Time from admission to the first generated token.
# TYPE macpool_time_to_first_token_seconds histogram
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="0.01"} 0
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="0.025"} 0
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="0.05"} 0
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="0.1"} 0
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="0.25"} 1
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="0.5"} 1
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="1"} 1
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="2"} 1
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="4"} 2
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="8"} 2
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="15"} 2
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="30"} 2
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="60"} 2
macpool_time_to_first_token_seconds_bucket{model="qwen3-0.6b",le="+Inf"} 2
macpool_time_to_first_token_seconds_sum{model="qwen3-0.6b"} 3.2
macpool_time_to_first_token_seconds_count{model="qwen3-0.6b"} 2
`
	names := []string{"macpool_requests_total", "macpool_generated_tokens_total", "macpool_prefix_cache_hits_total",
		"macpool_prefix_cache_lookups_total", "macpool_queue_depth", "macpool_errors_total", "macpool_failovers_total",
		"macpool_time_to_first_token_seconds"}
	if err := testutil.GatherAndCompare(r.Prometheus(), strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	// The same through the HTTP handler, as Prometheus scrapes it.
	text := scrape(t, r)
	for _, line := range []string{
		`macpool_requests_total{kind="chat",model="qwen3-0.6b",status="200"} 2`,
		`macpool_request_duration_seconds_count{kind="chat",model="qwen3-0.6b"} 2`,
		`macpool_request_duration_seconds_sum{kind="chat",model="qwen3-0.6b"} 2`,
		`macpool_queue_wait_seconds_bucket{model="qwen3-0.6b",le="0.05"} 1`,
		`macpool_inter_token_latency_seconds_bucket{model="qwen3-0.6b",le="0.02"} 1`,
		`macpool_prompt_tokens_total{model="qwen3-0.6b",worker="mac-1"} 50`,
		`macpool_worker_running{model="qwen3-0.6b",worker="mac-1"} 3`,
		`macpool_worker_slots{model="qwen3-0.6b",worker="mac-1"} 8`,
		`go_goroutines `,
	} {
		if !strings.Contains(text, line) {
			t.Errorf("exposition lacks %q", line)
		}
	}
	if strings.Contains(text, "no-such-model-from-a-client") {
		t.Errorf("exposition carries a client-supplied unknown model name")
	}
	if n := testutil.ToFloat64(r.generated.WithLabelValues("mac-2", "qwen3-0.6b")); n != 30 {
		t.Errorf("mac-2 tokens got %v, want 30", n)
	}

	r.ForgetWorker("mac-1")
	if text := scrape(t, r); strings.Contains(text, `macpool_worker_running{model="qwen3-0.6b",worker="mac-1"}`) {
		t.Errorf("worker_running of a forgotten worker still exported")
	}
}

func TestNilRegistry(t *testing.T) {
	var r *Registry
	r.ObserveRequest("m", "chat", 200, time.Second)
	r.SetQueueDepth("m", 1)
	r.ObserveQueueWait("m", time.Second)
	r.ObserveTTFT("m", time.Second)
	r.ObserveInterToken("m", time.Second)
	r.AddGeneratedTokens("w", "m", 1)
	r.AddPromptTokens("w", "m", 1)
	r.ObservePrefixCache("w", "m", true)
	r.SetWorkerLoad("w", "m", 1, 2)
	r.ForgetWorker("w")
	r.Failover("worker")
	r.Error("x")
	if r.Prometheus() != nil {
		t.Error("nil Registry: Prometheus() must be nil")
	}
	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest("GET", Path, nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("nil Registry handler: got %d, want 404", rec.Code)
	}
}
