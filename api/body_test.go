package api

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/macpool/macpool/job"
)

// slowBody opens a connection, sends a chat request's headers announcing
// size body bytes and then only sent of them, and keeps it open. The
// response (if any) arrives on the returned channel.
func slowBody(t *testing.T, addr string, size, sent int) <-chan *http.Response {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", size)
	if _, err := conn.Write(bytes.Repeat([]byte("{"), sent)); err != nil {
		t.Fatal(err)
	}
	out := make(chan *http.Response, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			close(out)
			return
		}
		resp.Body.Close()
		out <- resp
	}()
	return out
}

func chatOK(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Post(url+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"qwen3-8b","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("ordinary request while slow clients hold bodies: status %d, want 200", resp.StatusCode)
	}
}

// A client that stops part-way through its body gets 408 once
// BodyReadTimeout passes (it used to hold its connection, goroutine and
// buffer for as long as it kept the socket open).
func TestBodyReadTimeout(t *testing.T) {
	svc := &fakeService{events: []job.Event{{Worker: "mac-1", Text: "ok", FinishReason: "stop"}}}
	_, hs := newTestServer(t, svc, func(c *Config) { c.BodyReadTimeout = 300 * time.Millisecond })
	start := time.Now()
	got := slowBody(t, strings.TrimPrefix(hs.URL, "http://"), 1000, 9)
	chatOK(t, hs.URL)
	select {
	case resp, ok := <-got:
		if !ok || resp.StatusCode != http.StatusRequestTimeout {
			t.Fatalf("partial body: got %v, want 408", resp)
		}
		t.Logf("408 after %v", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("no answer 5 s after a 9-byte partial body (timeout 300ms)")
	}
}

// Bodies being read are bounded per server: slow clients that announce
// large bodies take the budget, the next large one gets 429 at once, and
// ordinary (small) requests are still served meanwhile.
func TestBodyBytesInFlightBound(t *testing.T) {
	svc := &fakeService{events: []job.Event{{Worker: "mac-1", Text: "ok", FinishReason: "stop"}}}
	s, hs := newTestServer(t, svc, func(c *Config) {
		c.MaxBodyBytes = 1 << 20
		c.MaxBodyBytesInFlight = 2 << 20
		c.SmallBodyBytes = 64 << 10
		c.BodyReadTimeout = 3 * time.Second
	})
	addr := strings.TrimPrefix(hs.URL, "http://")
	var held []<-chan *http.Response
	for range 2 {
		held = append(held, slowBody(t, addr, 1<<20, 256<<10))
	}
	eventually(t, "two slow bodies holding the budget", func() bool { return s.bodyBytes.Load() == 2<<20 })
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case resp, ok := <-slowBody(t, addr, 1<<20, 256<<10):
				if ok {
					codes[i] = resp.StatusCode
					if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
						t.Errorf("429 without Retry-After")
					}
				}
			case <-time.After(2 * time.Second):
			}
		}()
	}
	chatOK(t, hs.URL)
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusTooManyRequests {
			t.Errorf("large body %d past the budget: status %d, want 429 at once", i, c)
		}
	}
	for _, h := range held {
		select {
		case resp, ok := <-h:
			if !ok || resp.StatusCode != http.StatusRequestTimeout {
				t.Errorf("slow body holding the budget: got %v, want 408", resp)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("slow body holding the budget: no answer 10 s after it stalled (timeout 3 s)")
		}
	}
	if n := s.bodyBytes.Load(); n != 0 {
		t.Errorf("budget after all bodies ended: %d bytes held, want 0", n)
	}
	chatOK(t, hs.URL)
}
