package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/job"
)

// Tests of the sleep state machine (sleep.go) with a fake power source in
// place of IOKit, real workers, an in-process JetStream NATS server and a
// fake coordinator (sleepCoord: it queues jobs the way the coordinator does
// and answers the worker's frames), and a gossip observer.

func sleepLogger(t testing.TB) *slog.Logger {
	if os.Getenv("MACPOOL_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func sleepEventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

func sleepWords(n int) string {
	ws := make([]string, n)
	for i := range ws {
		ws[i] = fmt.Sprintf("w%d", i)
	}
	return strings.Join(ws, " ")
}

// fakePower is a powerSource driven by the test.
type fakePower struct {
	handle func(powerNotice)
}

func (f *fakePower) start(h func(powerNotice)) error { f.handle = h; return nil }
func (f *fakePower) close() error                    { return nil }

// powerAnswer is what the guard answered to a notice.
type powerAnswer struct {
	answers int // how many times it answered (must be 1 for can/will-sleep)
	allow   bool
	after   time.Duration // from the notice to the answer
}

// send delivers msg as the IOKit callback would (synchronously) and
// returns the answer.
func (f *fakePower) send(msg powerMessage) powerAnswer {
	var mu sync.Mutex
	var a powerAnswer
	start := time.Now()
	n := powerNotice{msg: msg}
	if msg == powerCanSleep || msg == powerWillSleep {
		n.reply = func(allow bool) error {
			mu.Lock()
			defer mu.Unlock()
			a.answers++
			a.allow, a.after = allow, time.Since(start)
			return nil
		}
	}
	f.handle(n)
	mu.Lock()
	defer mu.Unlock()
	return a
}

// sleepCoord is the coordinator side of the job protocol: a JetStream work
// queue for model "m" and the reply subjects of the jobs it queued.
type sleepCoord struct {
	t   *testing.T
	url string
	nc  *nats.Conn
	js  jetstream.JetStream

	mu   sync.Mutex
	jobs map[string]*sleepJob
}

type sleepJob struct {
	mu      sync.Mutex
	started time.Time // when the worker's start frame came
	worker  string
	text    strings.Builder
	end     byte // the last frame's kind; 0 while running
	done    chan struct{}
}

func (j *sleepJob) state() (worker, text string, end byte, started time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.worker, j.text.String(), j.end, j.started
}

func newSleepCoord(t *testing.T) *sleepCoord {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// As coordinator/service.go makes them (memory storage, one replica).
	name := cluster.StreamName("m")
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{cluster.JobsFilter("m")},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.MemoryStorage,
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctx, name, jetstream.ConsumerConfig{
		Durable: cluster.ConsumerName, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 5 * time.Second, MaxWaiting: 512, MaxAckPending: -1,
	}); err != nil {
		t.Fatal(err)
	}
	return &sleepCoord{t: t, url: ns.ClientURL(), nc: nc, js: js, jobs: map[string]*sleepJob{}}
}

// submit queues a chat job echoing text (max tokens n) and records its frames.
func (c *sleepCoord) submit(id, text string, n int) *sleepJob {
	c.t.Helper()
	j := &sleepJob{done: make(chan struct{})}
	reply := cluster.ReplySubject("fake", id)
	sub, err := c.nc.Subscribe(reply, func(m *nats.Msg) {
		f, err := cluster.ParseFrame(m.Data)
		if err != nil {
			return
		}
		j.mu.Lock()
		switch f.Kind {
		case cluster.FrameStart:
			j.started, j.worker = time.Now(), string(f.Payload)
		case cluster.FrameEvent:
			var ev cluster.Event
			if json.Unmarshal(f.Payload, &ev) == nil {
				j.text.WriteString(ev.Text)
			}
		case cluster.FrameEnd, cluster.FrameError, cluster.FrameHandoff:
			if j.end == 0 {
				j.end = f.Kind
				close(j.done)
			}
		}
		j.mu.Unlock()
		if m.Reply != "" {
			m.Respond([]byte("ok"))
		}
	})
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { sub.Unsubscribe() })
	job := chat(text, n)
	job.ID = id
	b, err := json.Marshal(cluster.Job{Job: *job})
	if err != nil {
		c.t.Fatal(err)
	}
	msg := &nats.Msg{Subject: cluster.JobsSubject("m", "k"), Header: nats.Header{}, Data: b}
	msg.Header.Set(cluster.HeaderReply, reply)
	msg.Header.Set(cluster.HeaderJob, id)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.js.PublishMsg(ctx, msg); err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.jobs[id] = j
	c.mu.Unlock()
	return j
}

func sleepWorkerConfig(t *testing.T, natsURL string, eng Engine, join ...string) Config {
	cfg := DefaultConfig()
	cfg.Name = "w1"
	cfg.Models = []string{"m"}
	cfg.Engine = eng
	cfg.NATSURL = natsURL
	cfg.Gossip = cluster.FastConfig()
	cfg.Gossip.Join = join
	cfg.MetaInterval = 50 * time.Millisecond
	cfg.PingInterval = 100 * time.Millisecond
	cfg.Logger = sleepLogger(t)
	return cfg
}

// serveGuarded runs g.Serve with a first worker made from cfg (renewed
// from cfg after a wake) until the returned stop is called.
func serveGuarded(t *testing.T, g *SleepGuard, cfg Config) (first *Worker, stop func()) {
	t.Helper()
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- g.Serve(ctx, w, func() (*Worker, error) { return New(cfg) }, func(ctx context.Context, w *Worker) error { return w.Run(ctx) })
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("serve: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("Serve did not return within 20s of its ctx ending")
			}
		})
	}
	t.Cleanup(stop)
	return w, stop
}

// serving is the worker the guard serves now (nil while asleep).
func (g *SleepGuard) serving() *Worker {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.w
}

func sleepObserver(t *testing.T) *cluster.Membership {
	t.Helper()
	c := cluster.FastConfig()
	c.Name = "observer"
	c.Meta = cluster.Meta{Role: cluster.RoleCoordinator}
	m, err := cluster.New(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func TestSleepConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*SleepConfig)
		want string
	}{
		{"default", func(*SleepConfig) {}, ""},
		{"negative drain", func(c *SleepConfig) { c.DrainTimeout = -time.Second }, "sleep drain timeout -1s must not be negative"},
		{"ack before drain", func(c *SleepConfig) { c.DrainTimeout, c.AckTimeout = 10*time.Second, 10*time.Second }, "sleep acknowledgement timeout 10s must exceed the sleep drain timeout 10s"},
		{"ack too late", func(c *SleepConfig) { c.AckTimeout = 29 * time.Second }, "at most 25s"},
		{"backoff", func(c *SleepConfig) { c.RejoinBackoff = 0 }, "rejoin backoff 0s must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultSleepConfig()
			tc.edit(&c)
			err := c.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// Without a worker every sleep is allowed at once; a worker handed to
// Serve while the machine sleeps is closed unused, and the wake makes a
// new one that runs.
func TestSleepBeforeServe(t *testing.T) {
	fp := &fakePower{}
	g, err := newSleepGuard(SleepConfig{DrainTimeout: time.Second, AckTimeout: 2 * time.Second, RejoinBackoff: 10 * time.Millisecond, Logger: sleepLogger(t)}, fp)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if a := fp.send(powerCanSleep); a.answers != 1 || !a.allow {
		t.Fatalf("idle sleep without a worker: got %+v, want one allow", a)
	}
	if a := fp.send(powerWillNotSleep); a.answers != 0 {
		t.Fatalf("will-not-sleep: got %+v, want no answer", a)
	}
	if a := fp.send(powerWillSleep); a.answers != 1 || !a.allow || a.after > time.Second {
		t.Fatalf("forced sleep without a worker: got %+v, want one allow at once", a)
	}

	obs := sleepObserver(t)
	cfg := sleepWorkerConfig(t, "nats://127.0.0.1:1", &TestEngine{}, obs.Addr())
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var ran []*Worker
	renewed := 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- g.Serve(ctx, first, func() (*Worker, error) {
			mu.Lock()
			renewed++
			fail := renewed == 1 // the first rejoin fails (network not back yet)
			mu.Unlock()
			if fail {
				return nil, fmt.Errorf("join: network is unreachable")
			}
			return New(cfg)
		}, func(ctx context.Context, w *Worker) error {
			mu.Lock()
			ran = append(ran, w)
			mu.Unlock()
			<-ctx.Done()
			return w.Close()
		})
	}()
	// The first worker is closed, not run: it left gossip.
	sleepEventually(t, 10*time.Second, "first worker left gossip", func() bool { return obs.LeftGracefully("w1") })
	mu.Lock()
	if len(ran) != 0 || renewed != 0 {
		t.Fatalf("before the wake: ran %d workers, renewed %d times; want none", len(ran), renewed)
	}
	mu.Unlock()
	fp.send(powerHasPoweredOn)
	sleepEventually(t, 10*time.Second, "a new worker running after the wake", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == 1 && ran[0] != first && renewed == 2
	})
	sleepEventually(t, 10*time.Second, "the new worker in gossip", func() bool { _, ok := obs.Member("w1"); return ok })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after ctx ended")
	}
}

// The whole cycle with a real worker: idle sleep is allowed while idle and
// vetoed while a job runs; a forced sleep hands the running job off,
// leaves gossip and only then is acknowledged; a job queued while asleep
// waits; after the wake a new worker under the same name serves it.
func TestSleepDrainsAndWakes(t *testing.T) {
	fc := newSleepCoord(t)
	obs := sleepObserver(t)
	fp := &fakePower{}
	scfg := SleepConfig{DrainTimeout: 200 * time.Millisecond, AckTimeout: 5 * time.Second, RejoinBackoff: 50 * time.Millisecond, Logger: sleepLogger(t)}
	g, err := newSleepGuard(scfg, fp)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	cfg := sleepWorkerConfig(t, fc.url, &TestEngine{TokenDelay: 20 * time.Millisecond}, obs.Addr())
	w1, stop := serveGuarded(t, g, cfg)
	ready := func() bool {
		m, ok := obs.Member("w1")
		return ok && m.Meta.Ready && !m.Meta.Leaving
	}
	sleepEventually(t, 15*time.Second, "w1 ready in gossip", ready)

	if a := fp.send(powerCanSleep); a.answers != 1 || !a.allow {
		t.Fatalf("idle sleep while idle: got %+v, want one allow", a)
	}

	const n = 200 // 4 s at 20 ms a token
	j1 := fc.submit("j1", sleepWords(n), n)
	sleepEventually(t, 15*time.Second, "j1 generating on w1", func() bool {
		_, text, _, _ := j1.state()
		return w1.Running() == 1 && text != ""
	})
	if a := fp.send(powerCanSleep); a.answers != 1 || a.allow {
		t.Fatalf("idle sleep while a job runs: got %+v, want one veto", a)
	}

	a := fp.send(powerWillSleep)
	if a.answers != 1 || !a.allow {
		t.Fatalf("forced sleep: got %+v, want one allow", a)
	}
	if a.after >= scfg.AckTimeout {
		t.Fatalf("forced sleep acknowledged after %v, want before the %v deadline (the job stops at its drain deadline)", a.after, scfg.AckTimeout)
	}
	// Before the acknowledgement: the job was handed back, the worker
	// stopped and left gossip.
	worker, text, end, _ := j1.state()
	if end != cluster.FrameHandoff || worker != "w1" {
		t.Fatalf("j1 at the acknowledgement: last frame %q from %q, want a handoff from w1", end, worker)
	}
	if text == "" || text == sleepWords(n) || !strings.HasPrefix(sleepWords(n), text) {
		t.Fatalf("j1 text before the handoff %q: want a proper prefix of the answer", text)
	}
	if !w1.Draining() {
		t.Fatal("w1 not draining after the forced sleep")
	}
	sleepEventually(t, 5*time.Second, "no worker serving", func() bool { return g.serving() == nil })
	sleepEventually(t, 5*time.Second, "w1 gone from gossip", func() bool { _, ok := obs.Member("w1"); return !ok })
	if !obs.LeftGracefully("w1") {
		t.Fatal("w1 left gossip without a graceful leave")
	}
	t.Logf("forced sleep acknowledged %v after the notice (drain timeout %v)", a.after.Round(time.Millisecond), scfg.DrainTimeout)

	// Asleep: idle sleep is allowed, a queued job waits for the wake.
	j2 := fc.submit("j2", "a b c", 3)
	if a := fp.send(powerCanSleep); a.answers != 1 || !a.allow {
		t.Fatalf("idle sleep while asleep: got %+v, want one allow", a)
	}
	if _, _, end, started := j2.state(); !started.IsZero() || end != 0 {
		t.Fatalf("j2 started while asleep")
	}
	woke := time.Now()
	if a := fp.send(powerHasPoweredOn); a.answers != 0 {
		t.Fatalf("wake: got %+v, want no answer", a)
	}
	select {
	case <-j2.done:
	case <-time.After(20 * time.Second):
		t.Fatal("j2 not served within 20s of the wake")
	}
	worker, text, end, started := j2.state()
	if end != cluster.FrameEnd || worker != "w1" || text != "a b c" {
		t.Fatalf("j2: last frame %q from %q text %q, want the end from w1 with %q", end, worker, text, "a b c")
	}
	if started.Before(woke) {
		t.Fatalf("j2 started %v before the wake", woke.Sub(started))
	}
	sleepEventually(t, 10*time.Second, "w1 ready in gossip again", ready)
	if w := g.serving(); w == nil || w == w1 {
		t.Fatalf("serving %p after the wake, want a new worker (first was %p)", w, w1)
	}
	t.Logf("served again %v after the wake", started.Sub(woke).Round(time.Millisecond))
	stop()
}

// hangEngine emits one token and then ignores cancellation until release
// is closed: a stuck engine must not keep the machine awake.
type hangEngine struct{ release chan struct{} }

func (e *hangEngine) Generate(ctx context.Context, j *job.Job, emit func(*job.Event) error) error {
	if err := emit(&job.Event{Role: "assistant", Text: "stuck"}); err != nil {
		return err
	}
	<-e.release
	return ctx.Err()
}

// A forced sleep is acknowledged at AckTimeout even when a job ignores
// its cancellation; the job is handed off once it finally stops.
func TestSleepAckDeadlineWithHungJob(t *testing.T) {
	fc := newSleepCoord(t)
	fp := &fakePower{}
	scfg := SleepConfig{DrainTimeout: 100 * time.Millisecond, AckTimeout: 700 * time.Millisecond, RejoinBackoff: 50 * time.Millisecond, Logger: sleepLogger(t)}
	g, err := newSleepGuard(scfg, fp)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	eng := &hangEngine{release: make(chan struct{})}
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(eng.release) }) }
	defer release()
	w1, stop := serveGuarded(t, g, sleepWorkerConfig(t, fc.url, eng))
	j1 := fc.submit("j1", "x y z", 3)
	sleepEventually(t, 15*time.Second, "j1 running", func() bool {
		_, text, _, _ := j1.state()
		return w1.Running() == 1 && text == "stuck"
	})
	a := fp.send(powerWillSleep)
	if a.answers != 1 || !a.allow {
		t.Fatalf("forced sleep: got %+v, want one allow", a)
	}
	// Not before the deadline (the drain could not finish), and not much
	// after it (slack for a loaded machine).
	if a.after < scfg.AckTimeout || a.after > scfg.AckTimeout+3*time.Second {
		t.Fatalf("acknowledged after %v, want at the %v deadline", a.after, scfg.AckTimeout)
	}
	if w1.Running() != 1 {
		t.Fatalf("running %d at the acknowledgement, want the hung job still running", w1.Running())
	}
	if _, _, end, _ := j1.state(); end != 0 {
		t.Fatalf("j1 ended (%q) while its engine hangs", end)
	}
	release()
	select {
	case <-j1.done:
	case <-time.After(15 * time.Second):
		t.Fatal("j1 not handed off after its engine returned")
	}
	if _, _, end, _ := j1.state(); end != cluster.FrameHandoff {
		t.Fatalf("j1 ended with %q, want a handoff", end)
	}
	sleepEventually(t, 10*time.Second, "worker stopped", func() bool { return g.serving() == nil })
	stop() // while asleep: Serve returns nil
	t.Logf("acknowledged %v after the notice with a hung job (deadline %v)", a.after.Round(time.Millisecond), scfg.AckTimeout)
}
