package safetensors

import (
	"path/filepath"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// TestMappingRegistered: an open file's mapping is registered with
// tensor.RegisterMapped, so a backend that copied a tensor can drop its
// pages (tensor.DropPages), and the tensor still reads the same afterwards;
// after Close the mapping is forgotten.
func TestMappingRegistered(t *testing.T) {
	data := make([]byte, 3<<14) // three 16 KiB pages' worth (whole pages on 4 and 16 KiB systems)
	for i := range data {
		data[i] = byte(i*13 + i>>9)
	}
	path := filepath.Join(t.TempDir(), "m.safetensors")
	if err := Write(path, []WriteTensor{{Name: "w", DType: "U8", Shape: []int{len(data)}, Data: data}}, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := f.Host("w")
	if err != nil {
		t.Fatal(err)
	}
	if !tensor.DropPages(h.Data) {
		t.Fatalf("DropPages of a mapped tensor: got false, want true (mapping not registered)")
	}
	for i := range data {
		if h.Data[i] != data[i] {
			t.Fatalf("byte %d after DropPages: got %d, want %d", i, h.Data[i], data[i])
		}
	}
	b := h.Data
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if tensor.DropPages(b) {
		t.Errorf("DropPages after Close: got true, want false (mapping still registered)")
	}
}
