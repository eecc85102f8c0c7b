package api

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/job"
)

// A client that sends a streaming request and then stops reading is cut
// off once a write has been blocked for StreamWriteTimeout: the handler
// returns and closes the stream (cancelling the generation), instead of
// holding the job for as long as the client keeps the socket open.
func TestStreamWriteTimeoutCutsNonReadingClient(t *testing.T) {
	big := strings.Repeat("x", 64<<10)
	events := make([]job.Event, 400) // 25 MB: more than loopback socket buffers hold
	for i := range events {
		events[i] = job.Event{Worker: "mac-1", Text: big}
	}
	events[len(events)-1].FinishReason = "stop"
	svc := &fakeService{events: events, hold: true}
	_, hs := newTestServer(t, svc, func(c *Config) { c.StreamWriteTimeout = 300 * time.Millisecond })

	conn, err := net.Dial("tcp", strings.TrimPrefix(hs.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close() // open, never read, until the end of the test
	body := `{"model":"qwen3-8b","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)

	eventually(t, "stream opened", func() bool {
		svc.mu.Lock()
		defer svc.mu.Unlock()
		return len(svc.streams) == 1
	})
	st := svc.lastStream(t)
	start := time.Now()
	eventually(t, "the stream of a client that stopped reading to be closed", func() bool { return st.closes.Load() == 1 })
	t.Logf("closed %v after the stream opened", time.Since(start))
	if st.i >= len(events) {
		t.Errorf("all %d events were written to a client that never read", st.i)
	}
}
