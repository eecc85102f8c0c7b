package metrics

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// fakeService answers every Submit with its error or a stream of its events.
type fakeService struct {
	err    error
	events []*job.Event
	clock  *fakeClock
	step   time.Duration // clock advance per Recv
}

func (f *fakeService) Models(ctx context.Context) ([]openai.Model, error) { return nil, nil }
func (f *fakeService) Ready(ctx context.Context) error                    { return nil }
func (f *fakeService) Submit(ctx context.Context, j *job.Job) (job.Stream, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &fakeStream{evs: append([]*job.Event(nil), f.events...), f: f}, nil
}

type fakeStream struct {
	evs    []*job.Event
	f      *fakeService
	closed int
}

func (s *fakeStream) Recv(ctx context.Context) (*job.Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(s.evs) == 0 {
		return nil, io.EOF
	}
	s.f.clock.t = s.f.clock.t.Add(s.f.step)
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}

func (s *fakeStream) Close() error { s.closed++; return nil }

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func instrument(r *Registry, f *fakeService) Service {
	f.clock = &fakeClock{t: time.Unix(1700000000, 0)}
	svc := r.Instrument(f)
	svc.(*instrumented).now = f.clock.now
	return svc
}

// drain runs a request as the api package does: Recv until EOF or error,
// then Close once.
func drain(t *testing.T, ctx context.Context, svc Service, job *job.Job, maxRecv int) error {
	t.Helper()
	st, err := svc.Submit(ctx, job)
	if err != nil {
		return err
	}
	defer st.Close()
	for i := 0; i < maxRecv; i++ {
		ev, err := st.Recv(ctx)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if ev.Err != nil {
			return ev.Err
		}
	}
	return nil
}

func TestInstrument(t *testing.T) {
	r := New()
	j := &job.Job{ID: "r1", Kind: job.KindChat, Model: "qwen3-8b"}
	ok := &fakeService{step: 20 * time.Millisecond, events: []*job.Event{
		{Worker: "mac-1", Role: "assistant"},
		{Worker: "mac-1", Text: "Hel"},
		{Worker: "mac-1", Text: "lo"},
		{Worker: "mac-1", Reasoning: "hm"},
		{Worker: "mac-1", FinishReason: "stop", Usage: &openai.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15,
			PromptTokensDetails: &openai.PromptTokensDetails{CachedTokens: 4}}},
	}}
	if err := drain(t, context.Background(), instrument(r, ok), j, 100); err != nil {
		t.Fatal(err)
	}
	// Second request: no cache hit, and the client goes away after two events.
	ok.events[4] = &job.Event{Worker: "mac-1", FinishReason: "stop", Usage: &openai.Usage{PromptTokens: 3, CompletionTokens: 3}}
	if err := drain(t, context.Background(), instrument(r, ok), j, 100); err != nil {
		t.Fatal(err)
	}
	if err := drain(t, context.Background(), instrument(r, ok), j, 2); err != nil {
		t.Fatal(err)
	}
	// Queue full at Submit.
	full := &fakeService{err: openai.RateLimited(time.Second, "the queue is full")}
	if err := drain(t, context.Background(), instrument(r, full), j, 100); err == nil {
		t.Fatal("want the 429")
	}
	// The worker dies mid-stream.
	dies := &fakeService{step: time.Millisecond, events: []*job.Event{
		{Worker: "mac-2", Text: "a"},
		{Worker: "mac-2", Err: openai.Unavailable("worker mac-2 failed during generation")},
	}}
	if err := drain(t, context.Background(), instrument(r, dies), j, 100); err == nil {
		t.Fatal("want the 503")
	}

	want := `
# HELP macpool_requests_total API requests finished, by model, kind (chat, completion) and HTTP status.
# TYPE macpool_requests_total counter
macpool_requests_total{kind="chat",model="qwen3-8b",status="200"} 2
macpool_requests_total{kind="chat",model="qwen3-8b",status="429"} 1
macpool_requests_total{kind="chat",model="qwen3-8b",status="499"} 1
macpool_requests_total{kind="chat",model="qwen3-8b",status="503"} 1
# HELP macpool_generated_tokens_total Tokens generated, by worker and model (rate() gives tokens/s).
# TYPE macpool_generated_tokens_total counter
macpool_generated_tokens_total{model="qwen3-8b",worker="mac-1"} 9
macpool_generated_tokens_total{model="qwen3-8b",worker="mac-2"} 1
# HELP macpool_prompt_tokens_total Prompt tokens processed, by worker and model.
# TYPE macpool_prompt_tokens_total counter
macpool_prompt_tokens_total{model="qwen3-8b",worker="mac-1"} 13
# HELP macpool_prefix_cache_lookups_total Prefix-cache lookups, by worker and model (hit rate = hits / lookups).
# TYPE macpool_prefix_cache_lookups_total counter
macpool_prefix_cache_lookups_total{model="qwen3-8b",worker="mac-1"} 2
# HELP macpool_prefix_cache_hits_total Prefix-cache lookups that reused cached tokens, by worker and model.
# TYPE macpool_prefix_cache_hits_total counter
macpool_prefix_cache_hits_total{model="qwen3-8b",worker="mac-1"} 1
# HELP macpool_prefix_cache_tokens_total Prompt tokens served from the prefix cache, by worker and model.
# TYPE macpool_prefix_cache_tokens_total counter
macpool_prefix_cache_tokens_total{model="qwen3-8b",worker="mac-1"} 4
# HELP macpool_errors_total Errors by kind (e.g. worker_failed, queue_full, no_workers, internal).
# TYPE macpool_errors_total counter
macpool_errors_total{kind="rate_limit_exceeded"} 1
macpool_errors_total{kind="worker_failed"} 1
`
	if err := testutil.GatherAndCompare(r.Prometheus(), strings.NewReader(want),
		"macpool_requests_total", "macpool_generated_tokens_total", "macpool_prompt_tokens_total",
		"macpool_prefix_cache_lookups_total", "macpool_prefix_cache_hits_total", "macpool_prefix_cache_tokens_total",
		"macpool_errors_total", "macpool_failovers_total"); err != nil {
		t.Error(err)
	}
	// TTFT: Submit at t0, first text on the 2nd Recv (40 ms) in the three
	// mac-1 requests and on the 1st (1 ms) for mac-2; inter-token: 20 ms
	// gaps, two per full mac-1 request.
	text := scrape(t, r)
	for _, line := range []string{
		`macpool_time_to_first_token_seconds_count{model="qwen3-8b"} 4`,
		`macpool_time_to_first_token_seconds_bucket{model="qwen3-8b",le="0.025"} 1`,
		`macpool_time_to_first_token_seconds_bucket{model="qwen3-8b",le="0.05"} 4`,
		`macpool_inter_token_latency_seconds_count{model="qwen3-8b"} 4`,
		`macpool_inter_token_latency_seconds_bucket{model="qwen3-8b",le="0.02"} 4`,
		`macpool_request_duration_seconds_count{kind="chat",model="qwen3-8b"} 2`,
	} {
		if !strings.Contains(text, line) {
			t.Errorf("exposition lacks %q", line)
		}
	}
}

func TestScrapeHooks(t *testing.T) {
	r := New()
	calls := 0
	depth := map[string]uint64{"a": 3, "b": 1}
	loads := []WorkerLoad{{"mac-1", "a", 2, 8}, {"mac-2", "b", 0, 4}}
	r.OnScrape(func(ctx context.Context) {
		calls++
		if _, ok := ctx.Deadline(); !ok {
			t.Error("scrape hook context has no deadline")
		}
		r.SetQueueDepths(depth)
		r.SetWorkerLoads(loads)
		r.ObserveLeader([]string{"c1", "c1", "c2"}[min(calls-1, 2)])
	})
	text := scrape(t, r)
	for _, line := range []string{`macpool_queue_depth{model="a"} 3`, `macpool_worker_running{model="a",worker="mac-1"} 2`, `macpool_worker_slots{model="b",worker="mac-2"} 4`} {
		if !strings.Contains(text, line) {
			t.Errorf("first scrape lacks %q", line)
		}
	}
	// mac-2 and model b leave; the leader changes on the third scrape.
	depth = map[string]uint64{"a": 0}
	loads = loads[:1]
	scrape(t, r)
	text = scrape(t, r)
	if strings.Contains(text, `model="b"`) {
		t.Errorf("departed worker / model still exported")
	}
	if !strings.Contains(text, `macpool_queue_depth{model="a"} 0`) || !strings.Contains(text, `macpool_failovers_total{kind="leader"} 1`) {
		t.Errorf("third scrape lacks queue depth 0 or the leader failover:\n%s", text)
	}
	if calls != 3 {
		t.Errorf("hook ran %d times, want 3", calls)
	}
}
