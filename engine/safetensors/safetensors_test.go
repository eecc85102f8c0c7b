package safetensors

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// rawEntry is one header entry as written (possibly invalid on purpose).
type rawEntry struct {
	DType   string  `json:"dtype"`
	Shape   []int   `json:"shape"`
	Offsets []int64 `json:"data_offsets"`
}

// buildFile lays out a safetensors file: header JSON (unpadded) + data.
func buildFile(header map[string]any, data []byte) []byte {
	js, _ := json.Marshal(header)
	out := make([]byte, 8, 8+len(js)+len(data))
	binary.LittleEndian.PutUint64(out, uint64(len(js)))
	out = append(out, js...)
	return append(out, data...)
}

// goodFile has a U32 tensor stored after a BF16 one (unordered on purpose is
// irrelevant to the parser; offsets decide) with an odd header length so the
// U32 data is unaligned.
func goodFile() []byte {
	data := make([]byte, 6+16)
	for i := range data {
		data[i] = byte(i + 1)
	}
	h := map[string]any{
		"__metadata__": map[string]string{"format": "mlx"},
		"b":            rawEntry{"BF16", []int{3}, []int64{16, 22}},
		"a":            rawEntry{"U32", []int{2, 2}, []int64{0, 16}},
	}
	f := buildFile(h, data)
	if (len(f)-len(data))%2 == 0 { // make the data start odd
		js, _ := json.Marshal(h)
		js = append(js, ' ')
		f = make([]byte, 8)
		binary.LittleEndian.PutUint64(f, uint64(len(js)))
		f = append(append(f, js...), data...)
	}
	return f
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOpenGood(t *testing.T) {
	p := writeFile(t, t.TempDir(), "x.safetensors", goodFile())
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Header().DataStart%2 != 1 {
		t.Fatalf("data starts at %d, test wants an odd offset", f.Header().DataStart)
	}
	if got := f.Names(); strings.Join(got, ",") != "a,b" {
		t.Errorf("names %v, want [a b]", got)
	}
	if f.Metadata()["format"] != "mlx" {
		t.Errorf("metadata %v", f.Metadata())
	}
	a, err := f.Host("a")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(a.Shape) != "[2 2]" || len(a.Data) != 16 || a.Data[0] != 1 || a.Data[15] != 16 {
		t.Errorf("a: shape %v data %v", a.Shape, a.Data)
	}
	b, _ := f.Bytes("b")
	if len(b) != 6 || b[0] != 17 {
		t.Errorf("b: %v", b)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestOpenBad(t *testing.T) {
	good := goodFile()
	withHeader := func(h map[string]any, dataLen int) []byte { return buildFile(h, make([]byte, dataLen)) }
	lenLie := append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(lenLie, uint64(len(good)))
	huge := append([]byte(nil), good...)
	binary.LittleEndian.PutUint64(huge, 1<<40)
	badJSON := make([]byte, 8)
	binary.LittleEndian.PutUint64(badJSON, 10)
	badJSON = append(badJSON, []byte(`{"a": [1,}`)...)
	for _, tc := range []struct {
		name string
		file []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"short", []byte{1, 2, 3}, "too short"},
		{"truncated", good[:len(good)-3], "run past the end"},
		{"header length past end", lenLie, "header length"},
		{"header length huge", huge, "exceeds"},
		{"bad JSON", badJSON, "header JSON"},
		{"not object", buildFile(nil, nil), "not a JSON object"},
		{"unknown dtype", withHeader(map[string]any{"t": rawEntry{"Q4", []int{2}, []int64{0, 2}}}, 2), `unknown dtype "Q4"`},
		{"offsets past end", withHeader(map[string]any{"t": rawEntry{"F32", []int{2}, []int64{0, 8}}}, 4), "run past the end"},
		{"reversed offsets", withHeader(map[string]any{"t": rawEntry{"F32", []int{0}, []int64{8, 0}}}, 8), "invalid data_offsets"},
		{"negative offsets", withHeader(map[string]any{"t": rawEntry{"U8", []int{0}, []int64{-1, -1}}}, 8), "invalid data_offsets"},
		{"size mismatch", withHeader(map[string]any{"t": rawEntry{"F32", []int{3}, []int64{0, 8}}}, 8), "8 bytes for F32 [3], want 12"},
		{"negative dim", withHeader(map[string]any{"t": rawEntry{"F32", []int{-2}, []int64{0, 8}}}, 8), "negative dimension"},
		{"three offsets", withHeader(map[string]any{"t": map[string]any{"dtype": "U8", "shape": []int{1}, "data_offsets": []int{0, 1, 2}}}, 8), "want 2"},
		{"missing dtype", withHeader(map[string]any{"t": map[string]any{"shape": []int{1}, "data_offsets": []int{0, 1}}}, 8), "missing dtype"},
		{"bad metadata", withHeader(map[string]any{"__metadata__": map[string]int{"a": 1}}, 0), "__metadata__"},
		{"overflow", withHeader(map[string]any{"t": rawEntry{"F32", []int{1 << 40, 1 << 40}, []int64{0, 8}}}, 8), "too large"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "bad.safetensors", tc.file)
			f, err := Open(p)
			if err == nil {
				f.Close()
				t.Fatalf("Open succeeded, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("got error %q, want it to name %s and contain %q", err, p, tc.want)
			}
		})
	}
}

func writeShard(t *testing.T, dir, name string, tensors map[string][]byte) {
	t.Helper()
	h := map[string]any{}
	var data []byte
	for n, b := range tensors {
		h[n] = rawEntry{"U8", []int{len(b)}, []int64{int64(len(data)), int64(len(data) + len(b))}}
		data = append(data, b...)
	}
	writeFile(t, dir, name, buildFile(h, data))
}

func writeIndex(t *testing.T, dir string, wm map[string]string) string {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{}, "weight_map": wm})
	return writeFile(t, dir, IndexFile, b)
}

func TestSharded(t *testing.T) {
	dir := t.TempDir()
	writeShard(t, dir, "model-00001-of-00002.safetensors", map[string][]byte{"a": {1, 2}, "b": {3}})
	writeShard(t, dir, "model-00002-of-00002.safetensors", map[string][]byte{"c": {4, 5, 6}})
	writeIndex(t, dir, map[string]string{"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"})
	s, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := strings.Join(s.Names(), ","); got != "a,b,c" {
		t.Errorf("names %s, want a,b,c", got)
	}
	c, err := s.Host("c")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(c.Data) != "[4 5 6]" || !strings.HasSuffix(c.Source, "model-00002-of-00002.safetensors") {
		t.Errorf("c: %v from %s", c.Data, c.Source)
	}
	if _, err := s.Host("zz"); err == nil || !strings.Contains(err.Error(), `"zz"`) {
		t.Errorf("missing tensor: got %v", err)
	}
}

func TestShardedBad(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"missing shard", func(t *testing.T, dir string) {
			writeShard(t, dir, "s1.safetensors", map[string][]byte{"a": {1}})
			writeIndex(t, dir, map[string]string{"a": "s1.safetensors", "b": "s2.safetensors"})
		}, "shard s2.safetensors is missing"},
		{"tensor not in shard", func(t *testing.T, dir string) {
			writeShard(t, dir, "s1.safetensors", map[string][]byte{"a": {1}})
			writeIndex(t, dir, map[string]string{"a": "s1.safetensors", "b": "s1.safetensors"})
		}, `tensor "b" is listed in shard s1.safetensors, which does not contain it`},
		{"bad index JSON", func(t *testing.T, dir string) {
			writeFile(t, dir, IndexFile, []byte(`{"weight_map": `))
		}, "invalid JSON"},
		{"empty weight_map", func(t *testing.T, dir string) {
			writeFile(t, dir, IndexFile, []byte(`{"metadata": {}}`))
		}, "weight_map is missing or empty"},
		{"shard path", func(t *testing.T, dir string) {
			writeIndex(t, dir, map[string]string{"a": "../x.safetensors"})
		}, "must be a file name"},
		{"corrupt shard", func(t *testing.T, dir string) {
			writeFile(t, dir, "s1.safetensors", []byte{200, 0, 0, 0, 0, 0, 0, 0, '{'})
			writeIndex(t, dir, map[string]string{"a": "s1.safetensors"})
		}, "s1.safetensors: header length 200"},
		{"no files", func(t *testing.T, dir string) {}, "no model.safetensors.index.json"},
		{"duplicate across files", func(t *testing.T, dir string) {
			writeShard(t, dir, "x1.safetensors", map[string][]byte{"a": {1}})
			writeShard(t, dir, "x2.safetensors", map[string][]byte{"a": {1}})
		}, `tensor "a" is in both`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			s, err := OpenDir(dir)
			if err == nil {
				s.Close()
				t.Fatalf("OpenDir succeeded, want error containing %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), dir) {
				t.Errorf("got error %q, want it to name %s and contain %q", err, dir, tc.want)
			}
		})
	}
}

func TestFixtures(t *testing.T) {
	dirs, _ := filepath.Glob("../../testdata/*/*/model.safetensors")
	if len(dirs) < 14 {
		t.Fatalf("found %d fixture files, want >= 14", len(dirs))
	}
	for _, p := range dirs {
		s, err := OpenDir(filepath.Dir(p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		if len(s.Names()) == 0 {
			t.Errorf("%s: no tensors", p)
		}
		s.Close()
	}
}
