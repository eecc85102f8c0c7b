//go:build linux

package metal

import (
	"fmt"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/metal/emu"
	"github.com/macpool/macpool/metal/mtl"
	"github.com/macpool/macpool/metal/mtl/fake"
)

// On Linux the backend runs for verification only (slow):
// engine.Options{Backend: "metal-emulated"}, `--backend metal-emulated`. It
// goes through the host code a Mac runs (metal/mtl) against the fake
// Objective-C runtime and Metal device (metal/mtl/fake), whose kernels run
// in the emulator; EmulatedHostStats reports the messages and violations.
func init() {
	engine.RegisterBackend("metal-emulated", func(o engine.Options) (engine.Backend, error) {
		if o.Quantize != "" {
			return nil, fmt.Errorf("metal: --quantize %q not supported yet", o.Quantize)
		}
		if _, err := emu.FindCompiler(); err != nil {
			return nil, err
		}
		cfg := fake.DefaultConfig()
		cfg.Emu.Workers = o.Threads
		if err := fake.Configure(cfg); err != nil {
			return nil, err
		}
		dev, err := mtl.New()
		if err != nil {
			return nil, err
		}
		return New(Config{Device: dev, Name: "metal-emulated"})
	})
}

// EmulatedHostStats reports what the fake Objective-C runtime saw in this
// process: messages sent by the host code, messages checked against
// Apple's selector table, rules broken. ok is false where the host code
// runs on the real runtime (darwin).
func EmulatedHostStats() (s HostStats, ok bool) {
	f := fake.Snapshot()
	return HostStats{Messages: f.Messages, Checked: f.Checked, Violations: f.Violations, First: f.First}, true
}
