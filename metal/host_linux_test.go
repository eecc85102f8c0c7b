package metal

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	"github.com/macpool/macpool/engine/tensor"
	"github.com/macpool/macpool/metal/gpu"
	"github.com/macpool/macpool/metal/mtl/fake"
)

// TestInlineBytesUnder4KiB: setBytes is for data smaller than 4 KiB; 4096
// bytes (a 512-row paged table) go through a buffer.
func TestInlineBytesUnder4KiB(t *testing.T) {
	b := newEmu(t)
	if a := b.hostArg(make([]byte, 4095)); a.Bytes == nil {
		t.Errorf("4095 bytes: not inline")
	}
	if a := b.hostArg(make([]byte, 4096)); a.Bytes != nil || a.Buf == nil {
		t.Errorf("4096 bytes: inline, want a staging buffer")
	}
}

// TestArgmaxNaN: a row of NaN logits is an error, not token -1.
func TestArgmaxNaN(t *testing.T) {
	b := newEmu(t)
	x := b.NewTensor(2, 40)
	v := make([]float32, 80)
	for i := range v {
		v[i] = float32(i % 7)
	}
	for i := 40; i < 80; i++ {
		v[i] = float32(math.NaN())
	}
	b.Write(x, v)
	got := make([]int, 2)
	err := b.Argmax(x, got)
	if !errors.Is(err, ErrNaNLogits) {
		t.Fatalf("Argmax of a NaN row = %v (ids %v), want ErrNaNLogits", err, got)
	}
}

// withFake runs f with the fake Metal device configured by edit, then
// restores the default.
func withFake(t *testing.T, edit func(*fake.Config), f func()) {
	t.Helper()
	cfg := fake.DefaultConfig()
	edit(&cfg)
	if err := fake.Configure(cfg); err != nil {
		t.Fatal(err)
	}
	defer fake.Configure(fake.DefaultConfig())
	f()
}

// TestPipelineThreadLimit: a device whose pipelines allow fewer threads
// per threadgroup than the backend dispatches is refused at New.
func TestPipelineThreadLimit(t *testing.T) {
	withFake(t, func(c *fake.Config) { c.MaxThreads = 128 }, func() {
		dev := newTestDevice(t)
		_, err := New(Config{Device: dev, Name: testBackendName})
		if err == nil || !strings.Contains(err.Error(), "allows 128 threads per threadgroup") {
			t.Fatalf("New = %v, want the thread-limit error", err)
		}
		dev.Close()
	})
}

// noUseDevice drops CommandBuffer.Use: the MoE pointer tables then reach
// buffers that are not resident, which a GPU faults on.
type noUseDevice struct{ gpu.Device }

func (d noUseDevice) NewCommandBuffer() gpu.CommandBuffer {
	return noUseCB{d.Device.NewCommandBuffer()}
}

type noUseCB struct{ gpu.CommandBuffer }

func (noUseCB) Use(...gpu.Buffer) {}

// TestMoEWithoutUseFails: the emulator enforces residency, so a missing
// Use fails the MoE dispatch instead of passing CI.
func TestMoEWithoutUseFails(t *testing.T) {
	b, err := New(Config{Device: noUseDevice{newTestDevice(t)}, Name: testBackendName})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := rand.New(rand.NewPCG(3, 3))
	up := func(rows, cols int) engine.Weight {
		w, err := b.Upload(hostOf(r, tensor.BF16, rows, cols))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	const E, H, inter = 4, 64, 32
	w := engine.MoEWeights{Router: up(E, H)}
	for range E {
		w.Experts = append(w.Experts, engine.Expert{Gate: up(inter, H), Up: up(inter, H), Down: up(H, inter)})
	}
	x, y := b.NewTensor(2, H), b.NewTensor(2, H)
	b.Write(x, randn(r, 2*H))
	b.MoE(y, x, &w, engine.MoEParams{TopK: 2})
	err = b.Read(y, make([]float32, 2*H))
	if err == nil || !strings.Contains(err.Error(), "not resident") {
		t.Fatalf("Read after MoE without Use = %v, want a residency error", err)
	}
}

// TestThreadOrderSeeds runs the kernels with threadgroup memory, barriers
// and SIMD-group collectives under several random thread orders (the
// emulator's Seed): a missing barrier shows in one of them.
func TestThreadOrderSeeds(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			withFake(t, func(c *fake.Config) { c.Emu.Seed = seed }, func() {
				for _, f := range []func(*testing.T){TestAttention, TestPagedAttention, TestNormAndRope, TestGatedDeltaNet, TestMoE, TestArgmax} {
					f(t)
				}
			})
		})
	}
}

// TestMoEGateUpFusedBits: the fused gate+up+SwiGLU dispatches (gathered
// experts: moe_gate_up; shared expert: matmul_gate_up) give the bits of the
// separate gate, up and SwiGLU dispatches.
func TestMoEGateUpFusedBits(t *testing.T) {
	b := newEmu(t)
	r := rand.New(rand.NewPCG(5, 5))
	for _, f := range []tensor.Format{tensor.BF16, tensor.Q8_0} {
		up := func(rows, cols int) engine.Weight {
			w, err := b.Upload(hostOf(r, f, rows, cols))
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		const E, H, inter, T = 6, 64, 64, 5
		w := engine.MoEWeights{Router: up(E, H)}
		for range E {
			w.Experts = append(w.Experts, engine.Expert{Gate: up(inter, H), Up: up(inter, H), Down: up(H, inter)})
		}
		w.Shared = &engine.Expert{Gate: up(inter, H), Up: up(inter, H), Down: up(H, inter)}
		w.SharedGate = up(1, H)
		x := b.NewTensor(T, H)
		b.Write(x, randn(r, T*H))
		out := func() []float32 {
			y := b.NewTensor(T, H)
			b.MoE(y, x, &w, engine.MoEParams{TopK: 3, Normalize: true})
			v := make([]float32, T*H)
			if err := b.Read(y, v); err != nil {
				t.Fatal(err)
			}
			return v
		}
		fused := out()
		p, q := b.pipes["moe_gate_up"], b.pipes["matmul_gate_up"]
		delete(b.pipes, "moe_gate_up")
		delete(b.pipes, "matmul_gate_up")
		separate := out()
		b.pipes["moe_gate_up"], b.pipes["matmul_gate_up"] = p, q
		if bad := diffBits(fused, separate); bad > 0 {
			t.Errorf("%v: %d of %d outputs differ between fused and separate gate/up/SwiGLU", f, bad, len(fused))
		}
	}
}

// TestMoEDownCombineFusedBits: moe_down_combine (gathered down, shared
// expert down, its sigmoid gate and the weighted combine in one dispatch)
// gives the bits of the four separate dispatches, with and without a shared
// expert, for a decode row and a batch, and an inter size whose chunks do
// not fill the lanes evenly.
func TestMoEDownCombineFusedBits(t *testing.T) {
	b := newEmu(t)
	r := rand.New(rand.NewPCG(6, 6))
	for _, f := range []tensor.Format{tensor.BF16, tensor.Q8_0} {
		up := func(rows, cols int) engine.Weight {
			w, err := b.Upload(hostOf(r, f, rows, cols))
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		const E, H, inter, si = 6, 64, 96, 320
		for _, shared := range []bool{true, false} {
			w := engine.MoEWeights{Router: up(E, H)}
			for range E {
				w.Experts = append(w.Experts, engine.Expert{Gate: up(inter, H), Up: up(inter, H), Down: up(H, inter)})
			}
			if shared {
				w.Shared = &engine.Expert{Gate: up(si, H), Up: up(si, H), Down: up(H, si)}
				w.SharedGate = up(1, H)
			}
			for _, T := range []int{1, 5} {
				x := b.NewTensor(T, H)
				b.Write(x, randn(r, T*H))
				out := func() []float32 {
					y := b.NewTensor(T, H)
					b.MoE(y, x, &w, engine.MoEParams{TopK: 3, Normalize: true})
					v := make([]float32, T*H)
					if err := b.Read(y, v); err != nil {
						t.Fatal(err)
					}
					return v
				}
				b.StartTrace()
				fused := out()
				if n := countKernel(b.StopTrace(), "moe_down_combine"); n != 1 {
					t.Fatalf("%v shared %v T %d: %d moe_down_combine dispatches, want 1", f, shared, T, n)
				}
				p := b.pipes["moe_down_combine"]
				delete(b.pipes, "moe_down_combine")
				separate := out()
				b.pipes["moe_down_combine"] = p
				if bad := diffBits(fused, separate); bad > 0 {
					t.Errorf("%v shared %v T %d: %d of %d outputs differ between fused and separate down/combine", f, shared, T, bad, len(fused))
				}
			}
		}
	}
}

// TestMoEDownCombineModelBits: the MoE fixtures (routed experts, and a
// shared expert with its gate) give bit-identical logits with
// moe_down_combine and with the four dispatches it replaces.
func TestMoEDownCombineModelBits(t *testing.T) {
	for _, name := range []string{"hf/qwen3_5_moe", "hf/qwen3_next"} {
		t.Run(name, func(t *testing.T) {
			be := newEmu(t)
			ck, err := checkpoint.Open(fixture(name))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			m, err := engine.New(be, ck)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ids, _, _, _, _ := readRef(t, fixture(name), "")
			logits := func() []float32 {
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
			be.StartTrace()
			fused := logits()
			if countKernel(be.StopTrace(), "moe_down_combine") == 0 {
				t.Fatalf("%s: no moe_down_combine dispatch; the test exercised nothing", name)
			}
			p := be.pipes["moe_down_combine"]
			delete(be.pipes, "moe_down_combine")
			separate := logits()
			be.pipes["moe_down_combine"] = p
			if bad := diffBits(fused, separate); bad > 0 {
				t.Errorf("%s: %d of %d logits differ between fused and separate down/combine", name, bad, len(fused))
			}
		})
	}
}

// TestModelsUnderSeeds runs two hybrid fixtures (attention with threadgroup
// memory, DeltaNet, MoE) on devices whose threadgroups run their threads in
// random orders: the logits still match the references.
func TestModelsUnderSeeds(t *testing.T) {
	for _, seed := range []uint64{2, 3} {
		for _, name := range []string{"hf/qwen3_5_moe", "hf/qwen3_next"} {
			t.Run(fmt.Sprint(name, "/seed", seed), func(t *testing.T) {
				withFake(t, func(c *fake.Config) { c.Emu.Seed = seed }, func() {
					be, err := New(Config{Device: newTestDevice(t), Name: testBackendName})
					if err != nil {
						t.Fatal(err)
					}
					dir := fixture(name)
					ck, err := checkpoint.Open(dir)
					if err != nil {
						t.Fatal(err)
					}
					defer ck.Close()
					m, err := engine.New(be, ck)
					if err != nil {
						t.Fatal(err)
					}
					defer m.Close()
					ids, _, _, _, want := readRef(t, dir, "")
					c, err := m.NewCache()
					if err != nil {
						t.Fatal(err)
					}
					defer c.Free()
					out, err := m.Forward(context.Background(), []engine.Seq{{Cache: c, Tokens: ids, AllLogits: true}})
					if err != nil {
						t.Fatal(err)
					}
					V := m.VocabSize()
					for p := range ids {
						if e := relL2(out[0][p*V:(p+1)*V], want[p*V:(p+1)*V]); e >= 1e-4 {
							t.Fatalf("position %d: relative L2 error %.3g, want < 1e-4", p, e)
						}
					}
				})
			})
		}
	}
}
