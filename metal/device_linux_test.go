package metal

import (
	"os"
	"testing"

	"github.com/macpool/macpool/metal/emu"
	"github.com/macpool/macpool/metal/gpu"
)

const testBackendName = "metal-emulated"

// skipWithoutDevice skips only when clang++ is missing and CI is unset.
func skipWithoutDevice(t testing.TB) {
	t.Helper()
	if _, err := emu.FindCompiler(); err != nil {
		if os.Getenv("CI") == "" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
}

func newTestDevice(t testing.TB) gpu.Device {
	t.Helper()
	skipWithoutDevice(t)
	d, err := emu.New(emu.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}
