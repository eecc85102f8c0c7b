package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/macpool/macpool/api"
	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/metrics"
)

// The coordinator is what the HTTP layer is built on; it implements the
// api interfaces without importing api.
var (
	_ api.Service       = (*coordinator.Coordinator)(nil)
	_ api.Resumer       = (*coordinator.Coordinator)(nil)
	_ api.KeyChecker    = (*coordinator.Coordinator)(nil)
	_ api.Admin         = (*coordinator.Coordinator)(nil)
	_ api.ResponseStore = (*coordinator.ResponseStore)(nil)
)

// One HTTP server serves everything on the coordinator's port, with
// api.Config's timeouts: the OpenAI API, the admin endpoints, the cluster
// status, /metrics and the dashboard share one router (its OpenAI 404 for
// the rest), and a client too slow with its headers is cut off after the
// configured ReadHeaderTimeout.
func TestCoordinatorHTTPServer(t *testing.T) {
	dir := t.TempDir()
	var f coordinatorFlags
	fs := newFlagSet("coordinator", io.Discard)
	f.register(fs)
	if err := parseFlags(fs, []string{"-name", "c1", "-http", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-nats-listen", "127.0.0.1:0",
		"-data-dir", filepath.Join(dir, "data"), "-fast-timeouts", "-no-discovery", "-secret-file", cluster.SecretFileNone,
		"-stream-write-timeout", "1234ms"}); err != nil {
		t.Fatal(err)
	}

	// The server's configuration: api's defaults, the flag's stream timeout.
	acfg, def := f.apiConfig("127.0.0.1:1"), api.DefaultConfig()
	if acfg.ReadHeaderTimeout != def.ReadHeaderTimeout || acfg.IdleTimeout != def.IdleTimeout || acfg.StreamWriteTimeout != 1234*time.Millisecond || acfg.ShutdownTimeout != 5*time.Second {
		t.Errorf("api config %+v: want the default header and idle timeouts, stream write 1.234s, shutdown 5s", acfg)
	}

	logger := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	g, gctx := errgroup.WithContext(ctx)
	var out strings.Builder
	c, ln, err := startCoordinator(gctx, g, &f, logger, &out)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := g.Wait(); err != nil {
			t.Errorf("coordinator: %v", err)
		}
	}()
	base := "http://" + ln.Addr().String()
	for _, tc := range []struct {
		path string
		want int
		body string
	}{
		{"/healthz", 200, `"ok"`},
		{"/v1/models", 200, `"object":"list"`},
		{"/v1/cluster/status", 200, `"coordinator":"c1"`},
		{"/v1/admin/keys", 200, `"object":"list"`},
		{"/v1/admin/models", 200, `"object":"list"`},
		{"/metrics", 200, "macpool_"},
		{"/", 200, `<body data-status="/v1/cluster/status"`},
		{"/dashboard", 200, `<body data-status="/v1/cluster/status"`},
		{"/nope", 404, `"type":"invalid_request_error"`},
	} {
		resp, err := http.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || !strings.Contains(string(b), tc.body) {
			t.Errorf("GET %s: got %d %.200q, want %d with %q", tc.path, resp.StatusCode, b, tc.want, tc.body)
		}
	}

	// The same server with a short header timeout, built as startCoordinator
	// builds it: the timeout reaches the listener.
	acfg.ReadHeaderTimeout = 100 * time.Millisecond
	srv, err := newHTTPServer(acfg, c, metrics.New(), logger)
	if err != nil {
		t.Fatal(err)
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g.Go(func() error { return srv.Serve(gctx, ln2) })
	conn, err := net.Dial("tcp", ln2.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	io.WriteString(conn, "GET /v1/cluster/status HTTP/1.1\r\nHost: x\r\n") // and never the blank line
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.Copy(io.Discard, bufio.NewReader(conn))
	var ne net.Error
	if took := time.Since(start); errors.As(err, &ne) && ne.Timeout() || took > 5*time.Second {
		t.Errorf("a client stuck in its headers was still connected after %v, want it cut after %v", took, acfg.ReadHeaderTimeout)
	}
}
