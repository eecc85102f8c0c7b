package safetensors

import "testing"

// FuzzParseHeader feeds arbitrary bytes as a whole file: parsing must never
// panic, and whatever it accepts must lie inside the file with consistent
// sizes. Seeds: testdata/fuzz/FuzzParseHeader.
func FuzzParseHeader(f *testing.F) {
	f.Add(goodFile())
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := ParseHeader(data, int64(len(data)))
		if err != nil {
			return
		}
		if h.DataStart < 8 || h.DataStart > int64(len(data)) {
			t.Fatalf("data start %d outside file of %d bytes", h.DataStart, len(data))
		}
		for _, ti := range h.Tensors {
			if ti.Begin < 0 || ti.End < ti.Begin || h.DataStart+ti.End > int64(len(data)) {
				t.Fatalf("tensor %q: offsets [%d, %d] outside data", ti.Name, ti.Begin, ti.End)
			}
			if got, want := ti.End-ti.Begin, int64(ti.Numel()*DTypeSize(ti.DType)); got != want {
				t.Fatalf("tensor %q: %d bytes, want %d", ti.Name, got, want)
			}
			if _, ok := h.Lookup(ti.Name); !ok {
				t.Fatalf("tensor %q not found by Lookup", ti.Name)
			}
		}
	})
}
