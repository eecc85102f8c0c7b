package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestProcessesSlowBodies points 100 clients at a coordinator process, each
// announcing a 16 MB body, sending 8 MB of it and stopping, while ordinary
// requests keep being sent: the ordinary requests are served, large bodies
// past the coordinator's in-flight bound get 429 at once, the stalled ones
// 408 after --body-read-timeout, and the coordinator's memory stays
// bounded. (Before: RSS went from 81 MB to 1.17 GB and the connections
// stayed open for as long as the clients kept them.)
func TestProcessesSlowBodies(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("reads the coordinator's RSS from /proc")
	}
	dir := t.TempDir()
	coord := start(t, "coordinator", "coordinator", "--name", "coord-1", "--http", "127.0.0.1:0",
		"--gossip", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "coord"),
		"--fast-timeouts", "--no-discovery", "--body-read-timeout", "4s")
	start(t, "worker", "worker", "--name", "worker-1", "--join", coord.fields["gossip"], "--gossip", "127.0.0.1:0",
		"--model", model, "--backend", "test", "--slots", "4", "--fast-timeouts", "--no-discovery")
	base := "http://" + coord.fields["http"]
	waitStatus(t, base, func(s string) bool { return strings.Count(s, `"ready":true`) == 1 })
	rss0 := rssMB(t, coord.cmd.Process.Pid)

	const clients, size, sent = 100, 16 << 20, 8 << 20
	var codes sync.Map // status -> count
	var wg sync.WaitGroup
	var stalled atomic.Int64
	chunk := bytes.Repeat([]byte("{"), 256<<10)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", coord.fields["http"])
			if err != nil {
				t.Error(err)
				return
			}
			defer conn.Close()
			fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
			for n := 0; n < sent; n += len(chunk) {
				if _, err := conn.Write(chunk); err != nil {
					break // refused: the coordinator answered and closed
				}
			}
			stalled.Add(1)
			conn.SetReadDeadline(time.Now().Add(20 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			code := 0
			if err == nil {
				code = resp.StatusCode
			}
			v, _ := codes.LoadOrStore(code, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	peak := 0
	served := 0
	for stalled.Load() < clients || served < 5 {
		if ctx.Err() != nil {
			t.Fatalf("slow clients not all stalled (%d) or ordinary requests not served (%d)", stalled.Load(), served)
		}
		chatOnce(ctx, t, base, fmt.Sprintf("ordinary %d", served))
		served++
		peak = max(peak, rssMB(t, coord.cmd.Process.Pid))
	}
	for range 20 { // while the stalled bodies are held
		peak = max(peak, rssMB(t, coord.cmd.Process.Pid))
		chatOnce(ctx, t, base, "still served")
		time.Sleep(50 * time.Millisecond) // sampling interval
	}
	wg.Wait()
	got := map[int]int64{}
	codes.Range(func(k, v any) bool { got[k.(int)] = v.(*atomic.Int64).Load(); return true })
	t.Logf("coordinator RSS %d MB before, peak %d MB with %d slow clients; answers %v; %d ordinary requests served meanwhile", rss0, peak, clients, got, served+20)
	if got[http.StatusTooManyRequests] == 0 || got[http.StatusRequestTimeout] == 0 || got[http.StatusTooManyRequests]+got[http.StatusRequestTimeout] != clients {
		t.Errorf("answers %v: want every slow client answered 429 (past the bound) or 408 (stalled holding it)", got)
	}
	if peak > rss0+300 {
		t.Errorf("coordinator RSS peaked at %d MB (from %d MB): want it bounded by the in-flight limit", peak, rss0)
	}
}

// rssMB reads a process's resident set size in MB.
func rssMB(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.Atoi(f[1])
			return kb >> 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}
