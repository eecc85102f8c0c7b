package safetensors

import (
	"bytes"
	"path/filepath"
	"testing"
)

func TestWriteRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.safetensors")
	a := []byte{1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0}
	b := []byte{0x80, 0x3f, 0, 0x40}
	err := Write(path, []WriteTensor{
		{Name: "w.b", DType: "BF16", Shape: []int{2}, Data: b},
		{Name: "w.a", DType: "I32", Shape: []int{3, 1}, Data: a},
	}, map[string]string{"format": "pt"})
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Header().DataStart%8 != 0 {
		t.Errorf("data starts at %d, want a multiple of 8", f.Header().DataStart)
	}
	if got := f.Metadata()["format"]; got != "pt" {
		t.Errorf("metadata format = %q, want pt", got)
	}
	for name, want := range map[string][]byte{"w.a": a, "w.b": b} {
		got, err := f.Bytes(name)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if info, _ := f.Info("w.a"); len(info.Shape) != 2 || info.Shape[0] != 3 || info.DType != "I32" {
		t.Errorf("w.a info = %+v", info)
	}
}

func TestWriteErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		ts   []WriteTensor
	}{
		{"size", []WriteTensor{{Name: "x", DType: "F32", Shape: []int{2}, Data: make([]byte, 4)}}},
		{"dtype", []WriteTensor{{Name: "x", DType: "F99", Shape: []int{1}, Data: make([]byte, 4)}}},
		{"dup", []WriteTensor{{Name: "x", DType: "U8", Shape: []int{1}, Data: []byte{1}}, {Name: "x", DType: "U8", Shape: []int{1}, Data: []byte{1}}}},
	} {
		if err := Write(filepath.Join(dir, tc.name), tc.ts, nil); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}
