package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/metrics"
)

// scripted is an api.Service whose answers are fixed text deltas, sent a
// little apart so the page has to render them as they come.
type scripted struct {
	deltas []string
	gap    time.Duration

	mu   sync.Mutex
	jobs []*job.Job
}

func (s *scripted) Models(ctx context.Context) ([]openai.Model, error) {
	return []openai.Model{{ID: "qwen3-0.6b", Object: "model"}, {ID: "qwen3-8b", Object: "model"}}, nil
}

func (s *scripted) Ready(ctx context.Context) error { return nil }

func (s *scripted) Submit(ctx context.Context, j *job.Job) (job.Stream, error) {
	s.mu.Lock()
	s.jobs = append(s.jobs, j)
	s.mu.Unlock()
	evs := []*job.Event{{Worker: "mac-studio-1", Role: "assistant"}}
	for _, d := range s.deltas {
		evs = append(evs, &job.Event{Worker: "mac-studio-1", Text: d})
	}
	evs = append(evs, &job.Event{Worker: "mac-studio-1", FinishReason: "stop",
		Usage: &openai.Usage{PromptTokens: 9, CompletionTokens: len(s.deltas), TotalTokens: 9 + len(s.deltas)}})
	return &scriptedStream{evs: evs, gap: s.gap}, nil
}

func (s *scripted) lastJob() *job.Job {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.jobs) == 0 {
		return nil
	}
	return s.jobs[len(s.jobs)-1]
}

type scriptedStream struct {
	evs []*job.Event
	gap time.Duration
}

func (s *scriptedStream) Recv(ctx context.Context) (*job.Event, error) {
	if len(s.evs) == 0 {
		return nil, io.EOF
	}
	t := time.NewTimer(s.gap)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	ev := s.evs[0]
	s.evs = s.evs[1:]
	return ev, nil
}

func (s *scriptedStream) Close() error { return nil }

// chromiumPath finds a Chromium to drive. In CI (CI set) a missing browser
// is a failure; elsewhere the test is skipped.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MACPOOL_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("CI is set but no Chromium is installed (apt-get install chromium chromium-driver)")
	}
	t.Skip("no Chromium installed (apt-get install chromium); CI is unset")
	return ""
}

// artifactDir is where the screenshot goes: $MACPOOL_TEST_ARTIFACTS if set
// (CI keeps it), else the test's temporary directory.
func artifactDir(t *testing.T) string {
	if d := os.Getenv("MACPOOL_TEST_ARTIFACTS"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// TestBrowser serves the dashboard next to the real api.Server (with a
// scripted Service), a status endpoint shaped like coordinator.Status
// (testdata/status.json) whose queue grows on every poll, and a metrics
// Registry whose token counters grow on every scrape; then drives headless
// Chromium over the DevTools protocol.
func TestBrowser(t *testing.T) {
	chromium := chromiumPath(t)

	svc := &scripted{deltas: []string{"Hello", " from", " mac-studio-1", "!"}, gap: 150 * time.Millisecond}
	acfg := api.DefaultConfig()
	apiSrv, err := api.New(acfg, svc, nil)
	if err != nil {
		t.Fatal(err)
	}
	fixture, err := os.ReadFile("testdata/status.json")
	if err != nil {
		t.Fatal(err)
	}
	var polls atomic.Int64
	status := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var st map[string]any
		if err := json.Unmarshal(fixture, &st); err != nil {
			t.Error(err)
		}
		st["queued"].(map[string]any)["qwen3-8b"] = polls.Add(1) // live: grows every poll
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(st)
	})
	reg := metrics.New()
	var scrapes atomic.Int64
	metricsH := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reg.AddGeneratedTokens("mac-studio-1", "qwen3-8b", 60)
		reg.AddGeneratedTokens("mac-mini-2", "qwen3-0.6b", 15)
		reg.ObserveTTFT("qwen3-8b", 300*time.Millisecond)      // bucket (0.25, 0.5]: p50 interpolates to 375 ms
		reg.ObserveInterToken("qwen3-8b", 20*time.Millisecond) // bucket (0.01, 0.02]: p50 15 ms
		scrapes.Add(1)
		reg.Handler().ServeHTTP(w, r)
	})

	cfg := DefaultConfig()
	cfg.PollInterval = 250 * time.Millisecond
	cfg.Title = "macpool · office"
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, p := range d.Patterns() {
		mux.Handle(p, d)
	}
	mux.Handle(cfg.StatusPath, status)
	mux.Handle(metrics.Path, metricsH)
	mux.Handle("/", apiSrv.Handler())
	srv := httptest.NewServer(mux)
	defer srv.Close()

	b := openBrowser(t, chromium, srv.URL+"/dashboard", 40*time.Second)
	ctx, do, poll, text := b.ctx, b.do, b.poll, b.text

	// Live nodes.
	do("node rows", chromedp.WaitVisible(chromedp.CSS(`tr[data-node="mac-studio-1"]`)))
	poll("tokens/s", `(() => {
		const c = document.querySelector('tr[data-node="mac-studio-1"] td.tps');
		return c !== null && parseFloat(c.textContent) > 0; })()`)
	row, coordRow, conn := text(`tr[data-node="mac-studio-1"]`), text(`tr[data-node="office-coord"]`), text(`#conn`)
	for _, want := range []string{"mac-studio-1", "worker", "Apple M2 Ultra", "24 cores", "192 GB", "qwen3-8b", "3 / 8"} {
		if !strings.Contains(row, want) {
			t.Errorf("node row %q lacks %q", row, want)
		}
	}
	if !strings.Contains(coordRow, "leader") || !strings.Contains(coordRow, "Apple M2 Pro") {
		t.Errorf("coordinator row %q lacks leader / Apple M2 Pro", coordRow)
	}
	if !strings.Contains(conn, "live") {
		t.Errorf("connection indicator %q, want live", conn)
	}
	poll("latency quantiles", `document.getElementById('sum-ttft').textContent === '375 ms' &&
		document.getElementById('sum-itl').textContent === '15 ms'`)
	// The page keeps polling: the queue of qwen3-8b grows with every poll.
	q1 := strings.TrimSpace(text(`tr[data-model="qwen3-8b"] td.queued`))
	poll("queue to grow", `parseInt(document.querySelector('tr[data-model="qwen3-8b"] td.queued').textContent, 10) > `+q1)
	// a placed model still being fetched shows its progress.
	if m := text(`tr[data-model="qwen3-8b"]`); !strings.Contains(m, "mac-mini-2: fetching 25% (peers)") || strings.Contains(m, "mac-studio-1: ready") {
		t.Errorf("model row %q lacks the install progress of mac-mini-2 (only)", m)
	}
	if placement := text(`tr[data-model="qwen3-0.6b"]`); !strings.Contains(placement, "mac-mini-2") ||
		!strings.Contains(placement, "gguf") || !strings.Contains(placement, "0 / 4") || !strings.Contains(placement, "610 MB") {
		t.Errorf("placement row %q lacks mac-mini-2, gguf, 0 / 4, 610 MB", placement)
	}
	// What the worker reports of the model wins over the registry entry.
	if m := text(`tr[data-model="qwen3-8b"]`); !strings.Contains(m, "mlx · 4bit") || !strings.Contains(m, "4.3 GB") ||
		!strings.Contains(m, "41k tokens") || !strings.Contains(m, "mac-studio-1") {
		t.Errorf("model row %q lacks mlx · 4bit, 4.3 GB, 41k tokens, mac-studio-1", m)
	}
	// Pipeline stages, when a model's status has them, replace the worker list.
	if m := text(`tr[data-model="qwen3-32b"] td.placement`); !strings.Contains(m, "mac-studio-1 layers 0–39") || !strings.Contains(m, "mac-mini-2 layers 40–63") {
		t.Errorf("stages %q, want mac-studio-1 layers 0–39 and mac-mini-2 layers 40–63", m)
	}
	if v := text(`tr[data-node="office-coord"] td.ver`); !strings.Contains(v, "v0.9.1") || !strings.Contains(v, "up 2 h 0 min") {
		t.Errorf("coordinator version/uptime %q, want v0.9.1, up 2 h 0 min", v)
	}
	if v := text(`tr[data-node="mac-mini-2"] td.ver`); !strings.Contains(v, "v0.9.0") || !strings.Contains(v, "uptime unknown") {
		t.Errorf("mac-mini-2 version/uptime %q, want v0.9.0, uptime unknown", v)
	}
	if kv := text(`tr[data-node="mac-studio-1"] td.kv`); !strings.Contains(kv, "33k / 131k tokens") || !strings.Contains(kv, "4.5 GB / 18.0 GB") {
		t.Errorf("KV cache free %q, want 33k / 131k tokens, 4.5 GB / 18.0 GB", kv)
	}
	for id, want := range map[string]string{"sum-rate": "42.0", "sum-errrate": "5.0", "sum-cancelrate": "2.0", "sum-qwait": "13 ms / 840 ms"} {
		if got := text("#" + id); got != want {
			t.Errorf("#%s got %q, want %q", id, got, want)
		}
	}
	if sec := text(`#security`); !strings.Contains(sec, "cluster encrypted") || !strings.Contains(sec, "API keys required (3 stored)") {
		t.Errorf("security %q", sec)
	}
	// The coordinator's recent errors, newest first, every value as text:
	// the model name that is an <img> tag must not become one.
	errs := text(`#errors`)
	i499, i404, i503 := strings.Index(errs, "499"), strings.Index(errs, "404"), strings.Index(errs, "503")
	if i499 < 0 || i404 < i499 || i503 < i404 || !strings.Contains(errs, "model_not_found") ||
		!strings.Contains(errs, "the client went away") || !strings.Contains(errs, "worker mac-mini-2 failed mid-stream") {
		t.Errorf("recent errors %q, want 499, 404, 503 in that order with their messages", errs)
	}
	if n := eval[int](b, `document.querySelectorAll('#errors img, #errors [onerror]').length`); n != 0 {
		t.Errorf("the error list made %d elements of a message: not escaped", n)
	}
	if !strings.Contains(errs, "<img src=x onerror=alert(1)>") {
		t.Errorf("recent errors %q lack the model name as text", errs)
	}

	// Playground: the reply must appear piece by piece, then complete.
	do("send a message",
		chromedp.WaitReady(chromedp.CSS(`#chat-model option[value="qwen3-8b"]`)),
		chromedp.SetValue(chromedp.CSS(`#chat-model`), "qwen3-8b"),
		chromedp.SendKeys(chromedp.CSS(`#chat-input`), "Say hello"),
		chromedp.Click(chromedp.CSS(`#chat-send`)))
	poll("a partial reply while streaming", `(() => {
		const b = document.querySelector('.msg.assistant.streaming .content');
		return b !== null && b.textContent.startsWith('Hello') && !b.textContent.endsWith('!'); })()`)
	poll("the reply to finish", `document.querySelector('.msg.assistant')?.dataset.done === 'true'`)
	reply, meta, chatStatus := text(`.msg.assistant .content`), text(`.msg.assistant .meta`), text(`#chat-status`)
	chunks, err := chromedp.Run(ctx, chromedp.AttributeValue(chromedp.CSS(`.msg.assistant`), "data-chunks"))
	if err != nil {
		t.Fatal(err)
	}
	if reply != "Hello from mac-studio-1!" {
		t.Errorf("reply got %q, want %q", reply, "Hello from mac-studio-1!")
	}
	if chunks.Value != "4" {
		t.Errorf("reply rendered in %s chunks, want 4", chunks.Value)
	}
	if !strings.Contains(meta, "mac-studio-1") || !strings.Contains(meta, "4 tokens") || chatStatus != "done" {
		t.Errorf("reply meta %q / status %q, want worker, 4 tokens, done", meta, chatStatus)
	}
	job := svc.lastJob()
	if job == nil || job.Model != "qwen3-8b" || job.Chat == nil || !job.Chat.Stream ||
		len(job.Chat.Messages) != 1 || job.Chat.Messages[0].Content.String() != "Say hello" {
		t.Errorf("service got job %+v, want a streamed chat for qwen3-8b with the one message", job)
	}

	b.screenshot("dashboard.png")
	b.close()
	apiSrv.Close()
}

// browser is a headless Chromium showing one page, with the steps the
// browser tests take; every step is bounded by the deadline openBrowser got.
type browser struct {
	t     *testing.T
	ctx   context.Context
	start time.Time
	close func()
}

// openBrowser starts Chromium on url; close (also at the end of the test)
// stops it.
func openBrowser(t *testing.T, chromium, url string, limit time.Duration) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.NoSandbox, // root in CI containers
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1100),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	b := &browser{t: t, start: time.Now()}
	// The first call starts the browser and must not carry a timeout (it
	// would end the browser); later steps are bounded.
	if err := chromedp.Do(bctx, chromedp.Navigate(url)); err != nil {
		cancelBrowser()
		cancelAlloc()
		t.Fatalf("start Chromium and open the dashboard: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, limit)
	var once sync.Once
	b.ctx = ctx
	b.close = func() { once.Do(func() { cancel(); cancelBrowser(); cancelAlloc() }) }
	t.Cleanup(b.close)
	return b
}

func (b *browser) do(name string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatalf("%s: %v (after %v)", name, err, time.Since(b.start))
	}
}

// click clicks the element sel. The page re-renders its tables on every
// poll, so the node a click looked up can be gone before it is clicked
// ("Could not find node with given id"): then it clicks the new one.
func (b *browser) click(name, sel string) {
	b.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(sel)))
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "Could not find node") || time.Now().After(deadline) {
			b.t.Fatalf("%s: %v (after %v)", name, err, time.Since(b.start))
		}
	}
}

// poll waits until the JavaScript expression is truthy.
func (b *browser) poll(name, expr string) {
	b.t.Helper()
	if _, err := chromedp.Run(b.ctx, chromedp.Poll[chromedp.Void](expr)); err != nil {
		b.t.Fatalf("wait for %s: %v (after %v)", name, err, time.Since(b.start))
	}
}

// text reads an element's text in one evaluation: the page re-renders
// its tables on every poll, so a node found by one DevTools call can be
// gone by the next.
func (b *browser) text(sel string) string {
	b.t.Helper()
	q, _ := json.Marshal(sel)
	s, err := chromedp.Run(b.ctx, chromedp.Poll[string](`(() => {
		const e = document.querySelector(`+string(q)+`);
		return e === null ? null : e.innerText; })()`))
	if err != nil {
		b.t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// eval evaluates a JavaScript expression.
func eval[T any](b *browser, expr string) T {
	b.t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// screenshot saves the page into artifactDir.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(artifactDir(b.t), name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot: %s (%d bytes), browser steps took %v", path, len(png), time.Since(b.start))
}
