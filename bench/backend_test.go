package bench

import (
	"bytes"
	"testing"
)

func TestPrintBackendFigures(t *testing.T) {
	for _, c := range []struct {
		f    *benchBackend
		want string
	}{
		{nil, ""},
		{&benchBackend{Backend: "metal", Chip: "Apple M2 Pro", GPUCores: 19, WorkingSetBytes: 22e9, PeakGBs: 200, BandwidthShare: 0.61},
			"backend  metal on Apple M2 Pro, 19 GPU cores, working set 22.0 GB\nshare        61.0 %     of the chip's 200 GB/s memory bandwidth (bandwidth_share 0.610)\n"},
		{&benchBackend{Backend: "metal", Chip: "Apple M9"}, "backend  metal on Apple M9\nshare    unknown      (chip \"Apple M9\" not in the bandwidth table)\n"},
	} {
		var b bytes.Buffer
		printBackendFigures(&b, c.f)
		if b.String() != c.want {
			t.Errorf("got %q, want %q", b.String(), c.want)
		}
	}
}
