package dashboard

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// TestBrowserCluster's in-process cluster: process-wide singletons
		// of the libraries, and memberlist's probe that Shutdown does not
		// wait for (as in the coordinator's tests).
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreAnyFunction("github.com/hashicorp/raft.(*NetworkTransport).listen"),
		goleak.IgnoreTopFunction("github.com/hashicorp/memberlist.(*Memberlist).probeNode"),
	)
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"default", func(c *Config) {}, ""},
		{"prefix slash", func(c *Config) { c.Prefix = "/dashboard/" }, `dashboard prefix "/dashboard/" must start with '/' and not end with '/'`},
		{"relative status", func(c *Config) { c.StatusPath = "status" }, `dashboard status path "status" must start with '/'`},
		{"relative metrics", func(c *Config) { c.MetricsPath = "metrics" }, `dashboard metrics path "metrics" must start with '/' or be empty`},
		{"relative drain", func(c *Config) { c.DrainPath = "drain" }, `dashboard drain path "drain" must start with '/' or be empty`},
		{"no drain", func(c *Config) { c.DrainPath = "" }, ""},
		{"no metrics", func(c *Config) { c.MetricsPath = "" }, ""},
		{"fast poll", func(c *Config) { c.PollInterval = 10 * time.Millisecond }, "dashboard poll interval 10ms must be at least 100ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.modify(&cfg)
			got := ""
			if err := cfg.Validate(); err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestHandler(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Title = `Office <pool>`
	d, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, p := range d.Patterns() {
		mux.Handle(p, d)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "api", http.StatusTeapot) })
	srv := httptest.NewServer(mux)
	defer srv.Close()

	tests := []struct {
		method, path string
		status       int
		ctype        string
		contains     string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8", `data-status="/v1/cluster/status"`},
		{"GET", "/dashboard", 200, "text/html; charset=utf-8", `<script src="/dashboard/static/app.js" defer></script>`},
		{"GET", "/dashboard/", 200, "text/html; charset=utf-8", `<title>Office &lt;pool&gt; · dashboard</title>`},
		{"HEAD", "/dashboard", 200, "text/html; charset=utf-8", ""},
		{"GET", "/dashboard/static/app.js", 200, "text/javascript; charset=utf-8", "getReader()"},
		{"GET", "/dashboard/static/app.css", 200, "text/css; charset=utf-8", "--accent"},
		{"GET", "/dashboard/static/", 404, "", ""},
		{"GET", "/dashboard/static/index.html", 404, "", ""},
		{"GET", "/dashboard/nope", 404, "", ""},
		{"POST", "/dashboard", 405, "", ""},
		{"GET", "/v1/models", 418, "", "api"}, // other routes stay with the API
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, srv.URL+tt.path, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status got %d, want %d", resp.StatusCode, tt.status)
			}
			if tt.ctype != "" && resp.Header.Get("Content-Type") != tt.ctype {
				t.Errorf("Content-Type got %q, want %q", resp.Header.Get("Content-Type"), tt.ctype)
			}
			if !strings.Contains(string(b), tt.contains) {
				t.Errorf("body lacks %q", tt.contains)
			}
		})
	}
}

// TestGin mounts the dashboard on a gin engine the way the api package
// could: gin.WrapH on the page routes.
func TestGin(t *testing.T) {
	gin.SetMode(gin.TestMode)
	d, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	r := gin.New()
	r.GET("/", gin.WrapH(d))
	r.GET("/dashboard", gin.WrapH(d))
	r.GET("/dashboard/*any", gin.WrapH(d))
	for path, want := range map[string]int{"/": 200, "/dashboard": 200, "/dashboard/": 200, "/dashboard/static/app.js": 200, "/dashboard/x": 404} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != want {
			t.Errorf("GET %s: got %d, want %d", path, rec.Code, want)
		}
	}
}
