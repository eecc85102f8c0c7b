package main

import (
	"flag"
	"fmt"
	"log/slog"
	"runtime"

	"github.com/macpool/macpool/engine"
	_ "github.com/macpool/macpool/engine/cpu" // registers "cpu"
	_ "github.com/macpool/macpool/metal"      // registers "metal" (macOS) and "metal-emulated" (Linux)
)

// backendHelp lists the names --backend takes (engine.RegisterBackend
// names plus "auto").
const backendHelp = "compute backend: auto (metal on Apple silicon, else cpu), cpu, metal (macOS, Apple GPU) or metal-emulated (Linux, slow; for verification)"

// backendFlag adds --backend to a command that loads a model (owner: metal;
// used by run, logits and bench).
func backendFlag(fs *flag.FlagSet) *string {
	return fs.String("backend", "auto", backendHelp)
}

func init() {
	engine.RegisterBackend("auto", autoBackend)
}

// metalDefault says whether "auto" tries the Apple GPU first.
var metalDefault = runtime.GOOS == "darwin" && runtime.GOARCH == "arm64"

// autoBackend is the "auto" backend: metal on Apple silicon, cpu elsewhere.
// If the Metal backend cannot start (no device, a kernel the Metal compiler
// rejects) or cannot honour the options (--quantize), it falls back to cpu
// and logs why, so a Mac keeps serving.
func autoBackend(o engine.Options) (engine.Backend, error) {
	if metalDefault && o.Quantize == "" {
		o.Backend = "metal"
		be, err := engine.NewBackend(o)
		if err == nil {
			return be, nil
		}
		slog.Warn("metal backend unavailable; using cpu", "err", err)
	}
	o.Backend = "cpu"
	be, err := engine.NewBackend(o)
	if err != nil {
		return nil, fmt.Errorf("auto backend: %w", err)
	}
	return be, nil
}
