package metal

import (
	"fmt"
	"os"
	"testing"

	"github.com/macpool/macpool/metal/emu"
	"github.com/macpool/macpool/metal/gpu"
	"github.com/macpool/macpool/metal/mtl"
	"github.com/macpool/macpool/metal/mtl/fake"
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

// newTestDevice is the host code a Mac runs (metal/mtl) on the fake
// Objective-C runtime and Metal device; the test fails if it breaks a rule.
func newTestDevice(t testing.TB) gpu.Device {
	t.Helper()
	skipWithoutDevice(t)
	before := fake.Snapshot().Violations
	t.Cleanup(func() {
		if s := fake.Snapshot(); s.Violations > before {
			t.Errorf("%d new Objective-C/Metal violations: %v", s.Violations-before, s.First)
		}
	})
	d, err := mtl.New()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestMain fails the package if any test (also those loading models by
// backend name) broke a rule of the fake runtime.
func TestMain(m *testing.M) {
	code := m.Run()
	if s, _ := EmulatedHostStats(); s.Violations > 0 {
		fmt.Fprintln(os.Stderr, s, s.First)
		code = 1
	} else if s.Messages > 0 {
		fmt.Fprintln(os.Stderr, s)
	}
	os.Exit(code)
}
