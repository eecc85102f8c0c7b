//go:build linux

package metal

import (
	"fmt"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/metal/emu"
)

// On Linux the backend runs on the emulator, for verification only (slow):
// engine.Options{Backend: "metal-emulated"}, `--backend metal-emulated`.
func init() {
	engine.RegisterBackend("metal-emulated", func(o engine.Options) (engine.Backend, error) {
		if o.Quantize != "" {
			return nil, fmt.Errorf("metal: --quantize %q not supported yet", o.Quantize)
		}
		cfg := emu.DefaultConfig()
		cfg.Workers = o.Threads
		dev, err := emu.New(cfg)
		if err != nil {
			return nil, err
		}
		return New(Config{Device: dev, Name: "metal-emulated"})
	})
}
