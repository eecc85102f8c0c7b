package loadtest

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/checkpoint"
	_ "github.com/macpool/macpool/engine/cpu"
	_ "github.com/macpool/macpool/engine/qwen"
	"github.com/macpool/macpool/engine/synth"
)

// residentConfig is a dense Qwen3 big enough that whole pages dominate
// (12-45 MB files) and small enough to build and load in well under a
// second.
var residentConfig = map[string]any{
	"model_type": "qwen3", "hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2,
	"num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64, "vocab_size": 16384,
	"max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 1e6, "tie_word_embeddings": false,
}

// TestResidentOnce loads safetensors checkpoints whose matrices the CPU
// backend copies at upload (MLX 4/8-bit: packed for the kernels; bf16 with
// Quantize q8: quantized) and checks that the file's mapped pages are no
// longer resident afterwards (issue #4: a loaded model resident once, not
// as the mapping plus the copy). It reads the mapping's Rss from
// /proc/self/smaps, so other memory of the test process does not matter.
// The model must still compute after the pages were dropped.
func TestResidentOnce(t *testing.T) {
	js, err := json.Marshal(residentConfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := checkpoint.ParseConfig("config.json", js, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		quant    synth.Quant
		quantize string
	}{{synth.MLX4, ""}, {synth.MLX8, ""}, {synth.BF16, "q8"}} {
		t.Run(string(c.quant)+c.quantize, func(t *testing.T) {
			sm, err := synth.New(cfg, c.quant, 1, 0)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(t.TempDir(), "model")
			if err := checkpoint.WriteMLX(dir, js, sm); err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, "model.safetensors")
			st, err := os.Stat(file)
			if err != nil {
				t.Fatal(err)
			}
			m, err := engine.Load(dir, engine.Options{Threads: 2, Quantize: c.quantize})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			rss, maps := mappedRSS(t, file)
			if maps == 0 {
				t.Fatalf("%s is not mapped after the load", file)
			}
			t.Logf("file %d bytes, mapped pages resident after load: %d bytes (%.1f%%)", st.Size(), rss, 100*float64(rss)/float64(st.Size()))
			if rss > st.Size()/10 {
				t.Errorf("mapped pages resident after load: got %d of %d file bytes, want < 10%% (the copies made at upload did not release them)", rss, st.Size())
			}
			cache, err := m.NewCache()
			if err != nil {
				t.Fatal(err)
			}
			defer cache.Free()
			out, err := m.Forward(context.Background(), []engine.Seq{{Cache: cache, Tokens: []int{1, 2, 3, 4000, 16383}}})
			if err != nil {
				t.Fatal(err)
			}
			var sum float64
			for _, v := range out[0] {
				sum += float64(v) * float64(v)
			}
			if len(out[0]) != 16384 || !(sum > 0) {
				t.Errorf("logits after dropping the pages: %d values, sum of squares %v", len(out[0]), sum)
			}
		})
	}
}

// mappedRSS sums the Rss of this process's mappings of path
// (/proc/self/smaps) and counts them.
func mappedRSS(t *testing.T, path string) (rss int64, maps int) {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	in := false
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":") {
			in = len(fields) >= 6 && strings.Join(fields[5:], " ") == path
			if in {
				maps++
			}
			continue
		}
		if in && len(fields) == 3 && fields[0] == "Rss:" {
			kb, err := strconv.ParseInt(fields[1], 10, 64)
			if err != nil {
				t.Fatalf("smaps line %q: %v", line, err)
			}
			rss += kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rss, maps
}
