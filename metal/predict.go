package metal

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/macpool/macpool/engine"
)

// A decode-speed prediction for Apple GPUs from the dispatch trace of one
// decode step (nothing here is measured on a GPU). The model, stated so it
// can be checked against a Mac: a token takes
//
//	Σ_kernels bytes / (share(class) × peak bandwidth)
//	+ dispatches × DispatchCost + command buffers × CommandBufferCost
//	+ SyncCost (the greedy token's round trip to the CPU)
//
// with each kernel streaming its bytes at a share of the chip's peak
// bandwidth that depends on its class (matrix-vector kernels stream
// weights; attention reads the KV cache in 32-position blocks; the rest
// are small and latency-bound).
type PredictModel struct {
	Share             map[string]float64 // by kernel class: "matvec", "attention", "deltanet", "other"
	DispatchCost      float64            // seconds per dispatch (launch + serial-dispatch barrier)
	CommandBufferCost float64            // seconds per command buffer (commit, schedule)
	SyncCost          float64            // seconds per token: wait, read the token, start encoding the next
}

// DefaultPredictModel is the model the table in docs/metal.md ("Predicted decode speed") uses:
// shares of 70% for matrix-vector kernels (an untuned SIMD-group-per-row
// kernel; tuned GEMV on Apple GPUs reaches 80-90%), 50% attention, 50%
// DeltaNet, 20% other; 2 µs per dispatch, 20 µs per command buffer, 60 µs
// per token of CPU round trip. Assumptions, not measurements.
func DefaultPredictModel() PredictModel {
	return PredictModel{
		Share:        map[string]float64{"matvec": 0.70, "attention": 0.50, "deltanet": 0.50, "other": 0.20},
		DispatchCost: 2e-6, CommandBufferCost: 20e-6, SyncCost: 60e-6,
	}
}

// kernelClass groups kernels by how they use memory bandwidth.
func kernelClass(kernel string) string {
	switch {
	case kernel == "matmul" || kernel == "matmul_gate_up" || kernel == "moe_matmul" || kernel == "moe_gate_up" || kernel == "moe_down_combine" || kernel == "embed":
		return "matvec"
	case strings.HasPrefix(kernel, "attention"):
		return "attention"
	case strings.HasPrefix(kernel, "dn_"):
		return "deltanet"
	}
	return "other"
}

// PredictChips are the chips of the prediction table with the bandwidth
// used (GB/s): Apple's published figures (PeakBandwidth), and for the M5
// Max the 614 GB/s that Lily's measured 194.7 tok/s (≈52%) refers to.
var PredictChips = []struct {
	Name string
	GBs  float64
}{{"M4 Pro", 273}, {"M4 Max", 546}, {"M5 Max", 614}, {"M3 Ultra", 819}}

// DecodeStep is one decode step's dispatch trace scaled to a model's full
// depth.
type DecodeStep struct {
	Bytes          map[string]int64 // per kernel class
	Dispatches     float64
	CommandBuffers float64
	Kernels        map[string]int // dispatches per kernel
}

// TotalBytes is the bytes one token reads and writes.
func (s DecodeStep) TotalBytes() int64 {
	var n int64
	for _, b := range s.Bytes {
		n += b
	}
	return n
}

// TokPerSec predicts the decode speed on a chip of peak GB/s.
func (s DecodeStep) TokPerSec(m PredictModel, gbs float64) float64 {
	t := m.SyncCost + s.Dispatches*m.DispatchCost + s.CommandBuffers*m.CommandBufferCost
	for class, b := range s.Bytes {
		t += float64(b) / (m.Share[class] * gbs * 1e9)
	}
	return 1 / t
}

// TraceDecode runs a prompt of ctxLen random tokens, then traces one greedy
// decode step of m on b. A model cut to its first layers (bench --layers)
// is scaled to fullLayers: the dispatches before the first layer (embed)
// and after the last (final norm, LM head, argmax) count once, those of
// the layers fullLayers/layers times (the traced layers must be whole
// cycles of the model's layer pattern).
func TraceDecode(ctx context.Context, m *engine.Model, b *Backend, ctxLen, fullLayers int) (DecodeStep, error) {
	layers := m.Config().NumHiddenLayers
	if fullLayers < layers || ctxLen < 1 {
		return DecodeStep{}, fmt.Errorf("metal: trace decode at context %d over %d of %d layers", ctxLen, layers, fullLayers)
	}
	c, err := m.NewCache()
	if err != nil {
		return DecodeStep{}, err
	}
	defer c.Free()
	r := rand.New(rand.NewPCG(1, 2))
	ids := make([]int, ctxLen+1)
	for i := range ids {
		ids[i] = r.IntN(m.VocabSize())
	}
	if _, err := m.Forward(ctx, []engine.Seq{{Cache: c, Tokens: ids[:ctxLen]}}); err != nil {
		return DecodeStep{}, err
	}
	b.StartTrace()
	_, _, err = m.ForwardGreedy(ctx, []engine.Seq{{Cache: c, Tokens: ids[ctxLen:], Greedy: true}})
	tr := b.StopTrace()
	if err != nil {
		return DecodeStep{}, err
	}
	return scaleTrace(tr, float64(fullLayers)/float64(layers)), nil
}

// scaleTrace sums a decode step's trace, the layers' part (from the first
// rmsnorm to the last residual add) counted scale times.
func scaleTrace(tr []DispatchRecord, scale float64) DecodeStep {
	first, last := len(tr), -1
	for i, d := range tr {
		if d.Kernel == "rmsnorm" && first == len(tr) {
			first = i
		}
		if d.Kernel == "add" {
			last = i
		}
	}
	s := DecodeStep{Bytes: map[string]int64{}, Kernels: map[string]int{}}
	for i, d := range tr {
		f := 1.0
		if i >= first && i <= last {
			f = scale
		}
		s.Bytes[kernelClass(d.Kernel)] += int64(f * float64(d.Bytes))
		s.Dispatches += f
		s.Kernels[d.Kernel] += int(f + 0.5)
	}
	if len(tr) > 0 {
		// Command buffers: the traced ones per dispatch, scaled with them.
		s.CommandBuffers = float64(tr[len(tr)-1].CommandBuffer+1) * s.Dispatches / float64(len(tr))
	}
	return s
}

// Table formats the prediction per chip.
func (s DecodeStep) Table(m PredictModel) string {
	var b strings.Builder
	fmt.Fprintf(&b, "predicted decode (model: kernel bytes at a share of peak bandwidth, matvec %.0f%% attention %.0f%% deltanet %.0f%% other %.0f%%; %.1f µs/dispatch, %.0f µs/command buffer, %.0f µs/token CPU round trip)\n",
		100*m.Share["matvec"], 100*m.Share["attention"], 100*m.Share["deltanet"], 100*m.Share["other"], m.DispatchCost*1e6, m.CommandBufferCost*1e6, m.SyncCost*1e6)
	fmt.Fprintf(&b, "%.3f GB/token, %.0f dispatches/token, %.1f command buffers/token\n", float64(s.TotalBytes())/1e9, s.Dispatches, s.CommandBuffers)
	names := make([]string, 0, len(s.Kernels))
	for k := range s.Kernels {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		return s.Kernels[names[i]] > s.Kernels[names[j]] || s.Kernels[names[i]] == s.Kernels[names[j]] && names[i] < names[j]
	})
	b.WriteString("dispatches per token:")
	for _, k := range names {
		fmt.Fprintf(&b, " %s %d", k, s.Kernels[k])
	}
	b.WriteString("\nGB per token:")
	for _, c := range []string{"matvec", "attention", "deltanet", "other"} {
		fmt.Fprintf(&b, " %s %.3f", c, float64(s.Bytes[c])/1e9)
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "%-9s %8s %10s %12s\n", "chip", "GB/s", "tok/s", "% of peak")
	for _, c := range PredictChips {
		tps := s.TokPerSec(m, c.GBs)
		fmt.Fprintf(&b, "%-9s %8.0f %10.1f %11.0f%%\n", c.Name, c.GBs, tps, 100*tps*float64(s.TotalBytes())/(c.GBs*1e9))
	}
	return b.String()
}
