package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

var hybridFixtures = []string{"qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"}

// `macpool run` reproduces greedy_out of the hybrid and MoE fixtures.
func TestRunGreedyIDsHybrid(t *testing.T) {
	for _, name := range hybridFixtures {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("../../testdata/hf", name)
			r := readRef(t, dir)
			var stdout, stderr bytes.Buffer
			err := runRun(context.Background(), []string{"--model", dir, "--tokens", joinIDs(r.GreedyPrompt, ","),
				"--max-tokens", strconv.Itoa(len(r.GreedyOut)), "--output", "ids", "--threads", "2"}, &stdout, &stderr)
			if err != nil {
				t.Fatalf("run: %v (stderr %q)", err, stderr.String())
			}
			if got, want := stdout.String(), joinIDs(r.GreedyOut, " ")+"\n"; got != want {
				t.Errorf("stdout %q, want %q", got, want)
			}
		})
	}
}

// `macpool logits` writes logits within 1e-4 relative L2 of the references at every
// position.
func TestLogitsHybrid(t *testing.T) {
	for _, name := range hybridFixtures {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("../../testdata/hf", name)
			r := readRef(t, dir)
			out := filepath.Join(t.TempDir(), "logits.f32")
			var stdout, stderr bytes.Buffer
			if err := runLogits(context.Background(), []string{"--model", dir, "--tokens", joinIDs(r.InputIDs, ","),
				"--out", out, "--threads", "2"}, &stdout, &stderr); err != nil {
				t.Fatalf("logits: %v (stderr %q)", err, stderr.String())
			}
			got, want := hybridReadF32(t, out), hybridReadF32(t, filepath.Join(dir, "ref_logits.f32"))
			if len(got) != len(want) {
				t.Fatalf("%d logits, want %d", len(got), len(want))
			}
			V := r.LogitsShape[1]
			for p := 0; p < r.LogitsShape[0]; p++ {
				var num, den float64
				for i := p * V; i < (p+1)*V; i++ {
					d := float64(got[i]) - float64(want[i])
					num += d * d
					den += float64(want[i]) * float64(want[i])
				}
				if e := math.Sqrt(num / den); e >= 1e-4 {
					t.Errorf("position %d: relative L2 error %.3g, want < 1e-4", p, e)
				}
			}
		})
	}
}

func hybridReadF32(t *testing.T, path string) []float32 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}
