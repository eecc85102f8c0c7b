package coordinator_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/macpool/macpool/cluster"
	"github.com/macpool/macpool/coordinator"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/worker"
)

// placedWorker starts a worker that serves only placed models; loads
// records the paths its loader was given.
func placedWorker(t *testing.T, name, join string, loads *sync.Map, resolve func(context.Context, string, func(int64, int64)) (string, error)) *worker.Worker {
	t.Helper()
	w, err := worker.New(placedWorkerConfig(t, name, join, loads, resolve))
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	runNode(t, w)
	return w
}

func placedWorkerConfig(t *testing.T, name, join string, loads *sync.Map, resolve func(context.Context, string, func(int64, int64)) (string, error)) worker.Config {
	t.Helper()
	cfg := worker.DefaultConfig()
	cfg.Name = name
	cfg.Slots = 1
	cfg.Gossip = cluster.FastConfig()
	cfg.Gossip.Join = []string{join}
	cfg.MetaInterval = 50 * time.Millisecond
	cfg.PingInterval = 100 * time.Millisecond
	cfg.Logger = testLogger(t)
	pc := worker.DefaultModelsConfig()
	pc.Dir = filepath.Join(t.TempDir(), "models")
	pc.Listen = "127.0.0.1:0"
	pc.PollInterval = 100 * time.Millisecond
	pc.ChunkSize = 64 << 10 // many chunks even for a tiny model
	pc.Load = func(ctx context.Context, model, path string) (worker.Engine, func() error, error) {
		ck, err := checkpoint.Open(path) // the files must form a loadable checkpoint
		if err != nil {
			return nil, nil, err
		}
		loads.Store(name, path)
		return &worker.TestEngine{}, ck.Close, nil
	}
	pc.Resolve = resolve
	cfg.Placed = &pc
	return cfg
}

func adminDo(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func modelStatus(t *testing.T, base, name string) (coordinator.ModelStatus, bool) {
	t.Helper()
	code, b := adminDo(t, http.MethodGet, base+coordinator.ModelsPath, nil)
	if code != http.StatusOK {
		t.Fatalf("GET models: %d %s", code, b)
	}
	var out struct{ Data []coordinator.ModelStatus }
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	for _, m := range out.Data {
		if m.Name == name {
			return m, true
		}
	}
	return coordinator.ModelStatus{}, false
}

// A model added from a local path on worker A is placed on A and B; B pulls
// it from A (not the source path), loads it and serves a request with it,
// also after A is gone; removing it unloads it everywhere.
func TestPlacedModelPulledFromPeer(t *testing.T) {
	cfg := coordConfig(t, "c1", nil)
	c, _ := startCoordinator(t, cfg)
	srv := serveHTTP(t, c)

	src := filepath.Join(t.TempDir(), "qwen3-tiny")
	copyDir(t, "../testdata/hf/qwen3", src)
	var loads sync.Map
	wa := placedWorker(t, "wa", c.GossipAddr(), &loads, nil)
	wb := placedWorker(t, "wb", c.GossipAddr(), &loads, nil)

	// Bad input is a 400 naming the parameter.
	if code, b := adminDo(t, http.MethodPost, srv.URL+coordinator.ModelsPath, map[string]any{"name": "x"}); code != http.StatusBadRequest || !strings.Contains(string(b), "source") {
		t.Fatalf("add without source: got %d %s, want 400 naming source", code, b)
	}
	code, b := adminDo(t, http.MethodPost, srv.URL+coordinator.ModelsPath, coordinator.AddModelRequest{Source: src, SourceNode: "wa"})
	if code != http.StatusCreated {
		t.Fatalf("add model: %d %s", code, b)
	}
	const model = "qwen3-tiny"
	eventually(t, 20*time.Second, "both workers serving the placed model", func() bool {
		k := 0
		for _, m := range c.Membership().Members() {
			if m.Meta.Role == cluster.RoleWorker && m.Meta.Serves(model) && m.Meta.Ready {
				k++
			}
		}
		return k == 2
	})
	pa, _ := loads.Load("wa")
	pb, _ := loads.Load("wb")
	if pa != src {
		t.Errorf("worker A loaded %v, want the source %s", pa, src)
	}
	if pb == src || !strings.HasPrefix(pb.(string), filepath.Dir(filepath.Dir(pb.(string)))) {
		t.Errorf("worker B loaded %v, want its own fetched copy", pb)
	}
	if got := wb.PlacedModels()[model]; got.From != "peers" || got.State != cluster.ModelReady || got.Bytes != got.Total || got.Total == 0 {
		t.Errorf("worker B progress %+v, want ready from peers", got)
	}
	for _, f := range []string{"config.json", "model.safetensors"} {
		want, _ := os.ReadFile(filepath.Join(src, f))
		got, err := os.ReadFile(filepath.Join(pb.(string), f))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("fetched %s differs from the source (%v)", f, err)
		}
	}
	// Registry: size and digest learnt from the workers; ls shows both ready.
	eventually(t, 10*time.Second, "models ls shows size, digest and two ready workers", func() bool {
		ms, ok := modelStatus(t, srv.URL, model)
		if !ok || ms.Size == 0 || ms.Digest == "" || len(ms.Workers) != 2 {
			return false
		}
		for _, w := range ms.Workers {
			if w.State != cluster.ModelReady {
				return false
			}
		}
		return true
	})

	// A leaves: B alone serves the model.
	wa.Close()
	eventually(t, 10*time.Second, "A gone from the placement", func() bool {
		as := c.State().Assign[model]
		return len(as) == 1 && as[0] == "wb"
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	job := chatJob("j1", "", "hello placed model", 8)
	job.Model, job.Chat.Model = model, model
	var res result
	eventually(t, 10*time.Second, "a request served by B", func() bool {
		r, err := submit(ctx, c, job)
		res = r
		return err == nil && r.err == nil && r.worker == "wb"
	})
	if res.text == "" {
		t.Errorf("empty answer from B")
	}

	// Removal unloads it.
	if code, b := adminDo(t, http.MethodDelete, srv.URL+coordinator.ModelsPath+"/"+model, nil); code != http.StatusOK {
		t.Fatalf("remove: %d %s", code, b)
	}
	if code, _ := adminDo(t, http.MethodDelete, srv.URL+coordinator.ModelsPath+"/"+model, nil); code != http.StatusNotFound {
		t.Fatalf("second remove: got %d, want 404", code)
	}
	eventually(t, 10*time.Second, "B no longer serving the removed model", func() bool {
		m, ok := c.Membership().Member("wb")
		return ok && !m.Meta.Serves(model)
	})
	if _, ok := modelStatus(t, srv.URL, model); ok {
		t.Errorf("removed model came back in the registry")
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	ents, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(to, 0o755)
	for _, e := range ents {
		if e.IsDir() || strings.HasSuffix(e.Name(), ".f32") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// A Hugging Face model is downloaded from the source once per cluster: by
// the seed (first placed worker); the others pull it from the seed.
func TestPlacedHubModelDownloadedOnce(t *testing.T) {
	cfg := coordConfig(t, "c1", nil)
	c, _ := startCoordinator(t, cfg)
	srv := serveHTTP(t, c)
	cache := filepath.Join(t.TempDir(), "hub-snapshot")
	copyDir(t, "../testdata/hf/qwen3", cache)
	var resolves sync.Map // worker -> calls
	resolver := func(name string) func(context.Context, string, func(int64, int64)) (string, error) {
		return func(ctx context.Context, ref string, progress func(int64, int64)) (string, error) {
			n, _ := resolves.LoadOrStore(name, new(atomic.Int32))
			n.(*atomic.Int32).Add(1)
			if ref != "test/qwen3" {
				return "", fmt.Errorf("unexpected ref %q", ref)
			}
			progress(1, 2)
			return cache, nil
		}
	}
	var loads sync.Map
	for _, name := range []string{"w1", "w2", "w3"} {
		placedWorker(t, name, c.GossipAddr(), &loads, resolver(name))
	}
	eventually(t, 10*time.Second, "three workers in gossip", func() bool {
		k := 0
		for _, m := range c.Membership().Members() {
			if m.Meta.Role == cluster.RoleWorker && m.Meta.Store != "" {
				k++
			}
		}
		return k == 3
	})
	if code, b := adminDo(t, http.MethodPost, srv.URL+coordinator.ModelsPath, coordinator.AddModelRequest{Source: "test/qwen3"}); code != http.StatusCreated {
		t.Fatalf("add model: %d %s", code, b)
	}
	eventually(t, 20*time.Second, "three workers serving test/qwen3", func() bool {
		ms, ok := modelStatus(t, srv.URL, "test/qwen3")
		if !ok || len(ms.Serving) != 3 {
			return false
		}
		return true
	})
	calls := map[string]int{}
	resolves.Range(func(k, v any) bool { calls[k.(string)] = int(v.(*atomic.Int32).Load()); return true })
	if len(calls) != 1 || calls["w1"] != 1 {
		t.Errorf("source downloads %v, want one, by the seed w1", calls)
	}
	ms, _ := modelStatus(t, srv.URL, "test/qwen3")
	from := map[string]string{}
	for _, w := range ms.Workers {
		from[w.Worker] = w.From
	}
	if from["w1"] != "source" || from["w2"] != "peers" || from["w3"] != "peers" {
		t.Errorf("install sources %v, want w1 from source, w2 and w3 from peers", from)
	}
}

// With a cluster secret the model store speaks mutual TLS: B pulls from A
// over it, and a client without a cluster certificate gets nothing.
func TestPlacedModelPullOverTLS(t *testing.T) {
	s := testSecret(t)
	cfg := coordConfig(t, "c1", nil)
	cfg.Secret = s
	c, _ := startCoordinator(t, cfg)
	src := filepath.Join(t.TempDir(), "qwen3-tiny")
	copyDir(t, "../testdata/hf/qwen3", src)
	var loads sync.Map
	var ws []*worker.Worker
	for _, name := range []string{"wa", "wb"} {
		wc := placedWorkerConfig(t, name, c.GossipAddr(), &loads, nil)
		wc.Secret = s
		w, err := worker.New(wc)
		if err != nil {
			t.Fatal(err)
		}
		runNode(t, w)
		ws = append(ws, w)
	}
	eventually(t, 10*time.Second, "raft leader", c.IsLeader)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.AddManagedModel(ctx, coordinator.AddModelRequest{Source: src, SourceNode: "wa"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "B ready from peers", func() bool {
		p := ws[1].PlacedModels()["qwen3-tiny"]
		return p.State == cluster.ModelReady && p.From == "peers"
	})
	// No cluster certificate: plain HTTP and TLS without a client
	// certificate are both refused by A's store.
	for _, u := range []string{"http://" + ws[0].StoreAddr(), "https://" + ws[0].StoreAddr()} {
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		resp, err := client.Get(u + "/modelstore/v1/models")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Errorf("GET %s without a cluster certificate: %s, want a refused connection", u, resp.Status)
			}
		}
	}
}
