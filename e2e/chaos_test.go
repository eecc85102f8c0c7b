package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"github.com/macpool/macpool/engine/testmodel"
	"github.com/macpool/macpool/engine/tokenizer"
)

// The chaos tests run the real engine (--backend cpu) on a tiny
// random-weight Qwen3 (engine/testmodel: real tokenizer and chat template)
// in separate worker processes, and kill or restart workers while streams
// run. A failed-over stream must go on with exactly the text an
// uninterrupted run produces (seeded sampling makes a run reproducible;
// docs/cluster.md, "Testing under failure").

// realCluster is a coordinator and real-engine workers.
type realCluster struct {
	t        *testing.T
	dir      string
	modelDir string
	coord    *proc
	client   oai.Client
	bias     map[string]int64 // logit bias that closes JSON strings soon on the random model

	mu      sync.Mutex
	workers map[string]*proc
}

const realModel = "tiny-qwen3"

func newRealCluster(t *testing.T, workers, slots int) *realCluster {
	t.Helper()
	dir := t.TempDir()
	c := &realCluster{t: t, dir: dir, modelDir: filepath.Join(dir, realModel), workers: map[string]*proc{}}
	if err := testmodel.Write(c.modelDir, testmodel.Options{}); err != nil {
		t.Fatalf("write test model: %v", err)
	}
	tok, err := tokenizer.Load(c.modelDir)
	if err != nil {
		t.Fatalf("tokenizer: %v", err)
	}
	c.bias = map[string]int64{}
	for _, s := range []string{`"`, `",`, `"}`, `",Ġ"`, `":`, `":Ġ`, `":"`} {
		if id, ok := tok.TokenID(s); ok {
			c.bias[strconv.Itoa(id)] = 8
		}
	}
	c.coord = start(t, "coordinator", "coordinator", "--name", "coord-1", "--http", "127.0.0.1:0",
		"--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "coord"),
		"--fast-timeouts")
	for i := 1; i <= workers; i++ {
		c.startWorker(fmt.Sprintf("worker-%d", i), slots)
	}
	base := "http://" + c.coord.fields["http"]
	c.waitReady(workers)
	c.client = oai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("sk-chaos"), option.WithMaxRetries(0))
	return c
}

// The workers run with every CPU kernel the machine has (AVX-512 here): the
// outputs compared exactly below rely on generated positions getting the
// same logits whether decoded or prefilled on resume, and whatever shares
// their batch (engine.Seq.PromptEnd; engine/qwen TestBatchInvariantLogits).

// startWorker starts (or restarts, under the same name) a worker process.
func (c *realCluster) startWorker(name string, slots int) *proc {
	c.t.Helper()
	p := startEnv(c.t, nil, "worker", "worker", "--name", name, "--join", c.coord.fields["gossip"],
		"--gossip", "127.0.0.1:0", "--model", c.modelDir, "--backend", "cpu", "--threads", "1",
		"--slots", strconv.Itoa(slots), "--fast-timeouts")
	c.mu.Lock()
	c.workers[name] = p
	c.mu.Unlock()
	return p
}

func (c *realCluster) worker(name string) *proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.workers[name]
}

// waitReady waits until n workers pull from the queue.
func (c *realCluster) waitReady(n int) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := getStatus("http://" + c.coord.fields["http"])
		ready := 0
		for _, node := range st.Nodes {
			if node.Role == "worker" && node.Ready {
				ready++
			}
		}
		if err == nil && ready == n && st.Leader != "" {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%d of %d workers ready after 30 s (%v): %+v", ready, n, err, st)
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
}

// failovers counts the coordinator's "failing over" log lines so far.
func (c *realCluster) failovers() int {
	return strings.Count(c.coord.stderr(), `msg="failing over"`)
}

// kill SIGKILLs a worker and waits for the process to end.
func (c *realCluster) kill(name string) {
	p := c.worker(name)
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// streamOut is what a client saw of one streamed chat completion.
type streamOut struct {
	content   string // per choice, joined by \x1e
	calls     string // tool calls per choice: "[index]name args", ids left out (random per run)
	logprobs  string // per choice: token, logprob and number of top logprobs of every token
	finish    string
	usage     int64 // completion tokens
	prompt    int64
	chunks    int
	workers   []string // the X-Macpool-Worker header (first worker), then the final chunk's macpool_worker if another
	err       error
	startedAt time.Time
	endedAt   time.Time
}

func (o *streamOut) same(b *streamOut) error {
	switch {
	case o.err != nil:
		return o.err
	case o.content != b.content:
		return fmt.Errorf("content %q, want %q", o.content, b.content)
	case o.calls != b.calls:
		return fmt.Errorf("tool calls %q, want %q", o.calls, b.calls)
	case o.logprobs != b.logprobs:
		return fmt.Errorf("logprobs %q, want %q", o.logprobs, b.logprobs)
	case o.finish != b.finish:
		return fmt.Errorf("finish %q, want %q", o.finish, b.finish)
	case o.usage != b.usage || o.prompt != b.prompt:
		return fmt.Errorf("usage %d+%d tokens, want %d+%d", o.prompt, o.usage, b.prompt, b.usage)
	}
	return nil
}

// progress is the live view of running streams that the chaos goroutine
// watches to strike while workers are mid-stream.
type progress struct {
	mu     sync.Mutex
	worker map[int]string // request -> worker that started it
	chunks map[int]int    // request -> content chunks so far
	done   map[int]bool
	ch     chan struct{} // coalesced change notification
}

func newProgress() *progress {
	return &progress{worker: map[int]string{}, chunks: map[int]int{}, done: map[int]bool{}, ch: make(chan struct{}, 1)}
}

func (p *progress) chunk(i int, worker string, content bool) {
	p.mu.Lock()
	if p.worker[i] != worker {
		p.worker[i], p.chunks[i] = worker, 0
	}
	if content {
		p.chunks[i]++
	}
	p.mu.Unlock()
	p.notify()
}

func (p *progress) finish(i int) {
	p.mu.Lock()
	p.done[i] = true
	p.mu.Unlock()
	p.notify()
}

func (p *progress) notify() {
	select {
	case p.ch <- struct{}{}:
	default:
	}
}

// midStream lists the unfinished requests that worker started, with at
// least lo and at most hi content chunks so far (early enough to be still
// on it).
func (p *progress) midStream(worker string, lo, hi int) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for i, w := range p.worker {
		if w == worker && !p.done[i] && p.chunks[i] >= lo && p.chunks[i] <= hi {
			out = append(out, i)
		}
	}
	return out
}

// waitMidStream waits until at least n requests are mid-stream on worker
// (see midStream) and returns them.
func (p *progress) waitMidStream(ctx context.Context, worker string, n, lo, hi int) ([]int, error) {
	for {
		if got := p.midStream(worker, lo, hi); len(got) >= n {
			return got, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no %d streams mid-way on %s: %w", n, worker, ctx.Err())
		case <-p.ch:
		}
	}
}

// stream runs one streamed chat completion, reporting chunks to pr (may be
// nil) as request i.
func (c *realCluster) stream(ctx context.Context, params oai.ChatCompletionNewParams, pr *progress, i int) *streamOut {
	o := &streamOut{startedAt: time.Now()}
	defer func() { o.endedAt = time.Now() }()
	var resp *http.Response
	s := c.client.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&resp))
	defer s.Close()
	// Per choice (n > 1 choices interleave differently in every run).
	var content, calls, finish, lps []string
	grow := func(i int) {
		for i >= len(content) {
			content, calls, finish, lps = append(content, ""), append(calls, ""), append(finish, ""), append(lps, "")
		}
	}
	first := ""
	for s.Next() {
		ch := s.Current()
		o.chunks++
		if len(o.workers) == 0 && resp != nil {
			// The worker that started the stream; the last one names
			// itself on the final chunk (macpool_worker).
			first = resp.Header.Get("X-Macpool-Worker")
			o.workers = append(o.workers, first)
		}
		if w, _ := strconv.Unquote(ch.JSON.ExtraFields["macpool_worker"].Raw()); w != "" && (len(o.workers) == 0 || w != o.workers[len(o.workers)-1]) {
			o.workers = append(o.workers, w)
		}
		text := false
		for _, choice := range ch.Choices {
			k := int(choice.Index)
			grow(k)
			content[k] += choice.Delta.Content
			text = text || choice.Delta.Content != "" || len(choice.Delta.ToolCalls) > 0
			for _, tc := range choice.Delta.ToolCalls {
				calls[k] += fmt.Sprintf("[%d]%s%s", tc.Index, tc.Function.Name, tc.Function.Arguments)
			}
			for _, lp := range choice.Logprobs.Content {
				lps[k] += fmt.Sprintf("%q:%v/%d;", lp.Token, lp.Logprob, len(lp.TopLogprobs))
			}
			if choice.FinishReason != "" {
				finish[k] = choice.FinishReason
			}
		}
		if ch.JSON.Usage.Valid() {
			o.usage, o.prompt = ch.Usage.CompletionTokens, ch.Usage.PromptTokens
		}
		if pr != nil && first != "" {
			pr.chunk(i, first, text)
		}
	}
	o.err = s.Err()
	o.content, o.calls, o.finish, o.logprobs = strings.Join(content, "\x1e"), strings.Join(calls, "\x1e"), strings.Join(finish, ","), strings.Join(lps, "\x1e")
	if o.err == nil && (len(finish) == 0 || slices.Contains(finish, "")) {
		o.err = fmt.Errorf("stream ended without a finish reason for every choice: %q", finish)
	}
	if o.err == nil && o.usage == 0 {
		o.err = errors.New("stream ended without usage")
	}
	if pr != nil {
		pr.finish(i)
	}
	return o
}

var chaosTopics = []string{
	"the weather in Paris", "a recipe for bread", "how raft elects a leader", "the tallest mountain",
	"why the sky is blue", "a poem about cats", "the history of Go", "how to tie a knot",
}

var chaosSchema = map[string]any{
	"type": "object", "additionalProperties": false, "required": []string{"ok", "n"},
	"properties": map[string]any{"ok": map[string]any{"type": "boolean"}, "n": map[string]any{"type": "integer"}},
}

// chaosRequest is request i of the chaos load: greedy and seeded sampling
// (temperature > 0), some with a json_schema response format or a forced
// tool call (their constraint state is replayed on resume), some with two
// choices (n = 2) or logprobs; 24–40 tokens.
func (c *realCluster) chaosRequest(i int) oai.ChatCompletionNewParams {
	p := oai.ChatCompletionNewParams{
		Model:         realModel,
		Messages:      []oai.ChatCompletionMessageParamUnion{oai.UserMessage(fmt.Sprintf("Request %d: tell me about %s.", i, chaosTopics[i%len(chaosTopics)]))},
		MaxTokens:     oai.Int(int64(24 + i%17)),
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
	}
	switch {
	case i%10 == 3:
		p.Temperature, p.Seed, p.LogitBias = oai.Float(1), oai.Int(int64(1000+i)), c.bias
		p.ResponseFormat = oai.ChatCompletionNewParamsResponseFormatUnion{OfJSONSchema: &shared.ResponseFormatJSONSchemaParam{
			JSONSchema: shared.ResponseFormatJSONSchemaJSONSchemaParam{Name: "answer", Schema: chaosSchema, Strict: oai.Bool(true)}}}
	case i%10 == 7:
		p.Temperature, p.Seed, p.LogitBias = oai.Float(0.8), oai.Int(int64(1000+i)), c.bias
		p.Tools = []oai.ChatCompletionToolUnionParam{oai.ChatCompletionFunctionTool(oai.FunctionDefinitionParam{
			Name: "get_weather", Description: oai.String("Weather of a city"),
			Parameters: oai.FunctionParameters{"type": "object", "required": []string{"city", "days"},
				"properties": map[string]any{"city": map[string]any{"type": "string"}, "days": map[string]any{"type": "integer"}}},
		})}
		p.ToolChoice = oai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: oai.String("required")}
	case i%10 == 5:
		p.Temperature, p.Seed, p.N = oai.Float(0.9), oai.Int(int64(1000+i)), oai.Int(2) // two choices: seeds s and s+1
	case i%10 == 1:
		p.Temperature, p.Seed = oai.Float(0.7), oai.Int(int64(1000+i))
		p.Logprobs, p.TopLogprobs = oai.Bool(true), oai.Int(2)
	case i%3 == 0:
		p.Temperature = oai.Float(0) // greedy
	default:
		p.Temperature, p.Seed = oai.Float(0.9), oai.Int(int64(1000+i))
	}
	return p
}

// runAll sends n chaos requests at once and returns what each client saw.
func (c *realCluster) runAll(ctx context.Context, n int, pr *progress) []*streamOut {
	out := make([]*streamOut, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = c.stream(ctx, c.chaosRequest(i), pr, i)
		}()
	}
	wg.Wait()
	return out
}

// TestChaos is the chaos test of issue #9: three real-engine workers, 50
// concurrent streaming requests (greedy, seeded, json_schema, forced tool
// calls, n = 2, logprobs). A no-failure run gives the expected outputs;
// then the same 50 run while worker-1 is SIGKILLed and worker-2 is stopped
// (SIGTERM twice: drain, then hand the running jobs back at once) and
// restarted under the same name, each while it has streams mid-way. Every
// request must complete without error with exactly its no-failure output
// (content, tool calls, logprobs, finish reasons, usage: nothing duplicated
// or missing), and the streams mid-way on the killed worker must really
// have moved.
func TestChaos(t *testing.T) {
	const n = 50
	began := time.Now()
	c := newRealCluster(t, 3, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	baseline := c.runAll(ctx, n, nil)
	for i, o := range baseline {
		if o.err != nil {
			t.Fatalf("baseline request %d: %v", i, o.err)
		}
	}
	t.Logf("baseline: %d requests in %v", n, time.Since(began))

	pr := newProgress()
	chaosErr := make(chan error, 1)
	var killed, restarted []int
	strike := func() error {
		// Strike while a worker has streams that started but are far from
		// their end (≥ 24 tokens each), so that they must move.
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		defer scancel()
		var err error
		if killed, err = pr.waitMidStream(sctx, "worker-1", 2, 1, 4); err != nil {
			return err
		}
		c.kill("worker-1")
		t.Logf("SIGKILL worker-1 with %d streams mid-way: %v", len(killed), killed)
		if restarted, err = pr.waitMidStream(sctx, "worker-2", 2, 1, 4); err != nil {
			return err
		}
		// An impatient restart: SIGTERM starts a drain (running jobs
		// would finish first), a second SIGTERM hands them back at once.
		old := c.worker("worker-2")
		old.cmd.Process.Signal(syscall.SIGTERM)
		for draining := false; !draining; {
			select {
			case <-old.done:
				draining = true
			case <-sctx.Done():
				return errors.New("worker-2 never started draining")
			case <-time.After(5 * time.Millisecond): // polling interval
				draining = strings.Contains(old.stderr(), "draining")
			}
		}
		old.cmd.Process.Signal(syscall.SIGTERM)
		<-old.done
		c.startWorker("worker-2", 4)
		t.Logf("SIGTERM + restart of worker-2 with %d streams mid-way: %v", len(restarted), restarted)
		return nil
	}
	go func() {
		// Sent even if a helper ends this goroutine (t.Fatal in start).
		err := errors.New("the chaos goroutine stopped early (see the log)")
		defer func() { chaosErr <- err }()
		err = strike()
	}()
	chaosBegan := time.Now()
	got := c.runAll(ctx, n, pr)
	chaosTook := time.Since(chaosBegan)
	if err := <-chaosErr; err != nil {
		t.Fatalf("chaos: %v", err)
	}

	failovers := c.failovers()
	lost, moved := 0, 0
	for i, o := range got {
		if len(o.workers) > 1 {
			moved++
		}
		if err := o.same(baseline[i]); err != nil {
			lost++
			t.Errorf("request %d (workers %v): %v", i, o.workers, err)
		}
	}
	t.Logf("chaos run: %d requests in %v, 2 failures injected (SIGKILL worker-1 with %d streams mid-way, SIGTERM+restart worker-2 with %d), %d streams moved between workers, %d failovers, %d lost; total %v",
		n, chaosTook, len(killed), len(restarted), moved, failovers, lost, time.Since(began))
	// The streams mid-way on the killed worker cannot have finished there.
	for _, i := range killed {
		if w := got[i].workers; len(w) < 2 || w[0] != "worker-1" {
			t.Errorf("request %d was mid-way on worker-1 when it was killed, but its chunks came from %v", i, w)
		}
	}
	// (Streams on worker-2 may finish while it starts draining.)
	if moved < len(killed) || failovers < len(killed) {
		t.Errorf("%d streams moved between workers, %d failovers: want at least the %d streams on the killed worker to move",
			moved, failovers, len(killed))
	}
}

// TestFailoverRealEngine strikes the worker that serves a streamed request
// mid-way, on the real engine: SIGKILL and an immediate restart under the
// same name (a crash and a supervisor restart: the coordinator must tell the
// new process from the old), or SIGSTOP (a Mac that sleeps) and SIGCONT
// once the stream ended elsewhere. The stream goes on on another worker
// with exactly the uninterrupted run's output, for greedy decoding, seeded
// sampling and a forced tool call (constraint state replayed), and the
// struck worker serves again afterwards. Then every worker is killed under
// a running stream: it must end with a clear 503 error event, not hang.
func TestFailoverRealEngine(t *testing.T) {
	began := time.Now()
	c := newRealCluster(t, 3, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	prompt := []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Tell me a long story about the sea.")}
	variants := []struct {
		name   string
		sleep  bool // SIGSTOP instead of SIGKILL + restart
		params oai.ChatCompletionNewParams
	}{
		{"greedy", false, oai.ChatCompletionNewParams{Temperature: oai.Float(0)}},
		{"seeded", true, oai.ChatCompletionNewParams{Temperature: oai.Float(0.9), Seed: oai.Int(7)}},
		{"tool", false, oai.ChatCompletionNewParams{Temperature: oai.Float(0.8), Seed: oai.Int(3), LogitBias: c.bias,
			Tools: c.chaosRequest(7).Tools, ToolChoice: c.chaosRequest(7).ToolChoice}},
	}
	for i := range variants {
		p := &variants[i].params
		p.Model, p.Messages, p.MaxTokens = realModel, prompt, oai.Int(150)
		p.StreamOptions = oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)}
	}
	// Uninterrupted runs, one per worker at once.
	want := make([]*streamOut, len(variants))
	var wg sync.WaitGroup
	for i, v := range variants {
		wg.Add(1)
		go func() { defer wg.Done(); want[i] = c.stream(ctx, v.params, nil, i) }()
	}
	wg.Wait()
	for i, v := range variants {
		if want[i].err != nil {
			t.Fatalf("%s: uninterrupted run: %v", v.name, want[i].err)
		}
	}
	if want[2].calls == "" {
		t.Fatalf("tool: no tool call in the uninterrupted run: %+v", want[2])
	}

	for i, v := range variants {
		pr := newProgress()
		done := make(chan *streamOut, 1)
		go func() { done <- c.stream(ctx, v.params, pr, i) }()
		sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
		var victim string
		for victim == "" {
			for _, w := range []string{"worker-1", "worker-2", "worker-3"} {
				if len(pr.midStream(w, 3, 1000)) > 0 {
					victim = w
				}
			}
			if victim != "" {
				break
			}
			select {
			case <-sctx.Done():
				t.Fatalf("%s: the stream never got 3 chunks", v.name)
			case <-pr.ch:
			}
		}
		scancel()
		killed, before := time.Now(), c.failovers()
		if v.sleep {
			c.worker(victim).cmd.Process.Signal(syscall.SIGSTOP)
		} else {
			// Restarted under its name at once: the new process must not
			// pass for the one that ran the stream.
			c.kill(victim)
			c.startWorker(victim, 1)
		}
		got := <-done
		t.Logf("%s: %s %s mid-stream; done %v later, workers %v", v.name, map[bool]string{false: "SIGKILL+restart", true: "SIGSTOP"}[v.sleep],
			victim, time.Since(killed), got.workers)
		if err := got.same(want[i]); err != nil {
			t.Errorf("%s: %v", v.name, err)
		}
		// (The restarted process may be the one that resumes it.)
		if len(got.workers) == 0 || got.workers[0] != victim || c.failovers() == before {
			t.Errorf("%s: workers %v, %d failovers: want %s first, then a failover", v.name, got.workers, c.failovers()-before, victim)
		}
		if v.sleep {
			c.worker(victim).cmd.Process.Signal(syscall.SIGCONT) // wakes up and serves again
		}
		c.waitReady(3)
	}

	// Every worker dies under a running stream: a clear error, no hang.
	pr := newProgress()
	done := make(chan *streamOut, 1)
	p := variants[1].params
	p.MaxTokens = oai.Int(2000)
	go func() { done <- c.stream(ctx, p, pr, 0) }()
	for {
		pr.mu.Lock()
		n := pr.chunks[0]
		pr.mu.Unlock()
		if n >= 3 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the last stream never got 3 chunks")
		case <-pr.ch:
		}
	}
	killed := time.Now()
	for _, w := range []string{"worker-1", "worker-2", "worker-3"} {
		c.worker(w).cmd.Process.Signal(syscall.SIGKILL)
	}
	var got *streamOut
	select {
	case got = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("stream still open 20 s after every worker was killed")
	}
	var streamErr *ssestream.StreamError
	if !errors.As(got.err, &streamErr) || !strings.Contains(string(streamErr.Event.Data), "service_unavailable_error") {
		t.Fatalf("after every worker was killed: got %v (%d chunks), want a service_unavailable_error event", got.err, got.chunks)
	}
	t.Logf("every worker killed: the stream ended %v later with %v; total %v", time.Since(killed), got.err, time.Since(began))
}
