package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/macpool/macpool/metrics"
)

func TestMountObservability(t *testing.T) {
	reg := metrics.New()
	reg.AddGeneratedTokens("mac-1", "m", 3)
	mux := http.NewServeMux()
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "api", http.StatusTeapot) }))
	if err := mountObservability(mux, reg); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for path, want := range map[string]string{
		"/metrics":   `macpool_generated_tokens_total{model="m",worker="mac-1"} 3`,
		"/":          `<body data-status="/v1/cluster/status"`,
		"/dashboard": `<body data-status="/v1/cluster/status"`,
		"/v1/models": "api",
	} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), want) {
			t.Errorf("GET %s: body lacks %q", path, want)
		}
	}
}

func TestDiscoverJoinDisabled(t *testing.T) {
	f := discoveryFlags{off: true}
	var cf clusterFlags
	err := f.discoverJoin(context.Background(), &cf, nil, io.Discard)
	if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "-join is required with -no-discovery") {
		t.Errorf("got %v, want a usage error asking for -join", err)
	}
}
