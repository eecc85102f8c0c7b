package mtl

import "testing"

func TestPeakBandwidth(t *testing.T) {
	for _, c := range []struct {
		chip  string
		cores int
		want  float64
		ok    bool
	}{
		{"Apple M1", 8, 68.25, true},
		{"Apple M2 Pro", 19, 200, true},
		{"Apple M3 Max", 30, 300, true},
		{"Apple M3 Max", 40, 400, true},
		{"Apple M3 Max", 0, 400, true},
		{"Apple M4 Max", 32, 410, true},
		{"Apple M4 Max", 40, 546, true},
		{"Apple M5", 10, 153, true},
		{"Apple M5 Pro", 20, 307, true},
		{"Apple M5 Max", 40, 614, true},
		{" Apple M2 Ultra ", 76, 800, true},
		{"Apple M9 Hyper", 80, 0, false},
		{"metal-emulated", 0, 0, false},
		{"", 0, 0, false},
	} {
		got, ok := PeakBandwidth(c.chip, c.cores)
		if got != c.want || ok != c.ok {
			t.Errorf("PeakBandwidth(%q, %d) = %v, %v; want %v, %v", c.chip, c.cores, got, ok, c.want, c.ok)
		}
	}
}
