package qwen_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine"
)

// TestStageResidentMemory measures what loading a stage adds to a process's
// resident memory, against the whole model, each load in a fresh process.
// It needs a large file and is skipped unless MACPOOL_STAGE_RSS names one,
// e.g. a quantized GGUF (the CPU backend packs Q8_0 for VNNI and drops the
// mapped pages, so the resident figure is the packed weights):
//
//	macpool bench --synthetic qwen3-1.7b --quant q8_0 --layers 8 --write-gguf /tmp/s.gguf
//	MACPOOL_STAGE_RSS=/tmp/s.gguf go test -run TestStageResidentMemory -v ./engine/qwen/
//
// A stage must add at most its share of the bound weights plus 10 % of the
// whole model's figure (runtime, page granularity).
func TestStageResidentMemory(t *testing.T) {
	if st := os.Getenv("MACPOOL_STAGE_RSS_CHILD"); st != "" {
		stageRSSChild(t, os.Getenv("MACPOOL_STAGE_RSS"), st)
		return
	}
	path := os.Getenv("MACPOOL_STAGE_RSS")
	if path == "" || runtime.GOOS != "linux" {
		t.Skip("set MACPOOL_STAGE_RSS to a model file (Linux)")
	}
	measure := func(st engine.Stage) (rss, weights int64) {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestStageResidentMemory$", "-test.v")
		cmd.Env = append(os.Environ(), fmt.Sprintf("MACPOOL_STAGE_RSS_CHILD=%d,%d,%v", st.First, st.Last, st.NoHead))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("child %v: %v\n%s", st, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if _, rest, ok := strings.Cut(line, "STAGE_RSS "); ok {
				f := strings.Fields(rest)
				rss, _ = strconv.ParseInt(f[0], 10, 64)
				weights, _ = strconv.ParseInt(f[1], 10, 64)
				return rss, weights
			}
		}
		t.Fatalf("child %v printed no figure:\n%s", st, out)
		return 0, 0
	}
	wholeRSS, wholeW := measure(engine.Stage{})
	t.Logf("whole: resident +%.1f MB, weights %.1f MB", float64(wholeRSS)/1e6, float64(wholeW)/1e6)
	m, err := engine.Load(path, engine.Options{Threads: 1, Stage: engine.Stage{First: 0, Last: 1}})
	if err != nil {
		t.Fatal(err)
	}
	n := m.Config().NumHiddenLayers
	m.Close()
	for _, split := range splits(n) {
		for _, st := range split {
			rss, w := measure(st)
			share := float64(w) / float64(wholeW)
			t.Logf("%v: resident +%.1f MB (%.0f %% of the whole's), weights %.1f MB (%.0f %%)",
				st, float64(rss)/1e6, 100*float64(rss)/float64(wholeRSS), float64(w)/1e6, 100*share)
			if limit := int64(share*float64(wholeRSS)) + wholeRSS/10; rss > limit {
				t.Errorf("%v adds %d resident bytes, more than its share %.2f of %d + 10 %%", st, rss, share, wholeRSS)
			}
		}
	}
}

// stageRSSChild loads one stage and prints the resident memory the load
// added and the weight bytes bound.
func stageRSSChild(t *testing.T, path, spec string) {
	var st engine.Stage
	var noHead bool
	if _, err := fmt.Sscanf(strings.ReplaceAll(spec, ",", " "), "%d %d %t", &st.First, &st.Last, &noHead); err != nil {
		t.Fatal(err)
	}
	st.NoHead = noHead
	runtime.GC()
	before := vmRSS(t)
	m, err := engine.Load(path, engine.Options{Threads: 1, Stage: st})
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	fmt.Printf("STAGE_RSS %d %d\n", vmRSS(t)-before, m.WeightBytes())
	m.Close()
}

// vmRSS is this process's resident set (Linux /proc/self/status).
func vmRSS(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS in /proc/self/status")
	return 0
}
