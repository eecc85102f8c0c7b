// Package reftest holds the fixture-reference helpers tests share: reading a
// fixture's ref.json and float32 little-endian logits (ref_logits.f32 and
// the like), and the relative L2 error, whole and worst per position; and
// the small random model (SynthModel) the benchmark tests run on.
package reftest

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// Ref is a fixture's ref.json.
type Ref struct {
	ModelType    string `json:"model_type"`
	InputIDs     []int  `json:"input_ids"`
	LogitsShape  []int  `json:"logits_shape"`
	GreedyPrompt []int  `json:"greedy_prompt"`
	GreedyOut    []int  `json:"greedy_out"`
}

// ReadRef reads dir/ref.json.
func ReadRef(t testing.TB, dir string) Ref {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, "ref.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Ref
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// ReadF32 reads a file of little-endian float32s.
func ReadF32(t testing.TB, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return decodeF32(b)
}

func decodeF32(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

// Load reads dir/ref.json and dir/ref_logits.f32, checking the logits' size
// against logits_shape.
func Load(t testing.TB, dir string) (Ref, []float32) {
	t.Helper()
	r := ReadRef(t, dir)
	b, err := os.ReadFile(filepath.Join(dir, "ref_logits.f32"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 4*r.LogitsShape[0]*r.LogitsShape[1] {
		t.Fatalf("ref_logits.f32: %d bytes, want %d", len(b), 4*r.LogitsShape[0]*r.LogitsShape[1])
	}
	return r, decodeF32(b)
}

// RelL2 is ||got-want|| / ||want||.
func RelL2(got, want []float32) float64 {
	var num, den float64
	for i := range want {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	return math.Sqrt(num / den)
}

// MaxRelL2 is the worst per-position relative L2 error over rows of vocab.
func MaxRelL2(got, want []float32, vocab int) float64 {
	worst := 0.0
	for p := 0; p < len(want)/vocab; p++ {
		worst = max(worst, RelL2(got[p*vocab:(p+1)*vocab], want[p*vocab:(p+1)*vocab]))
	}
	return worst
}

// CheckPositions reports, as a test error, each of the first n positions
// (rows of vocab) whose relative L2 error is not below tol, and returns the
// worst error.
func CheckPositions(t testing.TB, got, want []float32, vocab, n int, tol float64) float64 {
	t.Helper()
	worst := 0.0
	for p := range n {
		e := RelL2(got[p*vocab:(p+1)*vocab], want[p*vocab:(p+1)*vocab])
		worst = max(worst, e)
		if e >= tol {
			t.Errorf("position %d: relative L2 error %.3g, want < %g", p, e, tol)
		}
	}
	return worst
}
