package tensor

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestDropPages: dropping the pages of a registered read-only file mapping
// keeps its contents readable (faulted back from the page cache); heap
// memory and unregistered mappings are left alone.
func TestDropPages(t *testing.T) {
	want := make([]byte, 1<<20+123)
	for i := range want {
		want[i] = byte(i*7 + i>>11)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, want, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := syscall.Mmap(int(f.Fd()), 0, len(want), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(m)
	if !bytes.Equal(m, want) {
		t.Fatal("mapping differs from the file")
	}
	if DropPages(m[100:]) {
		t.Errorf("DropPages of an unregistered mapping: got true, want false")
	}
	RegisterMapped(m)
	if !DropPages(m[100 : len(m)-100]) {
		t.Errorf("DropPages of a registered mapping: got false, want true")
	}
	if !bytes.Equal(m, want) {
		t.Errorf("mapping changed after DropPages")
	}
	heap := bytes.Clone(want)
	if DropPages(heap) {
		t.Errorf("DropPages of heap memory: got true, want false")
	}
	if !bytes.Equal(heap, want) {
		t.Errorf("heap memory changed")
	}
	UnregisterMapped(m)
	if DropPages(m) {
		t.Errorf("DropPages after UnregisterMapped: got true, want false")
	}
}
