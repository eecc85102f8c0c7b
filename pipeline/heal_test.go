package pipeline

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/macpool/macpool/api/openai"
	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/runner"
)

// proxy is a TCP relay between two stages, which a test can cut (close
// every relayed connection), black-hole (keep them open and drop what
// they carry, in both directions) or shut (refuse new connections too).
type proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu     sync.Mutex
	pairs  []*relay
	refuse bool
	wg     sync.WaitGroup
}

type relay struct {
	a, b net.Conn
	mu   sync.Mutex
	hole bool
}

func (r *relay) holed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hole
}

func (r *relay) close() { r.a.Close(); r.b.Close() }

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: target}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		a, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			a.Close()
			continue
		}
		b, err := net.Dial("tcp", p.target)
		if err != nil {
			a.Close()
			continue
		}
		r := &relay{a: a, b: b}
		p.mu.Lock()
		p.pairs = append(p.pairs, r)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(r, a, b)
		go p.pipe(r, b, a)
	}
}

// pipe copies src to dst until either closes; black-holed, it reads on
// and drops the bytes (the sender sees a healthy socket, the receiver
// nothing).
func (p *proxy) pipe(r *relay, src, dst net.Conn) {
	defer p.wg.Done()
	defer r.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !r.holed() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// cut closes every relayed connection (a reset link).
func (p *proxy) cut() {
	p.mu.Lock()
	pairs := p.pairs
	p.pairs = nil
	p.mu.Unlock()
	for _, r := range pairs {
		r.close()
	}
}

// blackhole makes the relayed connections drop everything without
// closing; new connections are relayed as before.
func (p *proxy) blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.pairs {
		r.mu.Lock()
		r.hole = true
		r.mu.Unlock()
	}
}

// shut refuses new connections and cuts the current ones (a peer gone
// from the network).
func (p *proxy) shut() {
	p.mu.Lock()
	p.refuse = true
	p.mu.Unlock()
	p.cut()
}

// proxied starts a 3-stage pipeline whose link from stage 1 to stage 2
// runs through a proxy.
func proxied(t *testing.T, path string, rc runner.Config, epoch uint64, heal time.Duration) (*testPipeline, *proxy) {
	t.Helper()
	var px *proxy
	tp := startPipelineWith(t, newSecret(t), path, engine.Options{}, splits(3)[1], epoch, rc, func(i int, mc *MemberConfig) {
		if px == nil {
			px = startProxy(t, mc.Plan.Stages[2].Addr)
		}
		mc.Plan.Stages = slices.Clone(mc.Plan.Stages)
		mc.Plan.Stages[2].Addr = px.addr()
		mc.HealTimeout = heal
	})
	return tp, px
}

// untilLost runs j on the head as the coordinator runs a job whose
// worker hands it back: on ErrStageLost it resumes it there from the
// tokens it reported, until it ends. hit is called once, after 10 tokens.
// It returns all the tokens and how many times the job was resumed.
func untilLost(t *testing.T, h *Head, j *job.Job, hit func()) ([]int, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var got []int
	var once sync.Once
	resumes := 0
	for {
		var r *job.Resume
		if resumes > 0 {
			r = &job.Resume{Tokens: [][]int{slices.Clone(got)}}
		}
		base := len(got)
		g := generate(ctx, h, j, r, func(ids [][]int) {
			if base+len(ids[0]) >= 10 {
				once.Do(hit)
			}
		})
		if len(g.ids) > 0 {
			got = append(got, g.ids[0]...)
		}
		if g.err == nil {
			return got, resumes
		}
		if !errors.Is(g.err, ErrStageLost) {
			t.Fatalf("job failed with %v, want nil or ErrStageLost", g.err)
		}
		if resumes++; resumes > 5 {
			t.Fatalf("job lost %d times: %v", resumes, g.err)
		}
	}
}

// TestRingHeals: a link between two live stages breaks mid-stream — reset
// (the proxy closes it) or black-holed (the proxy drops everything and
// closes nothing). The job in flight fails with ErrStageLost; the ring is
// re-dialled on the same plan and epoch, and the job resumed on the same
// head from its tokens ends with the whole model's tokens; a later job
// runs too. A black hole is found within the peer timeout (5 s by
// default) through the pings. No member is lost.
func TestRingHeals(t *testing.T) {
	path := filepath.Join("..", "testdata", "hf", "qwen3")
	rc := fixtureRunner(path, engine.Options{})
	rc.MaxContext = 4096
	whole, err := runner.New(rc, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer whole.Close()
	V := whole.Model().VocabSize()
	jobs := []*job.Job{
		completion(randomTokens(81, 40, V), 300, func(r *openai.CompletionRequest) { r.Temperature = ptrTo(0.0) }),
		completion(randomTokens(82, 20, V), 300, func(r *openai.CompletionRequest) {
			r.Temperature, r.Seed, r.PresencePenalty = ptrTo(0.9), ptrTo(int64(4)), ptrTo(0.3)
		}),
		completion(randomTokens(83, 30, V), 20, func(r *openai.CompletionRequest) { r.Temperature = ptrTo(0.0) }),
	}
	want := runAll(t, whole, jobs, false)
	peerTimeout := DefaultConfig().PeerTimeout
	for k, how := range []string{"reset", "black hole"} {
		t.Run(how, func(t *testing.T) {
			tp, px := proxied(t, path, rc, uint64(500+k), 0)
			for i, j := range jobs[:2] {
				var t0 time.Time
				got, resumes := untilLost(t, tp.head, j, func() {
					t0 = time.Now()
					if how == "reset" {
						px.cut()
					} else {
						px.blackhole()
					}
				})
				if resumes == 0 {
					t.Fatalf("job %d: never lost its stage (did it end before the %s?)", i, how)
				}
				if !slices.Equal(got, want[i].ids[0]) {
					t.Errorf("job %d resumed %d times: %v, the whole model's %v", i, resumes, got, want[i].ids[0])
				}
				t.Logf("%s: job %d resumed %d times, done %v after the break", how, i, resumes, time.Since(t0).Round(time.Millisecond))
			}
			g := runAll(t, tp.head, jobs[2:], false)
			sameGenerations(t, g, want[2:])
			for i, m := range tp.members {
				if m.Err() != nil {
					t.Errorf("stage %d lost: %v", i, m.Err())
				}
				if gen := m.generation(); gen < 2 {
					t.Errorf("stage %d is on ring generation %d after two breaks", i, gen)
				}
			}
		})
	}

	// The black hole alone: how long until the head sees the break.
	t.Run("black hole detected", func(t *testing.T) {
		tp, px := proxied(t, path, rc, 510, 0)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var t0 time.Time
		var once sync.Once
		g := generate(ctx, tp.head, jobs[0], nil, func(ids [][]int) {
			if len(ids[0]) >= 10 {
				once.Do(func() { t0 = time.Now(); px.blackhole() })
			}
		})
		d := time.Since(t0)
		if !errors.Is(g.err, ErrStageLost) {
			t.Fatalf("job: %v, want ErrStageLost", g.err)
		}
		// The silence starts at the last byte through; allow the
		// break's trip round the ring and a loaded machine.
		if limit := peerTimeout + 3*time.Second; d > limit {
			t.Errorf("black hole found after %v, want within %v (peer timeout %v)", d, limit, peerTimeout)
		}
		t.Logf("black hole found after %v (peer timeout %v)", d.Round(time.Millisecond), peerTimeout)
	})
}

// TestRingGivesUp: a link that cannot be re-dialled (the peer's address
// refuses) is given up after HealTimeout: every member is lost for good
// (Lost, Err), jobs fail with ErrStageLost at once, and Head.Lost says so.
func TestRingGivesUp(t *testing.T) {
	path := filepath.Join("..", "testdata", "hf", "qwen3")
	rc := fixtureRunner(path, engine.Options{})
	const heal = 2 * time.Second
	tp, px := proxied(t, path, rc, 520, heal)
	if g := runAll(t, tp.head, []*job.Job{completion([]int{1, 2, 3}, 3, nil)}, false); len(g[0].ids[0]) != 3 {
		t.Fatalf("warm-up job: %v", g[0].ids)
	}
	t0 := time.Now()
	px.shut()
	for i, m := range tp.members {
		select {
		case <-m.Lost():
		case <-time.After(heal + 30*time.Second):
			t.Fatalf("stage %d still not lost %v after the link went", i, time.Since(t0))
		}
		if m.Err() == nil {
			t.Errorf("stage %d lost without an error", i)
		}
	}
	if d := time.Since(t0); d < heal {
		t.Errorf("gave up after %v, before the heal timeout %v", d, heal)
	}
	t.Logf("lost %v after the link went: %v", time.Since(t0).Round(time.Millisecond), tp.members[1].Err())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g := generate(ctx, tp.head, completion([]int{1, 2, 3}, 3, nil), nil, nil)
	if !errors.Is(g.err, ErrStageLost) || !tp.head.Lost() {
		t.Errorf("job after giving up: %v (lost %v), want ErrStageLost", g.err, tp.head.Lost())
	}
}
