//go:build darwin

package metal

import (
	"fmt"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/metal/mtl"
)

// On macOS the backend runs on the real GPU: engine.Options{Backend: "metal"}.
func init() {
	engine.RegisterBackend("metal", func(o engine.Options) (engine.Backend, error) {
		if o.Quantize != "" {
			return nil, fmt.Errorf("metal: --quantize %q not supported yet", o.Quantize)
		}
		dev, err := mtl.New()
		if err != nil {
			return nil, err
		}
		return New(Config{Device: dev, Name: "metal"})
	})
}

// EmulatedHostStats reports nothing on darwin: the host code talks to the
// real Objective-C runtime (use the Mac checklist in docs/metal.md).
func EmulatedHostStats() (s HostStats, ok bool) { return HostStats{}, false }
