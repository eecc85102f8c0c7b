package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Every client command finds its coordinator in $MACPOOL_COORDINATOR when
// -coordinator is not given (status used -http, top a URL, the admin
// commands host:port, and none read the environment).
func TestClientCommandsUseMacpoolCoordinator(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Method+" "+r.URL.Path] = true
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.HasSuffix(r.URL.Path, "/status"):
			io.WriteString(w, `{"coordinator":"c1","nodes":[]}`)
		case r.URL.Path == "/metrics":
			w.Header().Set("Content-Type", "text/plain")
		default:
			io.WriteString(w, `{"object":"list","data":[]}`)
		}
	}))
	defer srv.Close()
	t.Setenv("MACPOOL_COORDINATOR", strings.TrimPrefix(srv.URL, "http://"))
	t.Setenv("MACPOOL_SECRET_FILE", "none")
	for _, tc := range []struct {
		name string
		run  func(context.Context, []string, io.Writer, io.Writer) error
		args []string
		want string
	}{
		{"status", runStatus, nil, "GET /v1/cluster/status"},
		{"top", runTop, []string{"-once", "-interval", "10ms"}, "GET /v1/cluster/status"},
		{"keys list", runKeys, []string{"list"}, "GET /v1/admin/keys"},
		{"models ls", runModels, []string{"ls"}, "GET /v1/admin/models"},
	} {
		mu.Lock()
		clear(seen)
		mu.Unlock()
		var out, errOut strings.Builder
		err := tc.run(context.Background(), tc.args, &out, &errOut)
		mu.Lock()
		ok := seen[tc.want]
		got := make([]string, 0, len(seen))
		for k := range seen {
			got = append(got, k)
		}
		mu.Unlock()
		if !ok {
			t.Errorf("%s without -coordinator: requests %v (err %v, stderr %q), want %s at $MACPOOL_COORDINATOR", tc.name, got, err, errOut.String(), tc.want)
		}
	}
}
