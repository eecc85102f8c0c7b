package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	oai "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/engine/testmodel"
	"github.com/macpool/macpool/internal/clustertest"
	"github.com/macpool/macpool/worker"
)

// serveAPI serves the OpenAI API of c (no keys).
func serveAPI(t *testing.T, c *coordinator.Coordinator) string {
	t.Helper()
	srv, err := api.New(api.DefaultConfig(), c, clustertest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

// A stream whose coordinator died while its client was away continues on
// another coordinator, on every streaming protocol: the second replays the
// journal the first left in JetStream (the NATS server outlives the first
// coordinator here), finds nobody relaying the stream, and queues the job
// again from the journal's tokens. The client's two parts make exactly the
// uninterrupted text, with ids counting on across the coordinators.
func TestStreamResumeOnAnotherCoordinator(t *testing.T) {
	const n = 120
	words := clustertest.Words(n)
	for _, p := range []struct{ name, path, body string }{
		{"chat", "/v1/chat/completions", fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, clustertest.Model, n, words)},
		{"completions", "/v1/completions", fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"prompt":%q}`, clustertest.Model, n, words)},
		{"responses", "/v1/responses", fmt.Sprintf(`{"model":%q,"stream":true,"max_output_tokens":%d,"input":%q}`, clustertest.Model, n, words)},
		{"messages", "/v1/messages", fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, clustertest.Model, n, words)},
	} {
		t.Run(p.name, func(t *testing.T) {
			url := externalNATS(t)
			cfg1 := clustertest.CoordConfig(t, "coord-1", nil)
			cfg1.NATS = url
			c1, stop1 := clustertest.StartCoordinator(t, cfg1)
			cfg2 := clustertest.CoordConfig(t, "coord-2", []string{c1.GossipAddr()})
			cfg2.NATS = url
			c2, _ := clustertest.StartCoordinator(t, cfg2)
			w, _ := clustertest.StartWorker(t, "worker-1", c1.GossipAddr(), 2, &worker.TestEngine{TokenDelay: 10 * time.Millisecond})
			clustertest.WaitWorkers(t, c1, 1)
			clustertest.WaitWorkers(t, c2, 1)
			base1, base2 := serveAPI(t, c1), serveAPI(t, c2)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()

			part, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: base1 + p.path, Body: p.body, Stop: 20})
			if err != nil || part.Status != 200 || len(part.Frames) != 20 {
				t.Fatalf("first part: %v %+v", err, part)
			}
			c1.Kill()
			stop1()
			clustertest.Eventually(t, 5*time.Second, "the worker stopped the dead coordinator's job", func() bool { return w.Running() == 0 })
			rest, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: base2 + p.path, Body: p.body, LastEventID: part.Frames[19].ID})
			if err != nil || rest.Status != 200 {
				t.Fatalf("resume on coord-2: %v %+v", err, rest)
			}
			if _, err := clustertest.CheckIDs(append(part.Frames, rest.Frames...), 0); err != nil {
				t.Error(err)
			}
			if got := clustertest.FramesText(part.Frames) + clustertest.FramesText(rest.Frames); got != words {
				t.Errorf("text %q, want %q", got, words)
			}
			if !clustertest.Ended(rest.Frames) {
				t.Errorf("resumed stream did not end as its protocol ends")
			}
			// Served counts a job when its handler returns, just after the
			// last frame.
			clustertest.Eventually(t, 5*time.Second, "the worker to have served the first attempt and the taken-over one",
				func() bool { return w.Served() == 2 })
		})
	}
}

// A coordinator shut down (Close: it fails its streams with a 503) while
// its client is attached: the client gets the error in frames without an
// id, resumes on another coordinator with the last id it has, and gets the
// rest of the stream, not the error again.
func TestStreamResumeAfterCoordinatorShutdown(t *testing.T) {
	url := externalNATS(t)
	cfg1 := clustertest.CoordConfig(t, "coord-1", nil)
	cfg1.NATS = url
	c1, _ := clustertest.StartCoordinator(t, cfg1)
	cfg2 := clustertest.CoordConfig(t, "coord-2", []string{c1.GossipAddr()})
	cfg2.NATS = url
	c2, _ := clustertest.StartCoordinator(t, cfg2)
	clustertest.StartWorker(t, "worker-1", c1.GossipAddr(), 2, &worker.TestEngine{TokenDelay: 10 * time.Millisecond})
	clustertest.WaitWorkers(t, c1, 1)
	clustertest.WaitWorkers(t, c2, 1)
	base1, base2 := serveAPI(t, c1), serveAPI(t, c2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 120
	words := clustertest.Words(n)
	body := fmt.Sprintf(`{"model":%q,"stream":true,"max_tokens":%d,"messages":[{"role":"user","content":%q}]}`, clustertest.Model, n, words)
	var once sync.Once
	part, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: base1 + "/v1/chat/completions", Body: body, OnFrame: func(k int) {
		if k == 20 {
			once.Do(func() { go c1.Close() })
		}
	}})
	if err != nil || part.Status != 200 {
		t.Fatalf("first part: %v %+v", err, part)
	}
	last := ""
	for _, f := range part.Frames {
		if f.ID != "" {
			last = f.ID
		}
	}
	if clustertest.Ended(part.Frames) && clustertest.FramesText(part.Frames) == words {
		t.Fatalf("the stream finished before the coordinator closed")
	}
	if tail := part.Frames[len(part.Frames)-1]; tail.ID != "" || !strings.Contains(part.Frames[len(part.Frames)-2].Data, "shutting down") {
		t.Fatalf("want the shutdown error in frames without id at the end, got %+v", part.Frames[len(part.Frames)-2:])
	}
	rest, err := clustertest.Stream(ctx, clustertest.StreamRequest{URL: base2 + "/v1/chat/completions", Body: body, LastEventID: last})
	if err != nil || rest.Status != 200 {
		t.Fatalf("resume on coord-2: %v %+v", err, rest)
	}
	numbered := 0
	for _, f := range part.Frames {
		if f.ID != "" {
			numbered++
		}
	}
	if _, err := clustertest.CheckIDs(append(part.Frames[:numbered:numbered], rest.Frames...), 0); err != nil {
		t.Error(err)
	}
	if got := clustertest.FramesText(part.Frames[:numbered]) + clustertest.FramesText(rest.Frames); got != words {
		t.Errorf("text %q, want %q", got, words)
	}
	if !clustertest.Ended(rest.Frames) {
		t.Errorf("resumed stream did not end with [DONE]")
	}
}

// lastEventIDs is an openai-go middleware that records the id of every SSE
// event the client reads (openai-go's stream decoder drops ids): the retry
// path docs/api.md gives for openai-go.
type lastEventIDs struct {
	mu   sync.Mutex
	last string
}

func (l *lastEventIDs) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	resp, err := next(req)
	if err == nil && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		pr, pw := io.Pipe()
		body := resp.Body
		go func() {
			defer body.Close()
			sc := bufio.NewScanner(io.TeeReader(body, pw))
			sc.Buffer(make([]byte, 64<<10), 16<<20)
			for sc.Scan() {
				if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
					l.mu.Lock()
					l.last = id
					l.mu.Unlock()
				}
			}
			pw.CloseWithError(sc.Err())
		}()
		resp.Body = pr
	}
	return resp, err
}

func (l *lastEventIDs) get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last
}

// TestProcessesStreamResumeAfterKill is issue #17 item 8 with real
// processes: three coordinators (clustered JetStream), two real-engine
// workers, a streaming openai-go client on coord-1, kill -9 of coord-1
// mid-stream, the same request sent to coord-2 with Last-Event-ID. What
// the client got from both must be token for token the text of an
// uninterrupted run of the same seeded request (on coord-3).
func TestProcessesStreamResumeAfterKill(t *testing.T) {
	dir := t.TempDir()
	modelDir := filepath.Join(dir, realModel)
	if err := testmodel.Write(modelDir, testmodel.Options{}); err != nil {
		t.Fatalf("write test model: %v", err)
	}
	var coords []*proc
	join := ""
	for i := 1; i <= 3; i++ {
		args := []string{"coordinator", "--name", fmt.Sprintf("coord-%d", i), "--http", "127.0.0.1:0",
			"--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--nats-cluster", "127.0.0.1:0",
			"--data-dir", filepath.Join(dir, fmt.Sprint(i)), "--fast-timeouts", "--no-discovery", "--secret-file", "none"}
		if join != "" {
			args = append(args, "--join", join)
		}
		coords = append(coords, start(t, "coordinator", args...))
		join = coords[0].fields["gossip"]
	}
	for i := 1; i <= 2; i++ {
		start(t, "worker", "worker", "--name", fmt.Sprintf("worker-%d", i), "--join", join, "--gossip", "127.0.0.1:0",
			"--model", modelDir, "--backend", "cpu", "--threads", "1", "--slots", "2", "--fast-timeouts", "--no-discovery", "--secret-file", "none")
	}
	base := func(i int) string { return "http://" + coords[i].fields["http"] }
	waitFor(t, 60*time.Second, "3 raft voters and 2 ready workers", func() bool {
		st, err := getStatus(base(0))
		voters, workers := 0, 0
		for _, n := range st.Nodes {
			if n.Raft != "" {
				voters++
			}
			if n.Role == "worker" && n.Ready {
				workers++
			}
		}
		return err == nil && st.Leader != "" && voters == 3 && workers == 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	// Two requests, both on coord-1 when it dies: one choice, and two
	// choices (n = 2: seeds s and s+1, resumed per choice).
	reqs := []oai.ChatCompletionNewParams{{
		Model:         realModel,
		Messages:      []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Tell me a long story about a lighthouse keeper.")},
		MaxTokens:     oai.Int(400),
		Temperature:   oai.Float(0.9),
		Seed:          oai.Int(4242),
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
	}, {
		Model:         realModel,
		Messages:      []oai.ChatCompletionMessageParamUnion{oai.UserMessage("Describe the sea at night.")},
		MaxTokens:     oai.Int(150),
		Temperature:   oai.Float(0.8),
		Seed:          oai.Int(77),
		N:             oai.Int(2),
		StreamOptions: oai.ChatCompletionStreamOptionsParam{IncludeUsage: oai.Bool(true)},
	}}
	type run struct {
		text   []string // per choice
		finish []string
		usage  int64
		chunks int
		err    error
	}
	// read streams params from base b until the end; after atChunk chunks
	// it calls at (once) and goes on reading what still comes.
	read := func(b string, params oai.ChatCompletionNewParams, ids *lastEventIDs, lastID string, atChunk int, at func()) run {
		opts := []option.RequestOption{option.WithBaseURL(b + "/v1/"), option.WithMaxRetries(0)}
		if ids != nil {
			opts = append(opts, option.WithMiddleware(ids.middleware))
		}
		if lastID != "" {
			opts = append(opts, option.WithHeader("Last-Event-ID", lastID))
		}
		client := oai.NewClient(opts...)
		s := client.Chat.Completions.NewStreaming(ctx, params)
		defer s.Close()
		var r run
		for s.Next() {
			ch := s.Current()
			r.chunks++
			for _, c := range ch.Choices {
				for int(c.Index) >= len(r.text) {
					r.text, r.finish = append(r.text, ""), append(r.finish, "")
				}
				r.text[c.Index] += c.Delta.Content
				if c.FinishReason != "" {
					r.finish[c.Index] = c.FinishReason
				}
			}
			if ch.JSON.Usage.Valid() {
				r.usage = ch.Usage.CompletionTokens
			}
			if r.chunks == atChunk && at != nil {
				at()
			}
		}
		r.err = s.Err()
		return r
	}
	wants := make([]run, len(reqs))
	for i, p := range reqs {
		wants[i] = read(base(2), p, nil, "", 0, nil)
		if w := wants[i]; w.err != nil || len(w.finish) != int(max(1, p.N.Value)) || w.usage == 0 || w.chunks < 30 {
			t.Fatalf("uninterrupted run %d on coord-3: %+v", i, w)
		}
	}

	// Both streams on coord-1, started one after the other: the second
	// once the first has 10 chunks (a worker's first job may start late,
	// and started together the short stream could end before the long one
	// got going); kill -9 coord-1 once the second has 10 chunks too. The
	// first stream (400 tokens) is then still far from its end.
	firsts := make([]run, len(reqs))
	ids := make([]*lastEventIDs, len(reqs))
	var wg sync.WaitGroup
	next := make(chan struct{}) // closed when the previous stream has 10 chunks
	close(next)
	for i, p := range reqs {
		ids[i] = &lastEventIDs{}
		<-next
		mid := make(chan struct{})
		next = mid
		at := sync.OnceFunc(func() { close(mid) })
		if i == len(reqs)-1 {
			at = sync.OnceFunc(func() {
				coords[0].cmd.Process.Signal(syscall.SIGKILL)
				<-coords[0].done
				close(mid)
			})
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer at() // a stream that ended early does not hold the others up
			firsts[i] = read(base(0), p, ids[i], "", 10, at)
		}()
	}
	wg.Wait()
	for i, p := range reqs {
		first := firsts[i]
		if first.chunks < 10 || first.usage != 0 {
			t.Fatalf("request %d: the first part (%d chunks, finish %q, usage %d) was not cut mid-stream", i, first.chunks, first.finish, first.usage)
		}
		last := ids[i].get()
		if last == "" {
			t.Fatalf("request %d: no event id seen in the first part (%d chunks, err %v)", i, first.chunks, first.err)
		}
		t.Logf("request %d: coord-1 killed after %d chunks (client error: %v); resuming on coord-2 after id %s", i, first.chunks, first.err, last)
		resumedAt := time.Now()
		rest := read(base(1), p, &lastEventIDs{}, last, 0, nil)
		if rest.err != nil {
			t.Fatalf("request %d: resume on coord-2: %v (text so far %q)", i, rest.err, rest.text)
		}
		t.Logf("request %d: resumed stream: %d chunks in %v", i, rest.chunks, time.Since(resumedAt).Round(time.Millisecond))
		want := wants[i]
		for k := range want.text {
			got := ""
			if k < len(first.text) {
				got = first.text[k]
			}
			if k < len(rest.text) {
				got += rest.text[k]
			}
			if got != want.text[k] {
				t.Errorf("request %d choice %d: text of both parts differs from the uninterrupted run:\n got %q\nwant %q", i, k, got, want.text[k])
			}
		}
		finish := make([]string, len(want.finish))
		for k := range finish {
			for _, part := range [][]string{first.finish, rest.finish} {
				if k < len(part) && part[k] != "" {
					finish[k] = part[k]
				}
			}
		}
		if !slices.Equal(finish, want.finish) || rest.usage != want.usage {
			t.Errorf("request %d: finish %q usage %d, want %q %d", i, finish, rest.usage, want.finish, want.usage)
		}
	}
}
