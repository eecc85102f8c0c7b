package metrics

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
)

// TestRecentOutcomes runs requests of every outcome through Instrument and
// ObserveRejected and checks that the recent view lists each failure (4xx,
// 5xx, 499) with its status, model and message, newest first, and counts
// them in the minute's rates until they fall out of the window.
func TestRecentOutcomes(t *testing.T) {
	r := New()
	clock := &fakeClock{t: time.Unix(1700000000, 0)}
	r.now = clock.now
	chat := func(model string) *job.Job { return &job.Job{Model: model, Kind: job.KindChat} }
	ok := []*job.Event{{Worker: "w1", Text: "hi"}, {Worker: "w1", FinishReason: "stop"}}
	steps := []struct {
		name string
		run  func()
	}{
		{"200", func() { drain(t, context.Background(), instrument(r, &fakeService{events: ok}), chat("qwen3"), 10) }},
		{"404 at submit", func() {
			drain(t, context.Background(), instrument(r, &fakeService{err: &openai.Error{Status: 404, Code: "model_not_found",
				Message: "The model `nope<script>` does not exist"}}), chat("nope<script>"), 10)
		}},
		{"503 mid-stream", func() {
			drain(t, context.Background(), instrument(r, &fakeService{events: []*job.Event{{Worker: "w1", Text: "a"},
				{Worker: "w1", Err: &openai.Error{Status: 503, Type: openai.TypeServer, Message: "worker w1 failed"}}}}), chat("qwen3"), 10)
		}},
		{"499 client gone", func() {
			st, _ := instrument(r, &fakeService{events: ok}).Submit(context.Background(), chat("qwen3"))
			st.Recv(context.Background())
			st.Close() // before the end
		}},
		{"400 rejected", func() {
			r.ObserveRejected("chat", openai.InvalidRequest("messages", "messages must not be empty"))
		}},
	}
	for _, s := range steps {
		clock.t = clock.t.Add(time.Second)
		s.run()
	}

	got := r.RecentOutcomes()
	want := []struct {
		status      int
		model, kind string
		message     string
	}{
		{400, "", "invalid_request_error", "messages must not be empty"},
		{499, "qwen3", "cancelled", "the client went away"},
		{503, "qwen3", "worker_failed", "worker w1 failed"},
		{404, "nope<script>", "model_not_found", "The model `nope<script>` does not exist"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d outcomes %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.Status != w.status || g.Model != w.model || !strings.Contains(g.Message, w.message) || g.Time.IsZero() {
			t.Errorf("outcome %d: got %+v, want status %d model %q message %q", i, g, w.status, w.model, w.message)
		}
		if w.kind != "worker_failed" && g.Error != w.kind { // the stream's error kind is its own (server_error)
			t.Errorf("outcome %d: error kind got %q, want %q", i, g.Error, w.kind)
		}
	}
	if !got[0].Time.After(got[3].Time) {
		t.Errorf("outcomes not newest first: %v then %v", got[0].Time, got[3].Time)
	}

	tr := r.Traffic()
	if tr.Requests != 5 || tr.Errors != 3 || tr.Cancelled != 1 || tr.Window != time.Minute {
		t.Errorf("traffic got %+v, want 5 requests, 3 errors, 1 cancelled in 1m", tr)
	}
	clock.t = clock.t.Add(56 * time.Second) // the first request is 60 s old, the last 56 s
	if tr := r.Traffic(); tr.Requests != 4 {
		t.Errorf("traffic 56 s after the last: got %d requests, want 4 (the 200 fell out)", tr.Requests)
	}
	clock.t = clock.t.Add(4 * time.Second)
	if tr := r.Traffic(); tr.Requests != 0 || tr.Errors != 0 || tr.Cancelled != 0 {
		t.Errorf("traffic a minute later: got %+v, want none", tr)
	}
	if n := len(r.RecentOutcomes()); n != 4 {
		t.Errorf("the list forgot outcomes with time: got %d, want 4", n)
	}
}

// TestRecentOutcomesBounded keeps the newest RecentOutcomes failures and
// cuts long messages.
func TestRecentOutcomesBounded(t *testing.T) {
	r := New()
	clock := &fakeClock{t: time.Unix(1700000000, 0)}
	r.now = clock.now
	for i := range RecentOutcomes + 10 {
		clock.t = clock.t.Add(time.Millisecond)
		r.ObserveRejected("chat", &openai.Error{Status: http.StatusBadRequest, Message: fmt.Sprintf("bad %d %s", i, strings.Repeat("é", 400))})
	}
	got := r.RecentOutcomes()
	if len(got) != RecentOutcomes {
		t.Fatalf("got %d outcomes, want %d", len(got), RecentOutcomes)
	}
	if !strings.HasPrefix(got[0].Message, fmt.Sprintf("bad %d ", RecentOutcomes+9)) || !strings.HasPrefix(got[RecentOutcomes-1].Message, "bad 10 ") {
		t.Errorf("got newest %q … oldest %q, want bad %d … bad 10", got[0].Message[:10], got[RecentOutcomes-1].Message[:10], RecentOutcomes+9)
	}
	if m := got[0].Message; len(m) > maxOutcomeMessage+len("…") || !strings.HasSuffix(m, "…") || !strings.HasSuffix(strings.TrimSuffix(m, "…"), "é") {
		t.Errorf("long message not cut at a rune: %d bytes, ends %q", len(m), m[len(m)-6:])
	}
}

func TestTrafficQueueWait(t *testing.T) {
	r := New()
	clock := &fakeClock{t: time.Unix(1700000000, 0)}
	r.now = clock.now
	if tr := r.Traffic(); tr.QueueWaits != 0 || tr.QueueWaitP50 != 0 {
		t.Errorf("no waits: got %+v", tr)
	}
	for i := 100; i >= 1; i-- { // out of order
		r.ObserveQueueWait("qwen3", time.Duration(i)*time.Millisecond)
	}
	tr := r.Traffic()
	if tr.QueueWaits != 100 || tr.QueueWaitP50 != 50*time.Millisecond || tr.QueueWaitP95 != 95*time.Millisecond {
		t.Errorf("got %d waits p50 %v p95 %v, want 100, 50ms, 95ms", tr.QueueWaits, tr.QueueWaitP50, tr.QueueWaitP95)
	}
	clock.t = clock.t.Add(QueueWaitWindow + time.Second)
	r.ObserveQueueWait("qwen3", 7*time.Second)
	if tr := r.Traffic(); tr.QueueWaits != 1 || tr.QueueWaitP50 != 7*time.Second || tr.QueueWaitP95 != 7*time.Second {
		t.Errorf("after the window: got %+v, want the one new wait", tr)
	}
	var nilReg *Registry
	if tr := nilReg.Traffic(); tr.Requests != 0 || nilReg.RecentOutcomes() != nil {
		t.Errorf("nil registry: got %+v", tr)
	}
}
