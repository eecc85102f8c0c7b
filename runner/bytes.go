package runner

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Bytes is a size in bytes that reads as a number with an optional unit:
// B, KB/MB/GB/TB (powers of 1000), KiB/MiB/GiB/TiB and K/M/G/T (powers of
// 1024). It is a flag.Value, for the KV budget and memory limits.
type Bytes int64

func (b *Bytes) String() string {
	if b == nil || *b == 0 {
		return "0"
	}
	return FormatBytes(int64(*b))
}

func (b *Bytes) Set(s string) error {
	n, err := ParseBytes(s)
	if err != nil {
		return err
	}
	*b = Bytes(n)
	return nil
}

var byteUnits = []struct {
	suffix string
	scale  float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// ParseBytes parses "2GiB", "512MiB", "1.5GB", "1048576".
func ParseBytes(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	scale := 1.0
	for _, u := range byteUnits {
		if strings.HasSuffix(t, u.suffix) {
			t, scale = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.scale
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" {
		return 0, fmt.Errorf("size %q: want a number with an optional unit (e.g. 2GiB, 512MiB)", s)
	}
	if v < 0 || math.IsNaN(v) || v*scale > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: out of range", s)
	}
	return int64(v * scale), nil
}

// FormatBytes writes n in the largest binary unit that divides it.
func FormatBytes(n int64) string {
	for _, u := range []struct {
		suffix string
		scale  int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n >= u.scale && n%u.scale == 0 {
			return fmt.Sprintf("%d%s", n/u.scale, u.suffix)
		}
	}
	return strconv.FormatInt(n, 10)
}
