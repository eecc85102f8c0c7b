package coordinator_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/worker"
)

// A client that sends a streaming request and then never reads the
// answer cannot stall the worker: the coordinator buffers the frames (a
// generation is bounded by max_tokens), the worker finishes and frees its
// only slot, and the next client is served while the slow one still
// hangs on a full TCP window.
func TestSlowClientDoesNotStallWorker(t *testing.T) {
	c, _ := startCoordinator(t, coordConfig(t, "c1", nil))
	w, _ := startWorker(t, "w1", c.GossipAddr(), 1, &worker.TestEngine{})
	waitWorkers(t, c, 1)
	hs := serveHTTP(t, c)

	// ~40k tokens of ~150 bytes of SSE each: far more than the socket
	// buffers of both ends hold.
	const n = 40000
	words := make([]string, n)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i)
	}
	body, _ := json.Marshal(map[string]any{
		"model": testModel, "stream": true, "max_tokens": n,
		"messages": []map[string]string{{"role": "user", "content": strings.Join(words, " ")}},
	})
	conn, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	if _, err := conn.Write(body); err != nil {
		t.Fatal(err)
	}
	// Read only the status line, then stop reading.
	status, err := bufio.NewReaderSize(conn, 64).ReadString('\n')
	if err != nil || !strings.Contains(status, "200") {
		t.Fatalf("status line %q: %v", status, err)
	}

	start := time.Now()
	eventually(t, 30*time.Second, "the worker finished the slow client's job", func() bool {
		return w.Served() == 1 && w.Running() == 0
	})
	t.Logf("worker free %v after the slow client stopped reading (%d tokens)", time.Since(start).Round(time.Millisecond), n)

	// The next client is served by the same one-slot worker.
	resp, err := http.Post(hs.URL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"`+testModel+`","messages":[{"role":"user","content":"next please"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Choices []struct {
			Message struct{ Content string }
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 || len(out.Choices) != 1 || out.Choices[0].Message.Content != "next please" {
		t.Fatalf("next client: status %d %+v %v", resp.StatusCode, out, err)
	}
	// The slow client's connection is still open and unread: the server
	// is blocked writing to it (closing it ends that handler).
	conn.SetReadDeadline(time.Now().Add(time.Millisecond))
	if _, err := conn.Read(make([]byte, 1)); err != nil {
		t.Fatalf("slow connection: %v, want unread data waiting", err)
	}
}
