package cpu

import (
	"math"
	"slices"
	"testing"
)

func TestArgmax(t *testing.T) {
	inf := float32(math.Inf(1))
	rows := [][]float32{
		{1, 3, 2, 3},         // tie: lowest index
		{-inf, -inf, -5, -7}, // all negative
		{0, 0, 0, 0},         // all equal: first
		{1, 2, 3, inf},       // last
	}
	b, err := New(Config{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	x := b.NewTensor(len(rows), 4)
	b.Write(x, slices.Concat(rows...))
	got := make([]int, len(rows))
	if err := b.Argmax(x, got); err != nil {
		t.Fatal(err)
	}
	if want := []int{1, 2, 0, 3}; !slices.Equal(got, want) {
		t.Errorf("argmax %v, want %v", got, want)
	}
	if err := b.Argmax(x, make([]int, 3)); err == nil {
		t.Error("argmax into 3 of 4 rows: no error")
	}
}
