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
// can be checked against a Mac. The GPU's time per token is
//
//	GPU = Σ_kernels bytes / (share(class) × peak bandwidth) + dispatches × DispatchCost
//
// with each kernel streaming its bytes at a share of the chip's peak
// bandwidth that depends on its class (matrix-vector kernels stream
// weights; attention reads the KV cache in 32-position blocks; the rest
// are small and latency-bound) and DispatchCost the GPU-side gap of a
// serial dispatch (launch + barrier). The CPU's time per token is
//
//	CPU = dispatches × EncodeCost + command buffers × CommandBufferCost + SyncCost
//
// (encoding through objc_msgSend, commit and scheduling, the greedy id's
// round trip: wait, read, start the next step). Plain decode (the id read
// back before the next step is encoded) pays the GPU time plus the command
// buffers and the round trip — encoding overlaps execution within a step
// (command buffers committed every SplitDispatches), not across steps:
//
//	plain = GPU + command buffers × CommandBufferCost + SyncCost
//
// Pipelined two deep (engine.DecodeGreedy: step N+1 encoded and committed
// while step N runs, ids fed on the device) the CPU's work for one step
// overlaps the GPU's for the other, so a token costs whichever is longer:
//
//	pipelined = max(GPU, CPU)
type PredictModel struct {
	Share             map[string]float64 // by kernel class: "matvec", "attention", "deltanet", "other"
	DispatchCost      float64            // GPU seconds per dispatch (launch + serial-dispatch barrier)
	EncodeCost        float64            // CPU seconds per dispatch encoded (its messages)
	CommandBufferCost float64            // seconds per command buffer (commit, schedule)
	SyncCost          float64            // seconds per token: wait, read the token, start encoding the next
}

// DefaultPredictModel is the model the table in docs/metal.md ("Predicted decode speed") uses:
// shares of 70% for matrix-vector kernels (an untuned SIMD-group-per-row
// kernel; tuned GEMV on Apple GPUs reaches 80-90%), 50% attention, 50%
// DeltaNet, 20% other; 2 µs GPU time per dispatch, 1 µs CPU time to encode
// one, 20 µs per command buffer, 60 µs per token of CPU round trip.
// Assumptions, not measurements.
func DefaultPredictModel() PredictModel {
	return PredictModel{
		Share:        map[string]float64{"matvec": 0.70, "attention": 0.50, "deltanet": 0.50, "other": 0.20},
		DispatchCost: 2e-6, EncodeCost: 1e-6, CommandBufferCost: 20e-6, SyncCost: 60e-6,
	}
}

// kernelClass groups kernels by how they use memory bandwidth.
func kernelClass(kernel string) string {
	switch {
	case kernel == "matmul" || kernel == "matmul_gate_up" || kernel == "moe_matmul" || kernel == "moe_gate_up" || kernel == "moe_route_gate_up" || kernel == "moe_down_combine" ||
		kernel == "rmsnorm_matmul" || kernel == "matmul_add" || kernel == "matmul_multi" || strings.HasPrefix(kernel, "embed"):
		return "matvec"
	case strings.HasPrefix(kernel, "attention"):
		return "attention"
	case strings.HasPrefix(kernel, "dn_"):
		return "deltanet"
	}
	return "other"
}

// PredictChips are the chips of the prediction table with the bandwidth
// used (GB/s): Apple's published figures (mtl.PeakBandwidth), and for the M5
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

// GPUTime is the GPU's time per token (see PredictModel).
func (s DecodeStep) GPUTime(m PredictModel, gbs float64) float64 {
	t := s.Dispatches * m.DispatchCost
	for class, b := range s.Bytes {
		t += float64(b) / (m.Share[class] * gbs * 1e9)
	}
	return t
}

// CPUTime is the CPU's time per token (see PredictModel).
func (s DecodeStep) CPUTime(m PredictModel) float64 {
	return s.Dispatches*m.EncodeCost + s.CommandBuffers*m.CommandBufferCost + m.SyncCost
}

// TokPerSec predicts the plain decode speed (ids read back before the
// next step is encoded) on a chip of peak GB/s.
func (s DecodeStep) TokPerSec(m PredictModel, gbs float64) float64 {
	return 1 / (s.GPUTime(m, gbs) + s.CommandBuffers*m.CommandBufferCost + m.SyncCost)
}

// PipelinedTokPerSec predicts the decode speed with two steps in flight
// (engine.DecodeGreedy on metal): the slower of GPU and CPU sets the pace.
func (s DecodeStep) PipelinedTokPerSec(m PredictModel, gbs float64) float64 {
	return 1 / max(s.GPUTime(m, gbs), s.CPUTime(m))
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

// scaleTrace sums a decode step's trace, the layers' part (everything
// between the token embedding and the gather of the output rows) counted
// scale times.
func scaleTrace(tr []DispatchRecord, scale float64) DecodeStep {
	first, last := len(tr), -1
	for i, d := range tr {
		if strings.HasPrefix(d.Kernel, "embed") && first == len(tr) {
			first = i + 1
		}
		if d.Kernel == "gather" {
			last = i - 1
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
	fmt.Fprintf(&b, "predicted decode (model: kernel bytes at a share of peak bandwidth, matvec %.0f%% attention %.0f%% deltanet %.0f%% other %.0f%%; GPU %.1f µs/dispatch; CPU %.1f µs/dispatch encoded, %.0f µs/command buffer, %.0f µs/token round trip; plain = GPU + command buffers + round trip, pipelined two deep = max(GPU, CPU))\n",
		100*m.Share["matvec"], 100*m.Share["attention"], 100*m.Share["deltanet"], 100*m.Share["other"], m.DispatchCost*1e6, m.EncodeCost*1e6, m.CommandBufferCost*1e6, m.SyncCost*1e6)
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
	fmt.Fprintf(&b, "%-9s %6s %8s %8s %10s %10s %10s\n", "chip", "GB/s", "GPU ms", "CPU ms", "plain", "pipelined", "% of peak")
	for _, c := range PredictChips {
		tps := s.PipelinedTokPerSec(m, c.GBs)
		fmt.Fprintf(&b, "%-9s %6.0f %8.2f %8.2f %10.1f %10.1f %9.0f%%\n", c.Name, c.GBs, 1e3*s.GPUTime(m, c.GBs), 1e3*s.CPUTime(m),
			s.TokPerSec(m, c.GBs), tps, 100*tps*float64(s.TotalBytes())/(c.GBs*1e9))
	}
	b.WriteString("(tok/s; % of peak for the pipelined figure)\n")
	return b.String()
}
