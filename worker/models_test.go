package worker

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/modelstore"
)

func TestModelsConfigValidate(t *testing.T) {
	load := func(context.Context, string, string) (Engine, func() error, error) { return nil, nil, nil }
	for _, tc := range []struct {
		name string
		edit func(c *ModelsConfig)
		want string
	}{
		{"ok", func(*ModelsConfig) {}, ""},
		{"no dir", func(c *ModelsConfig) { c.Dir = "" }, "models folder"},
		{"no loader", func(c *ModelsConfig) { c.Load = nil }, "loader"},
		{"poll", func(c *ModelsConfig) { c.PollInterval = 0 }, "poll interval 0s must be positive"},
		{"listen", func(c *ModelsConfig) { c.Listen = "nope" }, `listen "nope" must be host:port`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultModelsConfig()
			c.Dir, c.Load = t.TempDir(), load
			tc.edit(&c)
			err := c.validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// A worker with placed models and no model of its own starts, gossips its
// store address, offers its -model and an earlier fetch to peers, and
// answers jobs for models it does not hold with a 503.
func TestPlacedWorkerStore(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(t.TempDir(), "own")
	os.MkdirAll(own, 0o755)
	os.WriteFile(filepath.Join(own, "config.json"), []byte(`{}`), 0o644)
	// An earlier run fetched "org/earlier" (name path-escaped on disk).
	earlier := filepath.Join(dir, "org%2Fearlier")
	os.MkdirAll(earlier, 0o755)
	os.WriteFile(filepath.Join(earlier, "w.bin"), []byte("weights"), 0o644)
	m, err := modelstore.Build(context.Background(), earlier, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(m)
	os.WriteFile(filepath.Join(earlier, modelstore.ManifestFile), b, 0o644)

	cfg := DefaultConfig()
	cfg.Name = "w1"
	cfg.Gossip = cluster.FastConfig()
	pc := DefaultModelsConfig()
	pc.Dir = dir
	pc.Listen = "127.0.0.1:0"
	pc.Offer = map[string]string{"own": own}
	pc.Load = func(context.Context, string, string) (Engine, func() error, error) { return &TestEngine{}, nil, nil }
	cfg.Placed = &pc
	w, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if w.StoreAddr() == "" {
		t.Fatal("no store address")
	}
	if me, ok := w.ml.Member("w1"); !ok || me.Meta.Store != w.StoreAddr() {
		t.Errorf("gossiped store %q, want %q", me.Meta.Store, w.StoreAddr())
	}
	if got := w.servedModels(); len(got) != 0 {
		t.Errorf("serves %v before any placement, want none", got)
	}
	// Run is not called: serve the store's handler directly.
	resp := httpGet(t, w, modelstore.PathModels)
	var names []string
	json.Unmarshal(resp, &names)
	if strings.Join(names, ",") != "org/earlier,own" {
		t.Errorf("offered %v, want [org/earlier own]", names)
	}
	_, err = run(t, w.cfg.Engine, context.Background(), chat("x", 1))
	if err == nil || !strings.Contains(err.Error(), "not loaded on worker w1") {
		t.Errorf("job for a model not held: got %v, want not loaded", err)
	}
	w.placed.store.Close()
}

func httpGet(t *testing.T, w *Worker, path string) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	w.placed.store.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, rec.Code, rec.Body)
	}
	return rec.Body.Bytes()
}

// Wrapping for placed models keeps the static engine's prefix summaries
// (prefix routing) exactly when it has them.
func TestPlacedEngineKeepsPrefixSummarizer(t *testing.T) {
	for _, tc := range []struct {
		name string
		eng  Engine
		want bool
	}{{"plain", &TestEngine{}, false}, {"prefix keys", WithPrefixKeys(&TestEngine{}), true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Name = "w-" + strings.ReplaceAll(tc.name, " ", "-")
			cfg.Models = []string{"m"}
			cfg.Engine = tc.eng
			cfg.Gossip = cluster.FastConfig()
			pc := DefaultModelsConfig()
			pc.Dir, pc.Listen = t.TempDir(), "127.0.0.1:0"
			pc.Load = func(context.Context, string, string) (Engine, func() error, error) { return nil, nil, nil }
			cfg.Placed = &pc
			w, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			defer w.placed.store.Close()
			if _, ok := w.cfg.Engine.(PrefixSummarizer); ok != tc.want {
				t.Errorf("wrapped engine is a PrefixSummarizer: %v, want %v", ok, tc.want)
			}
			if _, ok := w.cfg.Engine.(ResumeEngine); !ok {
				t.Error("wrapped engine is not a ResumeEngine")
			}
			evs, err := run(t, w.cfg.Engine, context.Background(), chat("one two", 5))
			if err != nil || len(evs) == 0 {
				t.Errorf("static model through the wrapper: %v, %d events", err, len(evs))
			}
		})
	}
}
