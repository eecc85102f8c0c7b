package api

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/internal/clustertest"
	"github.com/macpool/macpool/job"
)

// resumeService is a fakeService whose streams are resumable: the token
// is made from the job as the coordinator makes it, and Resume replays the
// same scripted events.
type resumeService struct {
	*fakeService
	mu      sync.Mutex
	resumes []string // Last-Event-IDs
	rjobs   []*job.Job
	rs      []*resumableStream
}

type resumableStream struct {
	*fakeStream
	token    string
	detaches atomic.Int32
}

func (r *resumableStream) ResumeToken() string { return r.token }
func (r *resumableStream) Detach()             { r.detaches.Add(1) }

func (r *resumeService) wrap(j *job.Job, st job.Stream) *resumableStream {
	rs := &resumableStream{fakeStream: st.(*fakeStream), token: job.StreamToken{RequestID: j.ID, Created: j.Stream.Created, Secret: "s3cret"}.String()}
	r.mu.Lock()
	r.rs = append(r.rs, rs)
	r.mu.Unlock()
	return rs
}

func (r *resumeService) Submit(ctx context.Context, j *job.Job) (job.Stream, error) {
	st, err := r.fakeService.Submit(ctx, j)
	if err != nil || j.Stream == nil {
		return st, err
	}
	return r.wrap(j, st), nil
}

func (r *resumeService) Resume(ctx context.Context, id string, j *job.Job) (job.Stream, error) {
	r.mu.Lock()
	r.resumes, r.rjobs = append(r.resumes, id), append(r.rjobs, j)
	r.mu.Unlock()
	st, err := r.fakeService.Submit(ctx, j)
	if err != nil {
		return nil, err
	}
	return r.wrap(j, st), nil
}

var resumeRoutes = []struct{ name, path, body string }{
	{"chat", "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`},
	{"completions", "/v1/completions", `{"model":"m","stream":true,"prompt":"hi"}`},
	{"responses", "/v1/responses", `{"model":"m","stream":true,"input":"hi"}`},
	{"messages", "/v1/messages", `{"model":"m","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"hi"}]}`},
}

func resumeEvents() []job.Event {
	return []job.Event{
		{Worker: "mac-1", Role: "assistant", Text: "Hel"},
		{Worker: "mac-1", Text: "lo"},
		{Worker: "mac-1", Text: " world"},
		{Worker: "mac-1", Text: "!", FinishReason: "stop", Usage: &openai.Usage{PromptTokens: 3, CompletionTokens: 4, TotalTokens: 7}},
	}
}

// Every frame of a resumable stream carries TOKEN:N, N counting frames
// from 0 ([DONE] and named events included); a request with
// Last-Event-ID renders the stream under the token's request id and
// created time, and its frames are exactly the frames after N of the
// first rendering.
func TestResumableStreamIDs(t *testing.T) {
	svc := &resumeService{fakeService: &fakeService{events: resumeEvents()}}
	_, hs := newTestServer(t, svc, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, rt := range resumeRoutes {
		t.Run(rt.name, func(t *testing.T) {
			full, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + rt.path, Body: rt.body})
			if err != nil || full.Status != 200 {
				t.Fatalf("%v %+v", err, full)
			}
			token, err := clustertest.CheckIDs(full.Frames, 0)
			if err != nil {
				t.Fatal(err)
			}
			rid := full.Header.Get(HeaderRequestID)
			if want := rid + ".1764460800.s3cret"; token != want {
				t.Fatalf("token %q, want %q", token, want)
			}
			if !clustertest.Ended(full.Frames) || clustertest.FramesText(full.Frames) != "Hello world!" {
				t.Fatalf("frames %+v", full.Frames)
			}
			for _, cut := range []int{0, 2, len(full.Frames) - 2} {
				// The resume comes as a new request (new server id, later clock).
				rest, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + rt.path, Body: rt.body, LastEventID: full.Frames[cut].ID})
				if err != nil || rest.Status != 200 {
					t.Fatalf("resume after %d: %v %+v", cut, err, rest)
				}
				if got, want := frameLines(rest.Frames), frameLines(full.Frames[cut+1:]); got != want {
					t.Errorf("resume after frame %d:\n got %s\nwant %s", cut, got, want)
				}
				if got := rest.Header.Get(HeaderRequestID); got != rid {
					t.Errorf("resumed X-Request-Id %q, want %q", got, rid)
				}
			}
			svc.mu.Lock()
			j := svc.rjobs[len(svc.rjobs)-1]
			svc.mu.Unlock()
			if j.ID != rid || j.Stream == nil || j.Stream.Created != 1764460800 {
				t.Errorf("resumed job id %q stream %+v, want the first request's", j.ID, j.Stream)
			}
		})
	}
}

func frameLines(frames []clustertest.SSEFrame) string {
	var b strings.Builder
	for _, f := range frames {
		b.WriteString(f.ID + "|" + f.Event + "|" + f.Data + "\n")
	}
	return b.String()
}

// A client that goes away after frames went out detaches its resumable
// stream (the job goes on for a resume) instead of closing it; one that
// goes before any frame closes it as before.
func TestClientGoneDetaches(t *testing.T) {
	svc := &resumeService{fakeService: &fakeService{events: resumeEvents()[:2], hold: true}}
	_, hs := newTestServer(t, svc, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, rt := range resumeRoutes {
		t.Run(rt.name, func(t *testing.T) {
			r, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + rt.path, Body: rt.body, Stop: 1})
			if err != nil || r.Status != 200 {
				t.Fatalf("%v %+v", err, r)
			}
			svc.mu.Lock()
			st := svc.rs[i]
			svc.mu.Unlock()
			eventually(t, "Detach", func() bool { return st.detaches.Load() == 1 })
			if n := st.closes.Load(); n != 0 {
				t.Errorf("stream closed %d times, want detached only", n)
			}
		})
	}
}

// A Last-Event-ID that this API did not make is a 400 naming the header,
// in the route's error shape; a service that cannot resume answers 404.
func TestLastEventIDRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, svc := range []Service{&resumeService{fakeService: &fakeService{events: resumeEvents()}}, &fakeService{events: resumeEvents()}} {
		_, hs := newTestServer(t, svc, nil)
		_, resumable := svc.(*resumeService)
		for _, rt := range resumeRoutes {
			for _, id := range []string{"nonsense", "a.b.c:1", "req1.17.s3cret:-1", "req1.17.s:3:4", "req/1.17.s:3"} {
				r, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + rt.path, Body: rt.body, LastEventID: id})
				if err != nil || r.Status != 400 {
					t.Fatalf("%s %q: %v status %d, want 400", rt.name, id, err, r.Status)
				}
				checkShape(t, rt.name, r.Body, "Last-Event-ID")
			}
			if !resumable {
				r, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + rt.path, Body: rt.body, LastEventID: "req1.17.s3cret:2"})
				if err != nil || r.Status != 404 {
					t.Fatalf("%s: resume on a service that cannot: %v status %d, want 404", rt.name, err, r.Status)
				}
				checkShape(t, rt.name, r.Body, "")
			}
		}
	}
}

func checkShape(t *testing.T, route, body, param string) {
	t.Helper()
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Type    string  `json:"type"`
			Message string  `json:"message"`
			Param   *string `json:"param"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error.Message == "" {
		t.Fatalf("%s: %q is no error body: %v", route, body, err)
	}
	if route == "messages" {
		if v.Type != "error" {
			t.Errorf("%s: %q is not Anthropic's error shape", route, body)
		}
		return
	}
	if param != "" && (v.Error.Param == nil || *v.Error.Param != param) {
		t.Errorf("%s: param %v, want %q", route, v.Error.Param, param)
	}
}

// A mid-stream error's frames carry no id (SSE keeps the last one), so a
// client resumes after the last real frame: an error this coordinator
// made (its own shutdown) is not part of the stream another one replays.
func TestErrorFramesUnnumbered(t *testing.T) {
	evs := append(resumeEvents()[:2], job.Event{Err: openai.Unavailable("coordinator c1 is shutting down")})
	svc := &resumeService{fakeService: &fakeService{events: evs}}
	_, hs := newTestServer(t, svc, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, rt := range resumeRoutes {
		t.Run(rt.name, func(t *testing.T) {
			r, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + rt.path, Body: rt.body})
			if err != nil || r.Status != 200 {
				t.Fatalf("%v %+v", err, r)
			}
			i := len(r.Frames)
			for i > 0 && r.Frames[i-1].ID == "" {
				i--
			}
			if i == len(r.Frames) || i == 0 {
				t.Fatalf("want numbered frames then unnumbered error frames, got %+v", r.Frames)
			}
			if _, err := clustertest.CheckIDs(r.Frames[:i], 0); err != nil {
				t.Error(err)
			}
			if !strings.Contains(frameLines(r.Frames[i:]), "shutting down") {
				t.Errorf("frames without id %s, want the error among them", frameLines(r.Frames[i:]))
			}
			if strings.Contains(frameLines(r.Frames[:i]), "shutting down") {
				t.Errorf("the error is in a numbered frame: %s", frameLines(r.Frames[:i]))
			}
		})
	}
}
