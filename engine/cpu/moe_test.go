package cpu

import (
	"encoding/binary"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/moe"
	"github.com/macpool/macpool/engine/tensor"
)

// TestMoESharedInputBitIdentical: the experts' quantized rows gathered from
// one quantization of the batch give the bits of quantizing each expert's
// gathered float rows (quantized weights; batches from a few rows to
// AMX-sized ones).
func TestMoESharedInputBitIdentical(t *testing.T) {
	b := newBackend(t, 2)
	r := rand.New(rand.NewPCG(5, 6))
	const H, I, E, K = 256, 256, 4, 2
	for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_K} {
		up := func(rows, cols int) engine.Weight {
			h, _ := host(t, r, f, rows, cols)
			w, err := b.Upload(h)
			if err != nil {
				t.Fatal(err)
			}
			return w
		}
		w := &engine.MoEWeights{Router: f32Weight(t, b, scaled(r, E*H, 1), E, H)}
		for range E {
			w.Experts = append(w.Experts, engine.Expert{Gate: up(I, H), Up: up(I, H), Down: up(H, I)})
		}
		for _, T := range []int{1, 5, 40, 97} {
			t.Run(fmt.Sprintf("%v/T%d", f, T), func(t *testing.T) {
				x := tensorOf(b, T, H, randn(r, T*H))
				run := func(shared bool) []float32 {
					defer func(v bool) { moeSharedInput = v }(moeSharedInput)
					moeSharedInput = shared
					dst := b.NewTensor(T, H)
					b.MoE(dst, x, w, engine.MoEParams{TopK: K, Normalize: true})
					return dst.(*Tensor).data
				}
				want, got := run(false), run(true)
				bad := 0
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						if bad < 3 {
							t.Errorf("token %d value %d: gathered float rows %v, shared input %v", i/H, i%H, want[i], got[i])
						}
						bad++
					}
				}
				if bad > 0 {
					t.Errorf("%d of %d values differ", bad, len(got))
				}
			})
		}
	}
}

// TestMoEBitIdentical: the MoE job (experts whole or cut into blocks, the
// shared expert with its sigmoid gate among them, a quantized router on
// the shared quantization) gives the bits of running one expert at a time
// on gathered float rows, for 1 to 3 workers, from one token (decode: the
// experts cut into blocks) to batches whose experts each run whole.
func TestMoEBitIdentical(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	const H, I, IS, E, K = 256, 256, 512, 32, 4
	for _, threads := range []int{1, 2, 3} {
		b := newBackend(t, threads)
		for _, f := range []tensor.Format{tensor.Q8_0, tensor.Q4_0, tensor.Q4_K} {
			up := func(rows, cols int) engine.Weight {
				var h *tensor.Host
				if f == tensor.Q4_0 { // blocks of 32: f16 scale + 16 bytes of 4-bit codes
					h = &tensor.Host{Name: "w", Format: f, Shape: []int{rows, cols}, Data: make([]byte, rows*cols/32*18)}
					for o := 0; o < len(h.Data); o += 18 {
						binary.LittleEndian.PutUint16(h.Data[o:], tensor.F32ToF16(0.01+r.Float32()*0.05))
						for i := 2; i < 18; i++ {
							h.Data[o+i] = byte(r.Uint32())
						}
					}
				} else {
					h, _ = host(t, r, f, rows, cols)
				}
				w, err := b.Upload(h)
				if err != nil {
					t.Fatal(err)
				}
				return w
			}
			w := &engine.MoEWeights{Router: up(E, H)}
			for range E {
				w.Experts = append(w.Experts, engine.Expert{Gate: up(I, H), Up: up(I, H), Down: up(H, I)})
			}
			w.Shared = &engine.Expert{Gate: up(IS, H), Up: up(IS, H), Down: up(H, IS)}
			w.SharedGate = f32Weight(t, b, scaled(r, H, 0.1), H)
			for _, c := range []struct{ T, split, sub int }{{1, -1, 128}, {3, -1, 128}, {17, -1, 128}, {64, -1, 128}, {130, -1, 128}, {64, 0, 128}, {130, 0, 1 << 20}, {1, 8, 16}, {64, 8, 16}, {130, 5, 32}} {
				T := c.T
				t.Run(fmt.Sprintf("threads%d/%v/T%d/split%d/sub%d", threads, f, T, c.split, c.sub), func(t *testing.T) {
					defer func(s, r int) { moeSplit, moeSubRows = s, r }(moeSplit, moeSubRows)
					moeSplit, moeSubRows = c.split, c.sub
					x := tensorOf(b, T, H, randn(r, T*H))
					run := func(shared bool) []float32 {
						defer func(v bool) { moeSharedInput = v }(moeSharedInput)
						moeSharedInput = shared
						dst := b.NewTensor(T, H)
						b.MoE(dst, x, w, engine.MoEParams{TopK: K, Normalize: false})
						return dst.(*Tensor).data
					}
					want, got := run(false), run(true)
					bad := 0
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
							if bad < 3 {
								t.Errorf("token %d value %d: one expert at a time %v, MoE job %v", i/H, i%H, want[i], got[i])
							}
							bad++
						}
					}
					if bad > 0 {
						t.Errorf("%d of %d values differ", bad, len(got))
					}
				})
			}
		}
	}
}

// TestMoERouteMatchesReference: the parallel routing and its counting sort
// give moe.RouteBatch's experts and weights and moe.Routing.ByExpert's
// grouping (expert order, tokens ascending).
func TestMoERouteMatchesReference(t *testing.T) {
	b := newBackend(t, 2)
	r := rand.New(rand.NewPCG(9, 10))
	for _, c := range []struct{ T, E, K int }{{1, 8, 2}, {97, 64, 8}, {512, 128, 8}, {40, 4, 4}} {
		logits := randn(r, c.T*c.E)
		if c.T > 1 {
			logits[3] = logits[4] // a tie
		}
		want := moe.RouteBatch(logits, c.T, c.E, c.K, true)
		run := new(moeRun)
		run.route(b, logits, c.T, c.E, engine.MoEParams{TopK: c.K, Normalize: true})
		if !slices.Equal(run.r.Experts, want.Experts) {
			t.Fatalf("T%d E%d: experts %v, want %v", c.T, c.E, run.r.Experts[:c.K], want.Experts[:c.K])
		}
		for i := range want.Weights {
			if math.Float32bits(run.r.Weights[i]) != math.Float32bits(want.Weights[i]) {
				t.Fatalf("T%d E%d: weight %d %v, want %v", c.T, c.E, i, run.r.Weights[i], want.Weights[i])
			}
		}
		for _, as := range want.ByExpert(c.E) {
			s0, s1 := run.start[as.Expert], run.start[as.Expert+1]
			if !slices.Equal(run.tokens[s0:s1], as.Tokens) {
				t.Fatalf("T%d E%d: expert %d tokens %v, want %v", c.T, c.E, as.Expert, run.tokens[s0:s1], as.Tokens)
			}
			for i, tok := range as.Tokens {
				if q := run.pos[tok*c.K+as.Slots[i]]; q != s0+i || run.order[q] != tok*c.K+as.Slots[i] {
					t.Fatalf("T%d E%d: expert %d token %d at position %d, want %d", c.T, c.E, as.Expert, tok, q, s0+i)
				}
			}
		}
		if run.start[c.E] != c.T*c.K {
			t.Fatalf("T%d E%d: %d positions, want %d", c.T, c.E, run.start[c.E], c.T*c.K)
		}
	}
}

// BenchmarkMoE: one MoE block of the real shapes on random weights (a
// prefill of 512 tokens, a decode step), with the kernel-call variants
// (moeSplit, moeSubRows) as sub-benchmarks for A/B runs:
//
//	go test ./engine/cpu -run X -bench BenchmarkMoE -count 5
func BenchmarkMoE(b *testing.B) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, sh := range []struct {
		name           string
		f              tensor.Format
		H, I, IS, E, K int
	}{
		{"qwen3-30b-a3b-q4_0", tensor.Q4_0, 2048, 768, 0, 128, 8},
		{"qwen3.6-35b-a3b-q8_0", tensor.Q8_0, 2048, 512, 512, 256, 8},
	} {
		be := newBackend(b, moeBenchThreads)
		w := &engine.MoEWeights{Router: randomQuant(b, be, r, sh.f, sh.E, sh.H)}
		for range sh.E {
			w.Experts = append(w.Experts, engine.Expert{Gate: randomQuant(b, be, r, sh.f, sh.I, sh.H), Up: randomQuant(b, be, r, sh.f, sh.I, sh.H), Down: randomQuant(b, be, r, sh.f, sh.H, sh.I)})
		}
		if sh.IS > 0 {
			w.Shared = &engine.Expert{Gate: randomQuant(b, be, r, sh.f, sh.IS, sh.H), Up: randomQuant(b, be, r, sh.f, sh.IS, sh.H), Down: randomQuant(b, be, r, sh.f, sh.H, sh.IS)}
			w.SharedGate = randomQuant(b, be, r, tensor.F32, 1, sh.H)
		}
		for _, T := range []int{512, 1} {
			x := tensorOf(be, T, sh.H, randn(r, T*sh.H))
			dst := be.NewTensor(T, sh.H)
			for _, v := range moeBenchVariants {
				b.Run(fmt.Sprintf("%s/T%d/split%d/sub%d", sh.name, T, v.split, v.sub), func(b *testing.B) {
					defer func(s, r int) { moeSplit, moeSubRows = s, r }(moeSplit, moeSubRows)
					moeSplit, moeSubRows = v.split, v.sub
					c0 := cpuTime()
					for range b.N {
						be.MoE(dst, x, w, engine.MoEParams{TopK: sh.K, Normalize: true})
					}
					// CPU time as well as wall time: on a loaded machine the
					// wall time mostly measures the neighbours.
					b.ReportMetric(float64((cpuTime()-c0).Microseconds())/float64(b.N), "cpu-µs/op")
				})
			}
		}
		be.Close()
	}
}

// moeBenchVariants are BenchmarkMoE's (moeSplit, moeSubRows) settings.
var moeBenchVariants = []struct{ split, sub int }{{-1, 128}, {0, 128}, {0, 1 << 20}, {8, 128}}

// moeBenchThreads is BenchmarkMoE's worker count (-moe-threads 1: the
// CPU time of the variants without any waiting).
var moeBenchThreads = 2

func init() { flag.IntVar(&moeBenchThreads, "moe-threads", 2, "BenchmarkMoE's threads") }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// randomQuant uploads a [rows, cols] matrix of random blocks in f (Q8_0,
// Q4_0: random codes, scales ~0.01-0.06; F32: normal values).
func randomQuant(b testing.TB, be *Backend, r *rand.Rand, f tensor.Format, rows, cols int) engine.Weight {
	h := &tensor.Host{Name: "w", Format: f, Shape: []int{rows, cols}}
	if rows == 1 {
		h.Shape = []int{cols}
	}
	bs := map[tensor.Format]int{tensor.Q8_0: 34, tensor.Q4_0: 18, tensor.F32: 128}[f]
	h.Data = make([]byte, rows*cols/32*bs)
	for i := range h.Data {
		h.Data[i] = byte(r.Uint32())
	}
	for o := 0; o < len(h.Data); o += bs {
		if f == tensor.F32 {
			for i := 0; i < bs; i += 4 {
				binary.LittleEndian.PutUint32(h.Data[o+i:], math.Float32bits(float32(r.NormFloat64())))
			}
			continue
		}
		binary.LittleEndian.PutUint16(h.Data[o:], tensor.F32ToF16(0.01+r.Float32()*0.05))
	}
	w, err := be.Upload(h)
	if err != nil {
		b.Fatal(err)
	}
	return w
}

// TestMoEReservesPrefillChunk: a call of a few tokens sizes the expert
// outputs for a whole prefill chunk (a long prompt after it grows
// nothing), a one-token call only for itself.
func TestMoEReservesPrefillChunk(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	const H, I, E, K = 256, 256, 8, 2
	b := newBackend(t, 2)
	w := &engine.MoEWeights{Router: randomQuant(t, b, r, tensor.Q8_0, E, H)}
	for range E {
		w.Experts = append(w.Experts, engine.Expert{Gate: randomQuant(t, b, r, tensor.Q8_0, I, H), Up: randomQuant(t, b, r, tensor.Q8_0, I, H), Down: randomQuant(t, b, r, tensor.Q8_0, H, I)})
	}
	moeRuns.Lock()
	saved := moeRuns.free
	moeRuns.free = nil
	moeRuns.Unlock()
	defer func() {
		moeRuns.Lock()
		moeRuns.free = saved
		moeRuns.Unlock()
	}()
	for _, c := range []struct{ T, want int }{{1, K * H}, {3, engine.PrefillChunk * K * H}, {engine.PrefillChunk, engine.PrefillChunk * K * H}} {
		x := tensorOf(b, c.T, H, randn(r, c.T*H))
		b.MoE(b.NewTensor(c.T, H), x, w, engine.MoEParams{TopK: K, Normalize: true})
		moeRuns.Lock()
		free := moeRuns.free
		moeRuns.Unlock()
		if len(free) != 1 {
			t.Fatalf("T%d: %d runs kept, want 1", c.T, len(free))
		}
		if got := cap(free[0].y); got != c.want {
			t.Errorf("T%d: expert outputs room for %d floats, want %d", c.T, got, c.want)
		}
	}
}
