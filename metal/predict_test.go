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
