package reftest

import (
	"context"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu"
	"github.com/macpool/macpool/engine/synth"
)

// SynthModel is a random Q8_0 model of the synth config's shape (seed 1) on
// the CPU backend with the given thread count, closed when the test ends.
func SynthModel(t testing.TB, config string, threads int) *engine.Model {
	t.Helper()
	c, err := synth.Config(config)
	if err != nil {
		t.Fatal(err)
	}
	src, err := synth.New(c, synth.Q8_0, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	cc := cpu.DefaultConfig()
	cc.Threads = threads
	be, err := cpu.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	m, err := engine.New(be, src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// Logits loads the model at path with opts and returns the logits of every
// position of ids, run in one pass.
func Logits(t testing.TB, path string, ids []int, opts engine.Options) []float32 {
	t.Helper()
	m, err := engine.Load(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	c, err := m.NewCache()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Free()
	out, err := m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: ids, AllLogits: true}})
	if err != nil {
		t.Fatal(err)
	}
	return out[0]
}
