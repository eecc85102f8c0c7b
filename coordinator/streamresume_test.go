package coordinator_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/internal/clustertest"
	"github.com/macpool/macpool/worker"
)

// resumeProtocols are the four streaming endpoints and a body that asks
// for n words of the test engine's echo.
var resumeProtocols = []struct {
	name, path string
	body       func(words string, n int) string
}{
	{"chat", "/v1/chat/completions", func(w string, n int) string {
		return fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":%q}]}`, testModel, n, w)
	}},
	{"completions", "/v1/completions", func(w string, n int) string {
		return fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"prompt":%q}`, testModel, n, w)
	}},
	{"responses", "/v1/responses", func(w string, n int) string {
		return fmt.Sprintf(`{"model":%q,"stream":true,"max_output_tokens":%d,"input":%q}`, testModel, n, w)
	}},
	{"messages", "/v1/messages", func(w string, n int) string {
		return fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, testModel, n, w)
	}},
}

// A client that goes away mid-stream and sends the request again with
// Last-Event-ID gets the rest of the same stream on every protocol: ids
// continue where it stopped, the text of both parts is the uninterrupted
// run's, the stream ends as its protocol ends. Without the grace the job
// is cancelled when the client leaves (the resume then finds a cancelled
// stream); without ids there is nothing to resume from.
func TestStreamResumeAfterClientLeft(t *testing.T) {
	c, _ := startCoordinator(t, coordConfig(t, "c1", nil))
	startWorker(t, "w1", c.GossipAddr(), 4, &worker.TestEngine{TokenDelay: 5 * time.Millisecond})
	waitWorkers(t, c, 1)
	hs := serveHTTP(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 40
	for _, p := range resumeProtocols {
		t.Run(p.name, func(t *testing.T) {
			body := p.body(words(n), n)
			full, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + p.path, Body: body})
			if err != nil || full.Status != 200 {
				t.Fatalf("uninterrupted run: %v %+v", err, full)
			}
			if _, err := clustertest.CheckIDs(full.Frames, 0); err != nil {
				t.Fatalf("uninterrupted run: %v", err)
			}
			want := clustertest.FramesText(full.Frames)
			if !clustertest.Ended(full.Frames) || want != words(n) {
				t.Fatalf("uninterrupted run: text %q, want %q (ended %v)", want, words(n), clustertest.Ended(full.Frames))
			}

			const cut = 8
			part, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + p.path, Body: body, Stop: cut})
			if err != nil || part.Status != 200 || len(part.Frames) != cut {
				t.Fatalf("first part: %v %+v", err, part)
			}
			token, err := clustertest.CheckIDs(part.Frames, 0)
			if err != nil {
				t.Fatal(err)
			}
			last := part.Frames[cut-1].ID
			rest, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + p.path, Body: body, LastEventID: last})
			if err != nil || rest.Status != 200 {
				t.Fatalf("resume: %v status %d %s", err, rest.Status, rest.Body)
			}
			if got, err := clustertest.CheckIDs(rest.Frames, cut); err != nil || got != token {
				t.Fatalf("resumed ids: token %q (want %q): %v", got, token, err)
			}
			got := clustertest.FramesText(part.Frames) + clustertest.FramesText(rest.Frames)
			if got != want {
				t.Errorf("text of both parts %q, want %q", got, want)
			}
			if !clustertest.Ended(rest.Frames) {
				t.Errorf("resumed stream did not end as its protocol ends: last frame %+v", rest.Frames[len(rest.Frames)-1])
			}
			if len(part.Frames)+len(rest.Frames) != len(full.Frames) {
				t.Errorf("%d+%d frames, want %d as uninterrupted", len(part.Frames), len(rest.Frames), len(full.Frames))
			}
			// The resumed stream is the first one's: same request id.
			if a, b := part.Header.Get("X-Request-Id"), rest.Header.Get("X-Request-Id"); a != b {
				t.Errorf("resumed request id %q, want %q", b, a)
			}
		})
	}
}

// Bad, unknown and foreign ids get the protocol's 4xx, never a stream: a
// malformed id 400, a well-formed unknown one 404, another key's stream
// 404, a different request under the id 400.
func TestStreamResumeRefused(t *testing.T) {
	cfg := coordConfig(t, "c1", nil)
	c, _ := startCoordinator(t, cfg)
	startWorker(t, "w1", c.GossipAddr(), 2, &worker.TestEngine{TokenDelay: 5 * time.Millisecond})
	waitWorkers(t, c, 1)
	hs := serveHTTP(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var keys [2]string
	for i, id := range []string{"alice", "bob"} {
		k, err := c.CreateAPIKey(ctx, admin.KeyRequest{ID: id, Admin: i == 0})
		if err != nil {
			t.Fatal(err)
		}
		keys[i] = k.Secret
	}
	eventually(t, 10*time.Second, "keys usable", func() bool { _, err := c.Check(ctx, keys[1]); return err == nil })

	for _, p := range resumeProtocols {
		t.Run(p.name, func(t *testing.T) {
			body := p.body(words(30), 30)
			part, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + p.path, Body: body, Key: keys[0], Stop: 3})
			if err != nil || part.Status != 200 || len(part.Frames) != 3 {
				t.Fatalf("first part: %v %+v", err, part)
			}
			last := part.Frames[2].ID
			tok := last[:strings.LastIndexByte(last, ':')]
			other := strings.Replace(tok, tok[len(tok)-4:], "0000", 1)
			for _, tc := range []struct {
				name, key, id, body string
				status              int
				code                string
			}{
				{"malformed", keys[0], "garbage", body, 400, "invalid_last_event_id"},
				{"unknown stream", keys[0], "0123456789abcdef01234567.1.0123456789abcdef0123456789abcdef:3", body, 404, "stream_not_found"},
				{"wrong secret", keys[0], other + ":2", body, 404, "stream_not_found"},
				{"another key", keys[1], last, body, 404, "stream_not_found"},
				{"different request", keys[0], last, p.body(words(31), 31), 400, ""},
			} {
				r, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + p.path, Body: tc.body, Key: tc.key, LastEventID: tc.id})
				if err != nil {
					t.Fatalf("%s: %v", tc.name, err)
				}
				if r.Status != tc.status {
					t.Errorf("%s: status %d (%d frames), want %d: %s", tc.name, r.Status, len(r.Frames), tc.status, r.Body)
					continue
				}
				checkErrorShape(t, tc.name, p.name, r.Body, tc.code)
			}
			// The owner still has it: the right key resumes.
			rest, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + p.path, Body: body, Key: keys[0], LastEventID: last})
			if err != nil || rest.Status != 200 || !clustertest.Ended(rest.Frames) {
				t.Fatalf("resume with the right key: %v %+v", err, rest)
			}
			if got := clustertest.FramesText(part.Frames) + clustertest.FramesText(rest.Frames); got != words(30) {
				t.Errorf("text %q, want %q", got, words(30))
			}
		})
	}
}

// checkErrorShape checks an error body: Anthropic's {"type":"error",
// "error":{"type","message"}} on /v1/messages, OpenAI's {"error":{...}}
// elsewhere, with code when given.
func checkErrorShape(t *testing.T, what, proto, body, code string) {
	t.Helper()
	var v struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
			Code    string `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil || v.Error.Message == "" {
		t.Errorf("%s: body %q is not an error body: %v", what, body, err)
		return
	}
	if proto == "messages" {
		if v.Type != "error" || v.Error.Type == "" {
			t.Errorf("%s: body %q is not Anthropic's error shape", what, body)
		}
		return
	}
	if code != "" && v.Error.Code != code {
		t.Errorf("%s: code %q, want %q (%s)", what, v.Error.Code, code, v.Error.Message)
	}
}

// A detached stream nobody resumes is cancelled after the grace, not at
// once and not never: its worker slot frees after ResumeGrace, and a late
// resume gets 404.
func TestStreamResumeGraceExpires(t *testing.T) {
	cfg := coordConfig(t, "c1", nil)
	cfg.ResumeGrace = 1500 * time.Millisecond
	c, _ := startCoordinator(t, cfg)
	// 400 tokens at 20 ms: 8 s, far longer than the grace.
	w, _ := startWorker(t, "w1", c.GossipAddr(), 1, &worker.TestEngine{TokenDelay: 20 * time.Millisecond})
	waitWorkers(t, c, 1)
	hs := serveHTTP(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	body := resumeProtocols[0].body(words(400), 400)
	part, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + "/v1/chat/completions", Body: body, Stop: 3})
	if err != nil || part.Status != 200 || len(part.Frames) != 3 {
		t.Fatalf("first part: %v %+v", err, part)
	}
	left := time.Now()
	// Still running well into the grace (a cancel at once frees the slot
	// within milliseconds).
	time.Sleep(cfg.ResumeGrace / 2) // the assertion is about elapsed time
	if w.Running() != 1 {
		t.Fatalf("job stopped %v after its client left, before the grace (%v) ran out", time.Since(left), cfg.ResumeGrace)
	}
	eventually(t, 10*time.Second, "the detached job cancelled after the grace", func() bool { return w.Running() == 0 })
	if took := time.Since(left); took < cfg.ResumeGrace || took > cfg.ResumeGrace+5*time.Second {
		t.Errorf("job cancelled %v after its client left, want just after the grace %v", took, cfg.ResumeGrace)
	}
	if w.Served() != 1 {
		t.Errorf("worker served %d jobs", w.Served())
	}
	r, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + "/v1/chat/completions", Body: body, LastEventID: part.Frames[2].ID})
	if err != nil || r.Status != http.StatusNotFound {
		t.Fatalf("resume after the grace: %v status %d, want 404", err, r.Status)
	}
	checkErrorShape(t, "expired", "chat", r.Body, "stream_not_found")
}

// With ResumeGrace 0 streams carry no ids and a client gone cancels at once
// (the behaviour before resumable streams).
func TestStreamResumeOff(t *testing.T) {
	cfg := coordConfig(t, "c1", nil)
	cfg.ResumeGrace = 0
	c, _ := startCoordinator(t, cfg)
	w, _ := startWorker(t, "w1", c.GossipAddr(), 1, &worker.TestEngine{TokenDelay: 20 * time.Millisecond})
	waitWorkers(t, c, 1)
	hs := serveHTTP(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	part, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + "/v1/chat/completions", Body: resumeProtocols[0].body(words(400), 400), Stop: 3})
	if err != nil || part.Status != 200 {
		t.Fatalf("%v %+v", err, part)
	}
	if part.Frames[0].ID != "" {
		t.Errorf("frame id %q with resumable streams off", part.Frames[0].ID)
	}
	eventually(t, 3*time.Second, "job cancelled when its client left", func() bool { return w.Running() == 0 })
}

var _ = coordinator.DefaultConfig

// BenchmarkStreamJournal is the cost of resumable streams: one streamed
// chat completion of 500 tokens from an instant engine over HTTP, with the
// journal (ResumeGrace > 0) and without.
func BenchmarkStreamJournal(b *testing.B) {
	for _, grace := range []time.Duration{60 * time.Second, 0} {
		name := "journal"
		if grace == 0 {
			name = "off"
		}
		b.Run(name, func(b *testing.B) {
			cfg := coordConfig(b, "c1", nil)
			cfg.ResumeGrace = grace
			c, _ := startCoordinator(b, cfg)
			startWorker(b, "w1", c.GossipAddr(), 4, &worker.TestEngine{})
			waitWorkers(b, c, 1)
			hs := serveHTTP(b, c)
			body := resumeProtocols[0].body(words(500), 500)
			ctx := context.Background()
			b.ResetTimer()
			for range b.N {
				r, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: hs.URL + "/v1/chat/completions", Body: body})
				if err != nil || r.Status != 200 || !clustertest.Ended(r.Frames) {
					b.Fatalf("%v %+v", err, r)
				}
			}
		})
	}
}
