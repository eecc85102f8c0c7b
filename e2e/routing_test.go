package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/engine/testmodel"
	"github.com/macpool/macpool/internal/clustertest"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/prefix"
	"github.com/macpool/macpool/runner"
	"github.com/macpool/macpool/worker"
)

type routedTurn struct {
	worker string
	text   string
	usage  *openai.Usage
}

func submitTurn(ctx context.Context, c *coordinator.Coordinator, job *job.Job) (routedTurn, error) {
	s, err := c.Submit(ctx, job)
	if err != nil {
		return routedTurn{}, err
	}
	defer s.Close()
	var r routedTurn
	var b strings.Builder
	for {
		ev, err := s.Recv(ctx)
		if errors.Is(err, io.EOF) {
			r.text = b.String()
			return r, nil
		}
		if err != nil {
			return r, err
		}
		if ev.Err != nil {
			return r, ev.Err
		}
		r.worker = ev.Worker
		b.WriteString(ev.Text)
		if ev.Usage != nil {
			r.usage = ev.Usage
		}
	}
}

func cachedTokens(u *openai.Usage) int {
	if u == nil || u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// TestPrefixRoutingRealEngine: a coordinator and two one-slot workers with
// the real engine (the runner) on the tiny
// test model, in-process. A conversation's second turn goes to the worker
// that served the first and reuses its KV prefix (cached_tokens > 0). With
// routing off the queue alternates between the idle workers, so the second
// turn lands on the other worker with nothing cached (logged).
func TestPrefixRoutingRealEngine(t *testing.T) {
	dir := t.TempDir()
	if err := testmodel.Write(dir, testmodel.Options{}); err != nil {
		t.Fatal(err)
	}
	const model = "tiny"
	for _, routing := range []bool{true, false} {
		t.Run(fmt.Sprintf("routing=%v", routing), func(t *testing.T) {
			cfg := coordinator.DefaultConfig()
			cfg.Name = "coord-1"
			cfg.DataDir = t.TempDir()
			cfg.NATSListen = "127.0.0.1:0"
			cfg.Gossip = cluster.FastConfig()
			cfg.Bootstrap = true
			cfg.FastRaft()
			cfg.NoPrefixRouting = !routing
			c, err := coordinator.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			clustertest.Run(t, c)
			for _, name := range []string{"worker-a", "worker-b"} {
				scfg := runner.DefaultConfig()
				scfg.ModelDir = dir
				scfg.ModelName = model
				scfg.Threads = 1
				scfg.MaxSeqs = 1
				e, err := runner.New(scfg, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { e.Close() })
				wcfg := worker.DefaultConfig()
				wcfg.Name = name
				wcfg.Models = []string{model}
				wcfg.Engine = e
				wcfg.Gossip = cluster.FastConfig()
				wcfg.Gossip.Join = []string{c.GossipAddr()}
				wcfg.MetaInterval = 50 * time.Millisecond
				w, err := worker.New(wcfg)
				if err != nil {
					t.Fatal(err)
				}
				clustertest.Run(t, w)
			}
			clustertest.Eventually(t, 10*time.Second, "2 ready workers", func() bool {
				n := 0
				for _, m := range c.Membership().Members() {
					if m.Meta.Role == cluster.RoleWorker && m.Meta.Ready {
						n++
					}
				}
				return n == 2
			})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			question := strings.Repeat("Tell me about the history of the Mac and its chips. ", 8)
			zero, six := 0.0, 6
			turn := func(id string, msgs ...openai.ChatMessage) *job.Job {
				return &job.Job{ID: id, Kind: job.KindChat, Model: model, Chat: &openai.ChatCompletionRequest{
					Model: model, Messages: msgs, MaxTokens: &six, Temperature: &zero}}
			}
			first := turn("turn-1", openai.ChatMessage{Role: "user", Content: openai.TextContent(question)})
			r1, err := submitTurn(ctx, c, first)
			if err != nil {
				t.Fatalf("first turn: %v", err)
			}
			if routing {
				keys := prefix.Chat(first.Chat)
				clustertest.Eventually(t, 5*time.Second, "prefix summary", func() bool { return c.PrefixKnown(r1.worker, model, keys[len(keys)-1]) })
			}
			r2, err := submitTurn(ctx, c, turn("turn-2",
				openai.ChatMessage{Role: "user", Content: openai.TextContent(question)},
				openai.ChatMessage{Role: "assistant", Content: openai.TextContent(r1.text)},
				openai.ChatMessage{Role: "user", Content: openai.TextContent("And what came next?")}))
			if err != nil {
				t.Fatalf("second turn: %v", err)
			}
			t.Logf("routing=%v: turn 1 on %s (prompt %d tokens), turn 2 on %s (prompt %d, cached %d); route stats %+v",
				routing, r1.worker, r1.usage.PromptTokens, r2.worker, r2.usage.PromptTokens, cachedTokens(r2.usage), c.RouteStats())
			if !routing {
				return
			}
			if r2.worker != r1.worker {
				t.Errorf("second turn served by %s, want %s (the first turn's worker)", r2.worker, r1.worker)
			}
			// The status shows the workers' KV pools (from their summaries).
			for _, n := range c.Status(ctx).Nodes {
				if n.Name == r1.worker && (n.KVBlocks == 0 || n.KVFreeBlocks == 0 || n.KVFreeBlocks > n.KVBlocks) {
					t.Errorf("status of %s: KV %d free of %d blocks, want a pool with room", n.Name, n.KVFreeBlocks, n.KVBlocks)
				}
			}
			if cachedTokens(r2.usage) == 0 {
				t.Errorf("second turn: cached_tokens 0, want the first turn's prompt prefix from the cache (usage %+v)", r2.usage)
			}
		})
	}
}

// TestRoutingTTFTBench measures what prefix routing saves: the time to the
// first token of a conversation's second turn (long shared prefix) with
// routing on and off, two one-slot workers running the real engine on a
// larger random test model. Run with MACPOOL_BENCH_ROUTING=1 (optional
// MACPOOL_BENCH_THREADS, default 2; MACPOOL_BENCH_CONVS, default 6).
func TestRoutingTTFTBench(t *testing.T) {
	if os.Getenv("MACPOOL_BENCH_ROUTING") == "" {
		t.Skip("set MACPOOL_BENCH_ROUTING=1 to measure")
	}
	threads, convs := 2, 6
	fmt.Sscan(os.Getenv("MACPOOL_BENCH_THREADS"), &threads)
	fmt.Sscan(os.Getenv("MACPOOL_BENCH_CONVS"), &convs)
	dir := t.TempDir()
	if err := testmodel.Write(dir, testmodel.Options{HiddenSize: 512, Layers: 8, Heads: 8, KVHeads: 4, HeadDim: 64, Intermediate: 1536, MaxPositions: 8192}); err != nil {
		t.Fatal(err)
	}
	const model = "bench"
	for _, routing := range []bool{true, false} {
		cfg := coordinator.DefaultConfig()
		cfg.Name = fmt.Sprintf("coord-%v", routing)
		cfg.DataDir = t.TempDir()
		cfg.NATSListen = "127.0.0.1:0"
		cfg.Gossip = cluster.FastConfig()
		cfg.Bootstrap = true
		cfg.FastRaft()
		cfg.NoPrefixRouting = !routing
		c, err := coordinator.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		clustertest.Run(t, c)
		for _, name := range []string{"worker-a", "worker-b"} {
			scfg := runner.DefaultConfig()
			scfg.ModelDir, scfg.ModelName, scfg.Threads, scfg.MaxSeqs = dir, model, threads, 1
			e, err := runner.New(scfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			wcfg := worker.DefaultConfig()
			wcfg.Name, wcfg.Models, wcfg.Engine = fmt.Sprintf("%s-%v", name, routing), []string{model}, e
			wcfg.Gossip = cluster.FastConfig()
			wcfg.Gossip.Join = []string{c.GossipAddr()}
			w, err := worker.New(wcfg)
			if err != nil {
				t.Fatal(err)
			}
			clustertest.Run(t, w)
		}
		clustertest.Eventually(t, 20*time.Second, "2 workers", func() bool {
			n := 0
			for _, m := range c.Membership().Members() {
				if m.Meta.Role == cluster.RoleWorker {
					n++
				}
			}
			return n == 2
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		zero, four := 0.0, 4
		turn := func(id string, msgs ...openai.ChatMessage) *job.Job {
			return &job.Job{ID: id, Kind: job.KindChat, Model: model, Chat: &openai.ChatCompletionRequest{
				Model: model, Messages: msgs, MaxTokens: &four, Temperature: &zero}}
		}
		var ttfts []time.Duration
		cached, prompt := 0, 0
		for conv := -1; conv < convs; conv++ { // conv -1 warms both workers up
			question := strings.Repeat(fmt.Sprintf("Conversation %d: tell me everything about the history of the Mac. ", conv), 90)
			first := turn("t1", openai.ChatMessage{Role: "user", Content: openai.TextContent(question)})
			r1, err := submitTurn(ctx, c, first)
			if err != nil {
				t.Fatalf("first turn: %v", err)
			}
			if routing {
				keys := prefix.Chat(first.Chat)
				clustertest.Eventually(t, 5*time.Second, "summary", func() bool { return c.PrefixKnown(r1.worker, model, keys[len(keys)-1]) })
			}
			second := turn("t2",
				openai.ChatMessage{Role: "user", Content: openai.TextContent(question)},
				openai.ChatMessage{Role: "assistant", Content: openai.TextContent(r1.text)},
				openai.ChatMessage{Role: "user", Content: openai.TextContent("And then?")})
			start := time.Now()
			s, err := c.Submit(ctx, second)
			if err != nil {
				t.Fatal(err)
			}
			var ttft time.Duration
			var usage *openai.Usage
			for {
				ev, err := s.Recv(ctx)
				if err != nil {
					break
				}
				if ev.Err != nil {
					t.Fatalf("second turn: %v", ev.Err)
				}
				if ttft == 0 && (ev.Text != "" || ev.Reasoning != "") {
					ttft = time.Since(start)
				}
				if ev.Usage != nil {
					usage = ev.Usage
				}
			}
			s.Close()
			if conv >= 0 {
				ttfts = append(ttfts, ttft)
				cached += cachedTokens(usage)
				prompt += usage.PromptTokens
			}
		}
		cancel()
		sorted := append([]time.Duration(nil), ttfts...)
		for i := range sorted {
			for j := i + 1; j < len(sorted); j++ {
				if sorted[j] < sorted[i] {
					sorted[i], sorted[j] = sorted[j], sorted[i]
				}
			}
		}
		t.Logf("routing=%v threads=%d: second-turn TTFT median %v (all %v), cached %d of %d prompt tokens, route stats %+v",
			routing, threads, sorted[len(sorted)/2].Round(time.Millisecond), ttfts, cached, prompt, c.RouteStats())
	}
}
