package bench

// Config.Backend: the backend choice, and the
// GPU figures bench prints on the metal backends (chip, GPU cores, working
// set, share of the chip's memory-bandwidth limit that decode reaches).

import (
	"context"
	"fmt"
	"io"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu"
	"github.com/macpool/macpool/metal"
	"github.com/macpool/macpool/metal/mtl"
	"github.com/macpool/macpool/runner"
)

// benchBackend are bench's figures of a non-CPU backend (embedded in
// benchResult; nil on cpu).
type benchBackend struct {
	Backend string `json:"backend"`
	Chip    string `json:"chip,omitempty"`
	// GPUCores and WorkingSetBytes (MTLDevice.recommendedMaxWorkingSetSize)
	// are read on a Mac.
	GPUCores        int    `json:"gpu_cores,omitempty"`
	WorkingSetBytes uint64 `json:"gpu_working_set_bytes,omitempty"`
	// PeakGBs is the chip's memory-bandwidth limit (mtl.PeakBandwidth);
	// BandwidthShare = bandwidth_gb_s / PeakGBs. Both absent for chips not
	// in the table and for the emulator.
	PeakGBs        float64 `json:"peak_gb_s,omitempty"`
	BandwidthShare float64 `json:"bandwidth_share,omitempty"`
	// Note says when the speed figures mean nothing (the emulator).
	Note string `json:"note,omitempty"`
}

// newBenchBackend creates bench's backend: cfg's CPU backend for "cpu" (and
// "auto" off Apple silicon), else the registered backend by name.
func newBenchBackend(name string, cfg cpu.Config, quantize string) (engine.Backend, error) {
	if name == "cpu" || (name == "auto" && !runner.AutoIsMetal()) {
		return cpu.New(cfg)
	}
	return engine.NewBackend(engine.Options{Backend: name, Threads: cfg.Threads, Quantize: quantize, ExactMatMul: cfg.ExactMatMul})
}

// backendFigures describes be for bench (nil for the CPU backend) given the
// measured decode bandwidth (GB/s).
func backendFigures(be engine.Backend, gbs float64) *benchBackend {
	mb, ok := be.(*metal.Backend)
	if !ok {
		return nil
	}
	f := &benchBackend{Backend: be.Name(), Chip: mb.Device().Name()}
	if be.Name() == "metal-emulated" {
		f.Note = "emulator: the Metal kernels run on this CPU for verification; its speed says nothing about a GPU"
		return f
	}
	if h, err := mtl.Hardware(); err == nil {
		f.GPUCores, f.WorkingSetBytes = h.GPUCores, h.RecommendedMaxWorkingSet
		if h.Chip != "" {
			f.Chip = h.Chip
		}
	}
	if peak, ok := mtl.PeakBandwidth(f.Chip, f.GPUCores); ok {
		f.PeakGBs = peak
		f.BandwidthShare = gbs / peak
	}
	return f
}

// printBackendFigures prints the backend lines of bench's text output.
func printBackendFigures(w io.Writer, f *benchBackend) {
	if f == nil {
		return
	}
	fmt.Fprintf(w, "backend  %s on %s", f.Backend, f.Chip)
	if f.GPUCores > 0 {
		fmt.Fprintf(w, ", %d GPU cores", f.GPUCores)
	}
	if f.WorkingSetBytes > 0 {
		fmt.Fprintf(w, ", working set %.1f GB", float64(f.WorkingSetBytes)/1e9)
	}
	fmt.Fprintln(w)
	switch {
	case f.Note != "":
		fmt.Fprintf(w, "note     %s\n", f.Note)
	case f.PeakGBs > 0:
		fmt.Fprintf(w, "share    %8.1f %%     of the chip's %.0f GB/s memory bandwidth (bandwidth_share %.3f)\n", 100*f.BandwidthShare, f.PeakGBs, f.BandwidthShare)
	default:
		fmt.Fprintf(w, "share    unknown      (chip %q not in the bandwidth table)\n", f.Chip)
	}
}

// benchStep decodes one token after tok and returns the greedy next one:
// on a backend that picks it on the device (engine.ArgmaxOps: metal) only
// the id comes back, elsewhere the logits are read and the argmax taken
// here, as before.
func benchStep(ctx context.Context, m *engine.Model, c *engine.Cache, tok int) (int, error) {
	if _, ok := m.Backend().(engine.ArgmaxOps); ok {
		_, toks, err := m.ForwardGreedy(ctx, []engine.Seq{{Cache: c, Tokens: []int{tok}, Greedy: true}})
		if err != nil {
			return 0, err
		}
		return toks[0], nil
	}
	out, err := m.Forward(ctx, []engine.Seq{{Cache: c, Tokens: []int{tok}}})
	if err != nil {
		return 0, err
	}
	return engine.Argmax(out[0]), nil
}

// printPredicted prints, on metal-emulated, the decode speed predicted for
// Apple GPUs (metal.TraceDecode: one traced decode step after ctxLen
// tokens, scaled to fullLayers; metal.DefaultPredictModel states the
// model). Other backends print nothing.
func printPredicted(ctx context.Context, w io.Writer, m *engine.Model, be engine.Backend, ctxLen, fullLayers int) error {
	mb, ok := be.(*metal.Backend)
	if !ok || be.Name() != "metal-emulated" {
		return nil
	}
	step, err := metal.TraceDecode(ctx, m, mb, max(ctxLen, 1), fullLayers)
	if err != nil {
		return err
	}
	fmt.Fprint(w, step.Table(metal.DefaultPredictModel()))
	return nil
}
