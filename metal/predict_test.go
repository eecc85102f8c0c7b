//go:build linux || darwin

package metal

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine"
)

// TestTraceDecode: one traced decode step of a fixture has the op
// structure of the model (an embed, a LM-head matmul and argmax once, per
// layer the rest), the layers scale, and the table names every chip.
func TestTraceDecode(t *testing.T) {
	skipWithoutDevice(t)
	m, err := engine.Load(filepath.Join("..", "testdata", "hf", "qwen3"), engine.Options{Backend: testBackendName, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	b := m.Backend().(*Backend)
	L := m.Config().NumHiddenLayers
	one, err := TraceDecode(context.Background(), m, b, 40, L)
	if err != nil {
		t.Fatal(err)
	}
	double, err := TraceDecode(context.Background(), m, b, 40, 2*L)
	if err != nil {
		t.Fatal(err)
	}
	if one.Kernels["embed"] != 1 || one.Kernels["argmax"] != 1 || double.Kernels["embed"] != 1 {
		t.Errorf("embed/argmax per step: %v", one.Kernels)
	}
	if got, want := double.Kernels["attention"]+double.Kernels["attention_paged_part"], 2*(one.Kernels["attention"]+one.Kernels["attention_paged_part"]); got != want || want == 0 {
		t.Errorf("attention dispatches over %d layers %d, want %d", 2*L, got, want)
	}
	if one.Bytes["matvec"] <= 0 || double.TotalBytes() <= one.TotalBytes() {
		t.Errorf("bytes: %v, doubled %v", one.Bytes, double.Bytes)
	}
	tab := one.Table(DefaultPredictModel())
	for _, c := range PredictChips {
		if !strings.Contains(tab, c.Name) {
			t.Errorf("table lacks %s:\n%s", c.Name, tab)
		}
	}
	t.Logf("\n%s", tab)
}

// TestPredictPipelinedRule: the stated rule — plain = GPU + command
// buffers + round trip, pipelined = max(GPU, CPU) — on a made-up step, for
// a GPU-bound and a CPU-bound case.
func TestPredictPipelinedRule(t *testing.T) {
	m := DefaultPredictModel()
	for _, c := range []struct {
		bytes                 int64
		dispatches, cbs, want float64 // want: pipelined seconds per token
	}{
		// GPU 1e9/(0.7·500e9) + 500·2 µs = 3.857 ms; CPU 500 µs + 160 µs + 60 µs.
		{1e9, 500, 8, 1e9/(0.7*500e9) + 500*2e-6},
		// GPU 1e6/(0.7·500e9) + 2 ms; CPU 1000 µs + 100·20 µs + 60 µs = 3.06 ms.
		{1e6, 1000, 100, 1000*1e-6 + 100*20e-6 + 60e-6},
	} {
		s := DecodeStep{Bytes: map[string]int64{"matvec": c.bytes}, Dispatches: c.dispatches, CommandBuffers: c.cbs}
		if got := 1 / s.PipelinedTokPerSec(m, 500); got < c.want*(1-1e-9) || got > c.want*(1+1e-9) {
			t.Errorf("%+v: pipelined %.6g s/token, want %.6g", c, got, c.want)
		}
		plain := 1e9/(0.7*500e9)*float64(c.bytes)/1e9 + c.dispatches*2e-6 + c.cbs*20e-6 + 60e-6
		if got := 1 / s.TokPerSec(m, 500); got < plain*(1-1e-9) || got > plain*(1+1e-9) {
			t.Errorf("%+v: plain %.6g s/token, want %.6g", c, got, plain)
		}
	}
}
