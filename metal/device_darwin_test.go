package metal

import (
	"testing"

	"github.com/macpool/macpool/metal/gpu"
	"github.com/macpool/macpool/metal/mtl"
)

// On a Mac the same tests run on the real GPU.
const testBackendName = "metal"

func skipWithoutDevice(t testing.TB) {
	t.Helper()
	if _, err := mtl.Hardware(); err != nil {
		t.Skip(err)
	}
}

func newTestDevice(t testing.TB) gpu.Device {
	t.Helper()
	d, err := mtl.New()
	if err != nil {
		t.Skip(err)
	}
	return d
}

func TestHardware(t *testing.T) {
	h, err := mtl.Hardware()
	if err != nil {
		t.Skip(err)
	}
	t.Logf("%s", h)
	if h.Chip == "" || h.UnifiedMemory == 0 || h.RecommendedMaxWorkingSet == 0 {
		t.Errorf("incomplete hardware info: %+v", h)
	}
}
