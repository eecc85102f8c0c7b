package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// fakeService plays scripted events for every submitted job.
type fakeService struct {
	models    []openai.Model
	readyErr  error
	submitErr error
	events    []job.Event // played by every stream
	hold      bool        // after the events, Recv blocks until ctx ends
	panicOn   bool        // Submit panics

	mu      sync.Mutex
	jobs    []*job.Job
	streams []*fakeStream
}

func (f *fakeService) Models(ctx context.Context) ([]openai.Model, error) { return f.models, nil }
func (f *fakeService) Ready(ctx context.Context) error                    { return f.readyErr }

func (f *fakeService) Submit(ctx context.Context, job *job.Job) (job.Stream, error) {
	if f.panicOn {
		panic("scripted panic")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.jobs = append(f.jobs, job)
	if job.Model == "missing" {
		return nil, openai.ModelNotFound(job.Model)
	}
	if f.submitErr != nil {
		return nil, f.submitErr
	}
	st := &fakeStream{events: f.events, hold: f.hold, delivered: make(chan struct{}, len(f.events)+1)}
	f.streams = append(f.streams, st)
	return st, nil
}

func (f *fakeService) lastJob(t *testing.T) *job.Job {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.jobs) == 0 {
		t.Fatal("no job submitted")
	}
	return f.jobs[len(f.jobs)-1]
}

func (f *fakeService) lastStream(t *testing.T) *fakeStream {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.streams) == 0 {
		t.Fatal("no stream opened")
	}
	return f.streams[len(f.streams)-1]
}

type fakeStream struct {
	events    []job.Event
	i         int
	hold      bool
	delivered chan struct{}
	closes    atomic.Int32
}

func (s *fakeStream) Recv(ctx context.Context) (*job.Event, error) {
	if s.i < len(s.events) {
		ev := s.events[s.i]
		s.i++
		s.delivered <- struct{}{}
		return &ev, nil
	}
	if s.hold {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return nil, io.EOF
}

func (s *fakeStream) Close() error {
	s.closes.Add(1)
	return nil
}

// newTestServer serves svc through httptest; cfg nil means DefaultConfig.
func newTestServer(t *testing.T, svc Service, edit func(*Config)) (*Server, *httptest.Server) {
	t.Helper()
	cfg := DefaultConfig()
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(cfg, svc, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s.now = func() time.Time { return time.Unix(1764460800, 0) }
	var ids atomic.Int64
	s.newID = func() string { return fmt.Sprintf("req%d", ids.Add(1)) }
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return s, hs
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
}

// closedOnce waits for the handler to close st (it may do so after the
// client has read the last byte) and checks it was closed exactly once.
func closedOnce(t *testing.T, st *fakeStream) {
	t.Helper()
	eventually(t, "Stream.Close", func() bool { return st.closes.Load() >= 1 })
	if n := st.closes.Load(); n != 1 {
		t.Errorf("stream closed %d times, want 1", n)
	}
}

func ptr[T any](v T) *T { return &v }

// scriptedChat is a stream with reasoning, content, a tool call split over
// deltas, logprobs and usage.
func scriptedChat() []job.Event {
	lp := func(tok string, p float64) *openai.ChoiceLogprobs {
		return &openai.ChoiceLogprobs{Content: []openai.TokenLogprob{{Token: tok, Logprob: p, Bytes: []int{int(tok[0])}, TopLogprobs: []openai.TopLogprob{{Token: tok, Logprob: p, Bytes: []int{int(tok[0])}}}}}}
	}
	return []job.Event{
		{Worker: "mac-1", Role: "assistant", Reasoning: "The user wants "},
		{Worker: "mac-1", Reasoning: "the weather."},
		{Worker: "mac-1", Text: "Let me check", Logprobs: lp("Let", -0.25)},
		{Worker: "mac-1", Text: " <b>&</b>.", Logprobs: lp(" <", -1.5)},
		{Worker: "mac-1", ToolCalls: []openai.ToolCallDelta{{Index: 0, ID: "call_1", Type: "function", Function: &openai.FunctionCallDelta{Name: "get_weather", Arguments: ""}}}},
		{Worker: "mac-1", ToolCalls: []openai.ToolCallDelta{{Index: 0, Function: &openai.FunctionCallDelta{Arguments: `{"city":`}}}},
		{Worker: "mac-1", ToolCalls: []openai.ToolCallDelta{{Index: 0, Function: &openai.FunctionCallDelta{Arguments: `"Paris"}`}}}},
		{Worker: "mac-1", FinishReason: "tool_calls", Usage: &openai.Usage{
			PromptTokens: 12, CompletionTokens: 20, TotalTokens: 32,
			PromptTokensDetails:     &openai.PromptTokensDetails{CachedTokens: 8},
			CompletionTokensDetails: &openai.CompletionTokensDetails{ReasoningTokens: 6},
		}},
	}
}

func unmarshalString(raw string, s *string) error { return json.Unmarshal([]byte(raw), s) }
