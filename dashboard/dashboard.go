// Package dashboard is the coordinator's web page: the cluster's nodes
// (hardware, version, uptime, models, slots busy, KV cache free, tokens/s,
// a drain button per worker), models (size, quantization, context,
// placement), queues, queue wait, request and error rates, how the cluster
// is secured, the recent failed requests, and a chat playground that
// streams from the OpenAI API.
//
// The page is static HTML, JavaScript and CSS embedded in the binary (no
// build step, no dependencies). It polls the coordinator's status endpoint
// (with the API key typed into the page) and the Prometheus exposition (for
// tokens/s and latency quantiles) once a second; all of it runs in the
// browser, so the handler only serves files. Every value is put into the
// page as text, never as HTML: node names, model names and error messages
// come from the cluster and its clients.
package dashboard

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// Config says where the page finds the coordinator's endpoints (paths on the
// same origin) and how often it polls.
type Config struct {
	// Prefix is where the page is mounted ("/dashboard"); Handler also
	// serves the page at "/" when Root is set.
	Prefix string
	Root   bool
	// StatusPath serves the cluster status JSON (coordinator.StatusPath).
	StatusPath string
	// MetricsPath serves the Prometheus exposition ("" = no tokens/s and
	// error counters on the page).
	MetricsPath string
	// ChatPath and ModelsPath are the OpenAI endpoints of the playground.
	ChatPath   string
	ModelsPath string
	// DrainPath is the admin drain endpoint the page's drain buttons
	// post to (with the API key typed into the page, which must be an
	// admin key); "" hides the buttons.
	DrainPath string
	// PollInterval is how often the page refreshes.
	PollInterval time.Duration
	// Title is shown in the page header.
	Title string
}

// DefaultConfig returns the paths the coordinator serves.
func DefaultConfig() Config {
	return Config{
		Prefix:       "/dashboard",
		Root:         true,
		StatusPath:   "/v1/cluster/status",
		MetricsPath:  "/metrics",
		ChatPath:     "/v1/chat/completions",
		ModelsPath:   "/v1/models",
		DrainPath:    "/v1/admin/drain",
		PollInterval: time.Second,
		Title:        "macpool",
	}
}

// Validate checks cfg; messages name the violated constraint.
func (c Config) Validate() error {
	if !strings.HasPrefix(c.Prefix, "/") || strings.HasSuffix(c.Prefix, "/") {
		return fmt.Errorf("dashboard prefix %q must start with '/' and not end with '/'", c.Prefix)
	}
	for _, p := range []struct{ name, v string }{{"status", c.StatusPath}, {"chat", c.ChatPath}, {"models", c.ModelsPath}} {
		if !strings.HasPrefix(p.v, "/") {
			return fmt.Errorf("dashboard %s path %q must start with '/'", p.name, p.v)
		}
	}
	if c.MetricsPath != "" && !strings.HasPrefix(c.MetricsPath, "/") {
		return fmt.Errorf("dashboard metrics path %q must start with '/' or be empty", c.MetricsPath)
	}
	if c.DrainPath != "" && !strings.HasPrefix(c.DrainPath, "/") {
		return fmt.Errorf("dashboard drain path %q must start with '/' or be empty", c.DrainPath)
	}
	if c.PollInterval < 100*time.Millisecond {
		return fmt.Errorf("dashboard poll interval %v must be at least 100ms", c.PollInterval)
	}
	return nil
}

// Dashboard serves the page.
type Dashboard struct {
	cfg    Config
	index  []byte
	assets http.Handler
}

// New renders the page for cfg.
func New(cfg Config) (*Dashboard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Title == "" {
		cfg.Title = "macpool"
	}
	tmpl, err := template.ParseFS(static, "static/index.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard template: %w", err)
	}
	var buf bytes.Buffer
	data := struct {
		Config
		Poll   int64
		Static string
	}{cfg, cfg.PollInterval.Milliseconds(), cfg.Prefix + "/static/"}
	if err := tmpl.Execute(&buf, data); err != nil {
		return nil, fmt.Errorf("dashboard template: %w", err)
	}
	sub, err := fs.Sub(static, "static")
	if err != nil {
		return nil, err
	}
	return &Dashboard{
		cfg:    cfg,
		index:  buf.Bytes(),
		assets: http.StripPrefix(cfg.Prefix+"/static/", http.FileServerFS(sub)),
	}, nil
}

// Patterns are the http.ServeMux patterns to mount the Handler on.
func (d *Dashboard) Patterns() []string {
	p := []string{d.cfg.Prefix, d.cfg.Prefix + "/"}
	if d.cfg.Root {
		p = append(p, "/{$}")
	}
	return p
}

// ServeHTTP serves the page at Prefix (and "/" with Root) and its assets
// under Prefix/static/. With gin: r.Any("/dashboard/*any", gin.WrapH(d)).
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	p := r.URL.Path
	switch {
	case p == d.cfg.Prefix || p == d.cfg.Prefix+"/" || (d.cfg.Root && p == "/"):
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Cache-Control", "no-cache")
		// Everything is same-origin; no inline script.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		if r.Method == http.MethodHead {
			return
		}
		w.Write(d.index)
	case strings.HasPrefix(p, d.cfg.Prefix+"/static/") && !strings.HasSuffix(p, "/") && p != d.cfg.Prefix+"/static/index.html":
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		d.assets.ServeHTTP(w, r)
	default:
		http.NotFound(w, r)
	}
}
