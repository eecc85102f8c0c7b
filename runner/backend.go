package runner

import (
	"fmt"
	"log/slog"
	"runtime"

	"github.com/macpool/macpool/engine"
	_ "github.com/macpool/macpool/engine/cpu" // registers "cpu"
)

// BackendHelp describes the names a --backend flag takes: the backends
// registered with engine.RegisterBackend plus "auto". "metal" and
// "metal-emulated" exist where the binary links package metal.
const BackendHelp = "compute backend: auto (metal on Apple silicon, else cpu), cpu, metal (macOS, Apple GPU) or metal-emulated (Linux, slow; for verification)"

func init() {
	engine.RegisterBackend("auto", autoBackend)
}

// metalDefault says whether "auto" tries the Apple GPU first.
var metalDefault = runtime.GOOS == "darwin" && runtime.GOARCH == "arm64"

// autoBackend is the "auto" backend: metal on Apple silicon, cpu elsewhere.
// If the Metal backend cannot start (no device, a kernel the Metal compiler
// rejects, a binary without package metal) or cannot honour the options
// (quantize at load), it falls back to cpu and logs why, so a Mac keeps
// serving.
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

// AutoIsMetal says whether the "auto" backend tries the Apple GPU first on
// this machine.
func AutoIsMetal() bool { return metalDefault }
