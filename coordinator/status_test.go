package coordinator_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/metrics"
	"github.com/macpool/macpool/prefix"
	"github.com/macpool/macpool/worker"
)

// reportingEngine is the test engine with the summary a runner publishes:
// a KV pool and what the model is.
type reportingEngine struct{ worker.TestEngine }

func (reportingEngine) RoutingSummary(max int) prefix.Summary {
	return prefix.Summary{BlockSize: 32, Blocks: 100, FreeBlocks: 75, BlockBytes: 4096,
		Context: 8192, Format: "gguf", Quantization: "q8_0", Size: 123456789}
}

// TestStatusReports checks what the status adds for the dashboard on a real
// in-process cluster: every failed request this coordinator admitted (a
// 404 at admission, a 400 refused by the HTTP layer, a stream its client
// abandoned: 499) with status, model and message; the minute's request,
// error and cancel counts and the queue wait; each worker's KV room in
// tokens and bytes and what its model is; uptimes; how it is secured.
func TestStatusReports(t *testing.T) {
	cfg := coordConfig(t, "c1", nil)
	cfg.Metrics = metrics.New()
	cfg.Version = "v1.2.3-test"
	c, _ := startCoordinator(t, cfg)
	startWorker(t, "w1", c.GossipAddr(), 2, &reportingEngine{worker.TestEngine{TokenDelay: 20 * time.Millisecond}})
	waitWorkers(t, c, 1)
	svc := cfg.Metrics.Instrument(c) // as cmd/macpool serves it
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := submit(ctx, svc, chatJob("ok", "", "hello there", 3)); err != nil {
		t.Fatalf("ordinary request: %v", err)
	}
	bad := chatJob("404", "", "hi", 3)
	bad.Model = "no-such-model"
	if _, err := svc.Submit(ctx, bad); err == nil {
		t.Fatal("unknown model: no error")
	}
	cfg.Metrics.ObserveRejected("chat", openai.InvalidRequest("messages", "messages must not be empty"))
	// A client that goes away mid-stream.
	sctx, scancel := context.WithCancel(ctx)
	s, err := svc.Submit(sctx, chatJob("gone", "", "a long answer please", 200))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(sctx); err != nil {
		t.Fatal(err)
	}
	scancel()
	for {
		if _, err := s.Recv(sctx); err != nil {
			break
		}
	}
	s.Close()

	var st admin.Status
	eventually(t, 10*time.Second, "the worker's summary in the status", func() bool {
		st = c.Status(ctx)
		return len(st.Served) == 1
	})
	wantErrs := []struct {
		status  int
		model   string
		message string
	}{
		{499, testModel, "client went away"},
		{http.StatusBadRequest, "", "messages must not be empty"},
		{http.StatusNotFound, "no-such-model", "no-such-model"},
	}
	if len(st.RecentErrors) != len(wantErrs) {
		t.Fatalf("recent errors: got %+v, want %d", st.RecentErrors, len(wantErrs))
	}
	for i, w := range wantErrs {
		g := st.RecentErrors[i]
		if g.Status != w.status || g.Model != w.model || !strings.Contains(g.Message, w.message) ||
			g.Error == "" || g.Time < st.Time-60_000 || g.Time > st.Time {
			t.Errorf("recent error %d: got %+v, want status %d, model %q, message with %q, a time in the last minute", i, g, w.status, w.model, w.message)
		}
	}
	if tr := st.Traffic; tr.Requests != 4 || tr.Errors != 2 || tr.Cancelled != 1 || tr.WindowS != 60 ||
		tr.QueueWaits < 2 || tr.QueueWaitP95MS < tr.QueueWaitP50MS || tr.QueueWaitP50MS <= 0 {
		t.Errorf("traffic: got %+v, want 4 requests, 2 errors, 1 cancelled in 60 s, 2+ queue waits", tr)
	}

	var w1, c1 admin.NodeStatus
	for _, n := range st.Nodes {
		switch n.Name {
		case "w1":
			w1 = n
		case "c1":
			c1 = n
		}
	}
	if w1.KVTokens != 3200 || w1.KVFreeTokens != 2400 || w1.KVBytes != 409600 || w1.KVFreeBytes != 307200 ||
		w1.KVBlocks != 100 || w1.KVFreeBlocks != 75 {
		t.Errorf("w1 KV: got %d/%d tokens, %d/%d bytes, %d/%d blocks; want 2400/3200, 307200/409600, 75/100",
			w1.KVFreeTokens, w1.KVTokens, w1.KVFreeBytes, w1.KVBytes, w1.KVFreeBlocks, w1.KVBlocks)
	}
	for _, n := range []admin.NodeStatus{w1, c1} {
		if n.Started <= 0 || n.Started*1000 > st.Time {
			t.Errorf("%s: start time %d, want before the status time %d", n.Name, n.Started, st.Time)
		}
	}
	if c1.Version != "v1.2.3-test" || st.Version != "v1.2.3-test" {
		t.Errorf("coordinator version: node %q, status %q", c1.Version, st.Version)
	}
	want := admin.ServedModel{Model: testModel, Worker: "w1", Context: 8192, Format: "gguf", Quantization: "q8_0", Size: 123456789}
	if st.Served[0] != want {
		t.Errorf("served: got %+v, want %+v", st.Served[0], want)
	}
	if st.Security != (admin.Security{ClusterSecret: false, API: admin.APILoopback}) {
		t.Errorf("security of an open loopback test cluster: got %+v", st.Security)
	}
}

// TestStatusSecurity: a cluster with the secret and stored keys says so.
func TestStatusSecurity(t *testing.T) {
	secret, err := cluster.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	cfg := coordConfig(t, "c1", nil)
	cfg.Secret = secret
	cfg.RequireKeys = true
	c, _ := startCoordinator(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eventually(t, 10*time.Second, "the state loaded", c.StateLoaded)
	if got := c.Status(ctx).Security; got != (admin.Security{ClusterSecret: true, API: admin.APIKeys}) {
		t.Errorf("before a key: got %+v", got)
	}
	var k admin.CreatedKey
	eventually(t, 10*time.Second, "a key created", func() bool {
		k, err = c.CreateAPIKey(ctx, admin.KeyRequest{ID: "ops", Admin: true})
		return err == nil || errors.Is(err, admin.ErrKeyExists)
	})
	if got := c.Status(ctx).Security; got.Keys != 1 || got.API != admin.APIKeys || !got.ClusterSecret {
		t.Errorf("with key %s: got %+v", k.ID, got)
	}
}
