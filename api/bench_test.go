package api

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// instantService answers every job at once with a fixed 8-delta answer.
type instantService struct{ events []job.Event }

func (s *instantService) Models(context.Context) ([]openai.Model, error) { return nil, nil }
func (s *instantService) Ready(context.Context) error                    { return nil }
func (s *instantService) Submit(ctx context.Context, job *job.Job) (job.Stream, error) {
	return &instantStream{events: s.events}, nil
}

type instantStream struct {
	events []job.Event
	i      int
}

func (s *instantStream) Recv(context.Context) (*job.Event, error) {
	if s.i == len(s.events) {
		return nil, io.EOF
	}
	s.i++
	return &s.events[s.i-1], nil
}
func (s *instantStream) Close() error { return nil }

func benchEvents() []job.Event {
	evs := []job.Event{{Worker: "mac-1", Role: "assistant", Text: "Hello"}}
	for range 6 {
		evs = append(evs, job.Event{Worker: "mac-1", Text: " world"})
	}
	return append(evs, job.Event{Worker: "mac-1", FinishReason: "stop", Usage: &openai.Usage{PromptTokens: 20, CompletionTokens: 8, TotalTokens: 28}})
}

func benchServe(b *testing.B, body string) {
	s, err := New(DefaultConfig(), &instantService{events: benchEvents()}, nil)
	if err != nil {
		b.Fatal(err)
	}
	h := s.Handler()
	data := []byte(body)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", bytes.NewReader(data))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkChatNonStream is the HTTP layer's cost of one chat request with an
// 8-event answer: parse, validate, submit, aggregate, encode.
func BenchmarkChatNonStream(b *testing.B) {
	benchServe(b, `{"model":"qwen3-8b","messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Say hello world."}],"temperature":0.7,"max_tokens":64}`)
}

// BenchmarkChatStream is the same as SSE: 8 chunks + usage chunk + [DONE].
func BenchmarkChatStream(b *testing.B) {
	benchServe(b, `{"model":"qwen3-8b","messages":[{"role":"system","content":"You are helpful."},{"role":"user","content":"Say hello world."}],"temperature":0.7,"max_tokens":64,"stream":true,"stream_options":{"include_usage":true}}`)
}
