package coordinator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/job"
	"github.com/macpool/macpool/worker"
)

// streamInfo returns the queue's stream info as seen through url.
func streamInfo(url, model string) (*jetstream.StreamInfo, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, cluster.StreamName(model))
	if err != nil {
		return nil, err
	}
	return s.Info(ctx)
}

// Three coordinators each run an embedded NATS server, clustered by routes
// learnt from gossip; the queue grows to three replicas as they join.
// Killing the Raft leader (and its NATS server) loses neither the API of
// the survivors nor a request that was waiting in the queue.
func TestEmbeddedNATSClusterSurvivesLeaderKill(t *testing.T) {
	start := time.Now()
	coords := make([]*coordinator.Coordinator, 3)
	kills := make([]func(), 3)
	var join []string
	for i := range coords {
		cfg := coordConfig(t, fmt.Sprintf("coord-%d", i), join)
		cfg.NATSCluster = "127.0.0.1:0"
		c, err := coordinator.New(cfg)
		if err != nil {
			t.Fatalf("coord-%d: %v", i, err)
		}
		coords[i] = c
		stop := runNode(t, c)
		kills[i] = func() { c.Kill(); stop() }
		join = []string{coords[0].GossipAddr()}
	}
	// One slot per worker; jobs named "busy" hold their slot until the
	// gate opens, so that a third job must wait in the queue.
	eng := &gateEngine{gate: make(chan struct{}), entered: make(chan struct{}, 2)}
	startWorker(t, "worker-1", coords[1].GossipAddr(), 1, eng)
	startWorker(t, "worker-2", coords[2].GossipAddr(), 1, eng)
	for _, c := range coords {
		waitWorkers(t, c, 2)
	}
	eventually(t, 30*time.Second, "queue with 3 current replicas", func() bool {
		info, err := streamInfo(coords[0].NATSURL(), testModel)
		if err != nil || info.Config.Replicas != 3 || info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current {
				return false
			}
		}
		return true
	})
	eventually(t, 10*time.Second, "3 raft voters", func() bool {
		for _, c := range coords {
			if c.IsLeader() && len(c.RaftServers()) == 3 {
				return true
			}
		}
		return false
	})
	leader := -1
	for i, c := range coords {
		if c.IsLeader() {
			leader = i
		}
	}
	info, _ := streamInfo(coords[0].NATSURL(), testModel)
	t.Logf("cluster ready after %v; raft leader %s, queue leader %s", time.Since(start), coords[leader].Name(), info.Cluster.Leader)
	var survivors []*coordinator.Coordinator
	for i, c := range coords {
		if i != leader {
			survivors = append(survivors, c)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Occupy both slots, then queue a third job.
	long := "busy " + strings.Repeat("a ", 20)
	var busy []interface{ Close() error }
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		s, err := survivors[i].Submit(ctx, chatJob(fmt.Sprint("busy-", i), "", long, 100))
		if err != nil {
			t.Fatal(err)
		}
		busy = append(busy, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := collect(ctx, s)
			if err != nil || r.err != nil {
				t.Errorf("busy job %d: %+v %v", i, r, err)
			}
		}()
	}
	for i := 0; i < 2; i++ {
		select {
		case <-eng.entered:
		case <-ctx.Done():
			t.Fatal("the busy jobs did not start")
		}
	}
	waiting, err := survivors[0].Submit(ctx, chatJob("waiting", "", "queued before the kill", 100))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the job queued", func() bool { return queued(t, survivors[0].NATSURL(), testModel) == 1 })

	killed := time.Now()
	kills[leader]()
	close(eng.gate)
	t.Logf("killed %s (raft leader) in %v", coords[leader].Name(), time.Since(killed))

	// The survivors' API answers.
	for _, c := range survivors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := submit(ctx, c, chatJob("after-kill", "", "still here", 10))
			d := time.Since(killed)
			if err != nil || r.err != nil || r.text != "still here" {
				t.Errorf("%s after the kill: %+v %v", c.Name(), r, err)
			}
			t.Logf("%s answered %v after the kill", c.Name(), d)
			if d > 10*time.Second {
				t.Errorf("%s answered %v after the kill, want < 10s", c.Name(), d)
			}
		}()
	}
	r, err := collect(ctx, waiting)
	if err != nil || r.err != nil || r.text != "queued before the kill" {
		t.Fatalf("job queued before the kill: %+v %v", r, err)
	}
	t.Logf("queued job finished %v after the kill", time.Since(killed))
	wg.Wait()
	eventually(t, 10*time.Second, "new raft leader", func() bool {
		for _, c := range survivors {
			if c.IsLeader() {
				return true
			}
		}
		return false
	})
	for _, s := range busy {
		s.Close()
	}
}

// gateEngine is the test engine; a job whose prompt starts with "busy"
// reports on entered and waits for gate to close before answering.
type gateEngine struct {
	worker.TestEngine
	gate    chan struct{}
	entered chan struct{}
}

func (e *gateEngine) GenerateResume(ctx context.Context, job *job.Job, r *job.Resume, emit func(*job.Event, []int) error) error {
	if c := job.Chat.Messages[0].Content; c != nil && strings.HasPrefix(c.Text, "busy") {
		e.entered <- struct{}{}
		select {
		case <-e.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return e.TestEngine.GenerateResume(ctx, job, r, emit)
}
