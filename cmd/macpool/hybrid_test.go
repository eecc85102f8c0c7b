package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"

	"github.com/macpool/macpool/internal/reftest"
)

var hybridFixtures = []string{"qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"}

// `macpool run` reproduces greedy_out of the hybrid and MoE fixtures.
func TestRunGreedyIDsHybrid(t *testing.T) {
	testRunGreedyIDs(t, hybridFixtures)
}

// `macpool logits` writes logits within 1e-4 relative L2 of the references at every
// position.
func TestLogitsHybrid(t *testing.T) {
	for _, name := range hybridFixtures {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join("../../testdata/hf", name)
			r := reftest.ReadRef(t, dir)
			out := filepath.Join(t.TempDir(), "logits.f32")
			var stdout, stderr bytes.Buffer
			if err := runLogits(context.Background(), []string{"--model", dir, "--tokens", joinIDs(r.InputIDs, ","),
				"--out", out, "--threads", "2"}, &stdout, &stderr); err != nil {
				t.Fatalf("logits: %v (stderr %q)", err, stderr.String())
			}
			got, want := reftest.ReadF32(t, out), reftest.ReadF32(t, filepath.Join(dir, "ref_logits.f32"))
			if len(got) != len(want) {
				t.Fatalf("%d logits, want %d", len(got), len(want))
			}
			V := r.LogitsShape[1]
			reftest.CheckPositions(t, got, want, V, r.LogitsShape[0], 1e-4)
		})
	}
}
