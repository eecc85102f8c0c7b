package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/api/admin"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/engine/testmodel"
	"github.com/macpool/macpool/internal/clustertest"
	"github.com/macpool/macpool/metrics"
	"github.com/macpool/macpool/runner"
	"github.com/macpool/macpool/worker"
)

// TestBrowserCluster drives the dashboard of a real in-process cluster: a
// secured coordinator (cluster secret, API keys required) with embedded
// NATS and Raft, two workers running the real engine on a tiny random
// Qwen3, and the HTTP server wired as cmd/macpool wires it (instrumented
// service, early rejections counted, /metrics, the dashboard). It makes
// errors of every kind (404, 400, 401, clients that go away: 499) and
// checks that the page lists them and shows the real values the cluster
// reports (versions, uptimes, KV cache free, slots, model size, storage
// type, context, placement, rates, queue wait, security), then drains a
// worker with the page's Drain button.
func TestBrowserCluster(t *testing.T) {
	chromium := chromiumPath(t)
	const model = clustertest.Model
	modelDir := filepath.Join(t.TempDir(), model)
	if err := testmodel.Write(modelDir, testmodel.Options{}); err != nil {
		t.Fatal(err)
	}
	secret, err := cluster.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	reg := metrics.New()
	ccfg := clustertest.CoordConfig(t, "coord-1", nil)
	ccfg.Metrics, ccfg.Version, ccfg.Secret, ccfg.RequireKeys = reg, "v9.8.7-coord", secret, true
	c, _ := clustertest.StartCoordinator(t, ccfg)
	workers := []string{"worker-a", "worker-b"}
	for _, name := range workers {
		scfg := runner.DefaultConfig()
		scfg.ModelDir, scfg.ModelName = modelDir, model
		scfg.Threads, scfg.MaxSeqs, scfg.MaxContext = 1, 2, 1024
		e, err := runner.New(scfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		wcfg := worker.DefaultConfig()
		wcfg.Name, wcfg.Version, wcfg.Models, wcfg.Engine, wcfg.Slots = name, "v9.8.7-worker", []string{model}, e, 2
		wcfg.Secret = secret
		wcfg.Gossip = cluster.FastConfig()
		wcfg.Gossip.Join = []string{c.GossipAddr()}
		wcfg.MetaInterval, wcfg.PingInterval = 50*time.Millisecond, 100*time.Millisecond
		wcfg.Logger = clustertest.Logger(t)
		w, err := worker.New(wcfg)
		if err != nil {
			t.Fatal(err)
		}
		clustertest.Run(t, w)
	}
	clustertest.WaitWorkers(t, c, len(workers))
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var key admin.CreatedKey
	clustertest.Eventually(t, 20*time.Second, "an admin key", func() bool {
		key, err = c.CreateAPIKey(ctx, admin.KeyRequest{ID: "ops", Admin: true})
		return err == nil
	})

	// The HTTP server as cmd/macpool's newHTTPServer builds it.
	cfg := DefaultConfig()
	cfg.PollInterval = 250 * time.Millisecond
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	acfg := api.DefaultConfig()
	acfg.Auth, acfg.Admin, acfg.Responses = c, c, c.ResponseStore()
	acfg.OnRejected = func(path string, e *openai.Error) { reg.ObserveRejected(api.JobKind(path), e) }
	acfg.Handlers = map[string]http.Handler{metrics.Path: reg.Handler()}
	for _, p := range d.Patterns() {
		acfg.Handlers[p] = d
	}
	apiSrv, err := api.New(acfg, reg.Instrument(c), clustertest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer apiSrv.Close()
	srv := httptest.NewServer(apiSrv.Handler())
	defer srv.Close()

	// Requests of every outcome, over HTTP.
	post := func(ctx context.Context, key, body string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		return http.DefaultClient.Do(req)
	}
	expect := func(key, body string, want int) {
		t.Helper()
		resp, err := post(ctx, key, body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("POST %s: got %d, want %d", body, resp.StatusCode, want)
		}
	}
	chat := func(model string, maxTokens int, stream bool) string {
		return fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"tell me about the pool"}],"max_tokens":%d,"stream":%v}`, model, maxTokens, stream)
	}
	expect(key.Secret, chat(model, 4, false), http.StatusOK)
	for i := range 3 {
		expect(key.Secret, chat(fmt.Sprintf("nope-%d", i), 4, false), http.StatusNotFound)
	}
	for range 2 {
		expect(key.Secret, `{"model":`, http.StatusBadRequest)
	}
	expect("", chat(model, 4, false), http.StatusUnauthorized)
	// Clients that go away mid-stream: read the first event, hang up. A
	// stream that ended first is a 200 and does not count.
	count := func(status int) int {
		n := 0
		for _, o := range reg.RecentOutcomes() {
			if o.Status == status {
				n++
			}
		}
		return n
	}
	for attempt := 0; count(499) < 2; attempt++ {
		if attempt == 8 {
			t.Fatalf("%d of %d abandoned streams recorded as 499", count(499), attempt)
		}
		before := count(499)
		sctx, scancel := context.WithCancel(ctx)
		resp, err := post(sctx, key.Secret, chat(model, 900, true))
		if err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "data:") && !strings.HasPrefix(line, "id:") {
			t.Fatalf("first line of the stream: %q, %v", line, err)
		}
		scancel()
		resp.Body.Close()
		deadline := time.Now().Add(10 * time.Second)
		for count(499) == before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling interval
		}
	}

	// The status as the page gets it, for the values to compare with.
	status := func() admin.Status {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+admin.StatusPath, nil)
		req.Header.Set("Authorization", "Bearer "+key.Secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st admin.Status
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != 200 {
			t.Fatalf("status: %d, %v", resp.StatusCode, err)
		}
		return st
	}
	var st admin.Status
	clustertest.Eventually(t, 20*time.Second, "both workers' summaries in the status", func() bool {
		st = status()
		return len(st.Served) == len(workers)
	})

	b := openBrowser(t, chromium, srv.URL+"/dashboard", 60*time.Second)
	// Without the key the page says it needs one (and stops asking).
	b.poll("the page to ask for a key", `document.getElementById('conn-text').textContent.includes('API key')`)
	b.do("type the admin key", chromedp.SendKeys(chromedp.CSS(`#chat-key`), key.Secret))
	b.poll("live status", `document.getElementById('conn').dataset.state === 'live'`)

	// Recent errors: every failure this coordinator answered.
	b.poll("the recent errors", `(() => {
		const n = (s) => document.querySelectorAll('#errors li[data-status="' + s + '"]').length;
		return n(404) >= 3 && n(400) >= 2 && n(401) >= 1 && n(499) >= 2; })()`)
	errs := b.text(`#errors`)
	for _, want := range []string{"model_not_found", "nope-0", "nope-2", "invalid_request_error", "cancelled", "the client went away", "invalid_api_key"} {
		if !strings.Contains(errs, want) {
			t.Errorf("recent errors lack %q:\n%s", want, errs)
		}
	}

	// Nodes: versions, uptimes, slots and KV cache as reported.
	if v := b.text(`tr[data-node="coord-1"] td.ver`); !strings.Contains(v, "v9.8.7-coord") || !strings.Contains(v, "up ") {
		t.Errorf("coordinator version/uptime %q", v)
	}
	for _, w := range workers {
		row := fmt.Sprintf(`tr[data-node=%q]`, w)
		if v := b.text(row + ` td.ver`); !strings.Contains(v, "v9.8.7-worker") || !strings.Contains(v, "up ") || strings.Contains(v, "unknown") {
			t.Errorf("%s version/uptime %q", w, v)
		}
		if s := b.text(row + ` td.load .slots`); !strings.HasSuffix(s, " / 2") {
			t.Errorf("%s slots busy %q, want N / 2", w, s)
		}
		var n admin.NodeStatus
		for _, x := range st.Nodes {
			if x.Name == w {
				n = x
			}
		}
		if n.KVTokens == 0 || n.KVBytes == 0 {
			t.Fatalf("status of %s reports no KV pool: %+v", w, n)
		}
		kvTokens := eval[string](b, `document.querySelector('`+row+` td.kv').dataset.kvTokens`)
		kvBytes := eval[string](b, `document.querySelector('`+row+` td.kv').dataset.kvBytes`)
		if kvTokens != strconv.Itoa(n.KVTokens) || kvBytes != strconv.FormatInt(n.KVBytes, 10) {
			t.Errorf("%s KV pool on the page %s tokens / %s bytes, status %d / %d", w, kvTokens, kvBytes, n.KVTokens, n.KVBytes)
		}
		if kv := b.text(row + ` td.kv`); !strings.Contains(kv, " tokens") || !strings.Contains(kv, "B") {
			t.Errorf("%s KV cache free %q, want tokens and bytes", w, kv)
		}
	}

	// The model: what the workers loaded, and where.
	mrow := fmt.Sprintf(`tr[data-model=%q]`, model)
	if m := b.text(mrow); !strings.Contains(m, "safetensors · bf16") || !strings.Contains(m, "1.0k tokens") ||
		!strings.Contains(m, "worker-a") || !strings.Contains(m, "worker-b") {
		t.Errorf("model row %q lacks safetensors · bf16, 1.0k tokens, worker-a, worker-b", m)
	}
	if size := eval[string](b, `document.querySelector('`+mrow+` td.size').dataset.size`); size != strconv.FormatInt(st.Served[0].Size, 10) || st.Served[0].Size < 1000 {
		t.Errorf("model size on the page %s, status %d", size, st.Served[0].Size)
	}

	// Rates, queue wait and security.
	rate := func(id string) float64 {
		v, err := strconv.ParseFloat(b.text("#"+id), 64)
		if err != nil {
			t.Errorf("#%s: %v", id, err)
		}
		return v
	}
	if r, e, x := rate("sum-rate"), rate("sum-errrate"), rate("sum-cancelrate"); r < 10 || e < 6 || x < 2 {
		t.Errorf("rates per minute: %v requests, %v errors, %v cancelled; want ≥ 10, ≥ 6, ≥ 2", r, e, x)
	}
	if q := b.text("#sum-qwait"); !strings.Contains(q, " / ") || !strings.Contains(q, "ms") && !strings.Contains(q, " s") {
		t.Errorf("queue wait %q, want p50 / p95", q)
	}
	if sec := b.text("#security"); !strings.Contains(sec, "cluster encrypted") || !strings.Contains(sec, "API keys required (1 stored)") {
		t.Errorf("security %q", sec)
	}
	b.screenshot("dashboard-cluster.png")

	// Drain worker-b with its button: confirm, the admin endpoint with the
	// page's key, the result, and the worker gone from the cluster.
	dialogs := chromedp.Events(b.ctx, page.JavascriptDialogOpening)
	var wg sync.WaitGroup
	var dialog string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			dialog = ev.Message
			if _, err := chromedp.Call(b.ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true}); err != nil {
				t.Errorf("accept the confirmation: %v", err)
			}
			return
		}
	}()
	b.click("click Drain", `button[data-drain-node="worker-b"]`)
	wg.Wait()
	if !strings.Contains(dialog, "Drain worker-b?") {
		t.Errorf("confirmation %q, want it to name worker-b", dialog)
	}
	b.poll("the drain to finish", `document.getElementById('drain-result').dataset.state === 'done'`)
	if r := b.text("#drain-result"); r != "worker-b drained and left the cluster" {
		t.Errorf("drain result %q", r)
	}
	if _, ok := c.Membership().Member("worker-b"); ok {
		t.Error("worker-b is still a member after the page drained it")
	}
	if _, ok := c.Membership().Member("worker-a"); !ok {
		t.Error("worker-a left too")
	}
	b.poll("worker-b gone from the table", `document.querySelector('tr[data-node="worker-b"]') === null`)
	b.close()
	if err := ctx.Err(); errors.Is(err, context.DeadlineExceeded) {
		t.Fatal("ran out of time")
	}
}
