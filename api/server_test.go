package api

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/macpool/macpool/job"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"addr", func(c *Config) { c.Addr = "" }, "addr"},
		{"body", func(c *Config) { c.MaxBodyBytes = 10 }, "max body bytes 10"},
		{"header timeout", func(c *Config) { c.ReadHeaderTimeout = 0 }, "read header timeout"},
		{"idle", func(c *Config) { c.IdleTimeout = -time.Second }, "idle timeout"},
		{"shutdown", func(c *Config) { c.ShutdownTimeout = -1 }, "shutdown timeout"},
		{"probe", func(c *Config) { c.ProbeTimeout = 0 }, "probe timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.edit(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
			if _, err := New(cfg, &fakeService{}, nil); err == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
}

// TestServeShutdown runs the real listener: ctx cancel ends Serve, and an
// open stream is cut after ShutdownTimeout, which closes its job.
func TestServeShutdown(t *testing.T) {
	svc := &fakeService{events: []job.Event{{Worker: "w", Role: "assistant", Text: "..."}}, hold: true}
	cfg := DefaultConfig()
	cfg.ShutdownTimeout = 50 * time.Millisecond
	s, err := New(cfg, svc, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()

	resp, err := http.Post("http://"+ln.Addr().String()+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, 16)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatalf("first bytes: %v", err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after ctx cancel")
	}
	st := svc.lastStream(t)
	eventually(t, "stream closed by shutdown", func() bool { return st.closes.Load() == 1 })
	if err := s.Close(); err != nil {
		t.Errorf("Close after shutdown: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestCloseStopsServe(t *testing.T) {
	s, err := New(DefaultConfig(), &fakeService{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), ln) }()
	eventually(t, "server up", func() bool {
		resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	s.Close()
	s.Close()
	if err := <-done; err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
	// Serve after Close returns at once.
	ln2, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := s.Serve(context.Background(), ln2); err != nil {
		t.Fatalf("Serve on a closed server: %v", err)
	}
}
