package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

var update = flag.Bool("update", false, "rewrite golden files")

const fixtures = "../../testdata/gguf"

func fixtureFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(fixtures, "*.gguf"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures in %s: %v", fixtures, err)
	}
	return files
}

func openT(t *testing.T, path string) *File {
	t.Helper()
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFixturesConfig(t *testing.T) {
	dense := Config{
		ModelType: "qwen3", HiddenSize: 256, IntermediateSize: 512, NumHiddenLayers: 2,
		NumAttentionHeads: 4, NumKeyValueHeads: 2, HeadDim: 64, VocabSize: 1024,
		MaxPositionEmbeddings: 4096, RMSNormEps: 1e-6, RopeTheta: 1e6, PartialRotaryFactor: 1,
		LayerTypes: []string{"full_attention", "full_attention"}, BOSTokenID: 1, EOSTokenIDs: []int{2},
	}
	moe := dense
	moe.ModelType = "qwen3_moe"
	moe.NumExperts, moe.NumExpertsPerTok, moe.MoEIntermediateSize = 8, 2, 256
	moe.DecoderSparseStep, moe.NormTopKProb = 1, true
	for _, path := range fixtureFiles(t) {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f := openT(t, path)
			got, err := f.Config()
			if err != nil {
				t.Fatal(err)
			}
			want := &dense
			if strings.HasPrefix(filepath.Base(path), "qwen3moe") {
				want = &moe
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("config:\n got %+v\nwant %+v", got, want)
			}
			if f.Version() != 3 || f.Alignment() != 32 {
				t.Errorf("version %d alignment %d, want 3 and 32", f.Version(), f.Alignment())
			}
		})
	}
}

// TestFixturesTensors lists every canonical tensor of every fixture with its
// format and shape against testdata/tensors.golden, and decodes all of them.
func TestFixturesTensors(t *testing.T) {
	var out bytes.Buffer
	for _, path := range fixtureFiles(t) {
		f := openT(t, path)
		fmt.Fprintf(&out, "# %s\n", filepath.Base(path))
		ts, err := f.Tensors()
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range f.Names() {
			h := ts[name]
			fmt.Fprintf(&out, "%s %v %v\n", name, h.Format, h.Shape)
			if _, err := h.Float32s(); err != nil {
				t.Errorf("%s: %v", path, err)
			}
		}
	}
	golden := filepath.Join("testdata", "tensors.golden")
	if *update {
		if err := os.WriteFile(golden, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("tensor list differs from %s (run with -update and review the diff)", golden)
	}
}

// TestExpertViews checks that expert e of a stacked tensor is rows
// [e*out, (e+1)*out) of the stacked matrix and aliases the same bytes.
func TestExpertViews(t *testing.T) {
	f := openT(t, filepath.Join(fixtures, "qwen3moe-q4_k_m.gguf"))
	for _, part := range []string{"gate", "up", "down"} {
		stacked, err := f.Raw("blk.1.ffn_" + part + "_exps.weight")
		if err != nil {
			t.Fatal(err)
		}
		all, err := stacked.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		for e := range 8 {
			h, err := f.Tensor(fmt.Sprintf("model.layers.1.mlp.experts.%d.%s_proj.weight", e, part))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(h.Shape, stacked.Shape[1:]) {
				t.Fatalf("expert %d shape %v, want %v", e, h.Shape, stacked.Shape[1:])
			}
			if &h.Data[0] != &stacked.Data[e*len(h.Data)] {
				t.Errorf("expert %d is a copy, not a view", e)
			}
			got, err := h.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			if want := all[e*len(got) : (e+1)*len(got)]; !slices.Equal(got, want) {
				t.Errorf("expert %d %s values differ from the stacked tensor's", e, part)
			}
		}
	}
}

// TestQuantizedAgainstBF16 decodes every weight of each quantized fixture
// and compares it with the same weight of the file it was quantized from:
// a wrong bit layout gives errors of order 1, quantization noise far less.
func TestQuantizedAgainstBF16(t *testing.T) {
	tol := map[tensor.Format]float64{
		tensor.F32: 0, tensor.BF16: 0, tensor.Q8_0: 0.01, tensor.Q6_K: 0.02,
		tensor.Q5_K: 0.05, tensor.Q4_K: 0.1, tensor.Q4_0: 0.12,
	}
	check := func(t *testing.T, refPath, path string, refTol float64) {
		ref := openT(t, refPath)
		f := openT(t, path)
		seen := map[tensor.Format]float64{}
		for _, name := range f.Names() {
			h, _ := f.Tensor(name)
			r, err := ref.Tensor(name)
			if err != nil {
				t.Fatal(err)
			}
			got, err := h.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			want, err := r.Float32s()
			if err != nil {
				t.Fatal(err)
			}
			e := relL2(got, want)
			seen[h.Format] = max(seen[h.Format], e)
			if lim := tol[h.Format] + refTol; e > lim {
				t.Errorf("%s (%v): rel L2 %.4g against %s, want <= %g", name, h.Format, e, filepath.Base(refPath), lim)
			}
		}
		t.Logf("max rel L2 by format: %v", seen)
	}
	for _, q := range []string{"q8_0", "q4_0", "q4_k_m", "q6_k"} {
		t.Run("qwen3-"+q, func(t *testing.T) {
			check(t, filepath.Join(fixtures, "qwen3-bf16.gguf"), filepath.Join(fixtures, "qwen3-"+q+".gguf"), 0)
		})
	}
	for _, q := range []string{"q4_0", "q4_k_m"} {
		t.Run("qwen3moe-"+q, func(t *testing.T) {
			check(t, filepath.Join(fixtures, "qwen3moe-q8_0.gguf"), filepath.Join(fixtures, "qwen3moe-"+q+".gguf"), 0.01)
		})
	}
}

func relL2(got, want []float32) float64 {
	var num, den float64
	for i := range got {
		d := float64(got[i]) - float64(want[i])
		num += d * d
		den += float64(want[i]) * float64(want[i])
	}
	if den == 0 {
		return math.Sqrt(num)
	}
	return math.Sqrt(num / den)
}

func TestFixtureTokenizer(t *testing.T) {
	f := openT(t, filepath.Join(fixtures, "qwen3-q8_0.gguf"))
	spec, err := f.TokenizerSpec()
	if err != nil {
		t.Fatal(err)
	}
	if len(spec.Tokens) != 1024 || len(spec.TokenTypes) != 1024 || len(spec.Merges) == 0 || spec.Pre != "qwen2" {
		t.Fatalf("spec: %d tokens, %d types, %d merges, pre %q", len(spec.Tokens), len(spec.TokenTypes), len(spec.Merges), spec.Pre)
	}
	tok, err := f.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"hello world", "The quick brown fox, 1234!", "  spaces\n\nand lines"} {
		ids := tok.Encode(s)
		if got := tok.Decode(ids); got != s {
			t.Errorf("Decode(Encode(%q)) = %q (ids %v)", s, got, ids)
		}
	}
	if got := tok.EOSTokenIDs(); !slices.Equal(got, []int{2}) {
		t.Errorf("eos ids %v, want [2]", got)
	}
}

func TestSyntheticModel(t *testing.T) {
	f, err := Parse("tiny.gguf", tinyModel().bytes())
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Config()
	if err != nil {
		t.Fatal(err)
	}
	if c.ModelType != "qwen3_moe" || c.NumExperts != 4 || c.HeadDim != 16 || c.VocabSize != 8 ||
		!c.TieWordEmbeddings || c.MaxPositionEmbeddings != 128 || c.BOSTokenID != 5 {
		t.Errorf("config %+v", c)
	}
	if f.Has("lm_head.weight") {
		t.Error("tied embeddings: lm_head.weight should be absent")
	}
	// Values were written 1, 2, 3, ... in ggml order; the router is
	// [experts=4, hidden=32] with row e holding ggml row e.
	r, err := f.Tensor("model.layers.0.mlp.gate.weight")
	if err != nil {
		t.Fatal(err)
	}
	v, _ := r.Float32s()
	base := v[0]
	if !slices.Equal(r.Shape, []int{4, 32}) || v[32] != base+32 || v[1] != base+1 {
		t.Errorf("router shape %v values %v...", r.Shape, v[:2])
	}
	d, err := f.Tensor("model.layers.0.mlp.experts.3.down_proj.weight")
	if err != nil {
		t.Fatal(err)
	}
	stacked, _ := f.Raw("blk.0.ffn_down_exps.weight")
	sv, _ := stacked.Float32s()
	dv, _ := d.Float32s()
	if !slices.Equal(dv, sv[3*32*32:]) {
		t.Error("expert 3 of down_exps is not the last quarter of the stacked tensor")
	}
	tok, err := f.Tokenizer()
	if err != nil {
		t.Fatal(err)
	}
	if ids := tok.Encode("ab a<|im_end|>"); !slices.Equal(ids, []int{2, 4, 5}) {
		t.Errorf("Encode = %v, want [2 4 5]", ids)
	}

	f2, err := Parse("x.gguf", newBuilder().add("general.architecture", "mamba2").bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f2.Config(); !errors.Is(err, ErrUnsupportedArchitecture) || !strings.Contains(err.Error(), `"mamba2"`) {
		t.Errorf("mamba2: got %v, want unsupported architecture", err)
	}
	// A hybrid architecture is mapped: a file without its keys is refused
	// for the missing keys, not as unsupported.
	f3, err := Parse("y.gguf", newBuilder().add("general.architecture", "qwen35").bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f3.Config(); err == nil || errors.Is(err, ErrUnsupportedArchitecture) || !strings.Contains(err.Error(), "qwen35.ssm.conv_kernel missing") {
		t.Errorf("qwen35 without metadata: got %v, want missing-key error", err)
	}
}

func TestMetadataTypes(t *testing.T) {
	w := newBuilder()
	w.add("u8", uint8(200)).add("i8", int8(-5)).add("u16", uint16(60000)).add("i16", int16(-300))
	w.add("u32", uint32(4e9)).add("i32", int32(-7)).add("u64", uint64(1<<40)).add("i64", int64(-1<<40))
	w.add("f32", float32(0.1)).add("f64", 0.25).add("t", true).add("s", "héllo")
	w.addRaw("ai32", ValArray, arr(nil, []int32{1, -2, 3}))
	w.addRaw("af32", ValArray, arr(nil, []float32{1.5}))
	w.addRaw("abool", ValArray, arr(nil, []bool{true, false}))
	w.addRaw("aempty", ValArray, arr(nil, []string{}))
	nested := binary.LittleEndian.AppendUint32(nil, uint32(ValArray))
	nested = binary.LittleEndian.AppendUint64(nested, 2)
	nested = arr(nested, []uint16{7, 8})
	nested = arr(nested, []string{"x"})
	w.addRaw("nested", ValArray, nested)
	w.add("general.alignment", uint32(64))
	w.alignment = 64
	w.tensor("a", TypeF32, []uint64{2}, f32s(1, 2))
	w.tensor("b", TypeF32, []uint64{1}, f32s(3))
	f, err := Parse("meta.gguf", w.bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"u8": uint8(200), "i8": int8(-5), "u16": uint16(60000), "i16": int16(-300),
		"u32": uint32(4e9), "i32": int32(-7), "u64": uint64(1 << 40), "i64": int64(-1 << 40),
		"f32": float32(0.1), "f64": 0.25, "t": true, "s": "héllo",
		"ai32": []int32{1, -2, 3}, "af32": []float32{1.5}, "abool": []bool{true, false},
		"aempty": []string{}, "nested": []any{[]uint16{7, 8}, []string{"x"}},
		"general.alignment": uint32(64),
	}
	for k, w := range want {
		if got, _ := f.Value(k); !reflect.DeepEqual(got, w) {
			t.Errorf("%s = %#v, want %#v", k, got, w)
		}
	}
	if len(f.Keys()) != len(want) || f.Keys()[0] != "u8" {
		t.Errorf("keys %v", f.Keys())
	}
	if v, _ := f.Float("f32"); v != 0.1 {
		t.Errorf("Float(f32) = %v, want 0.1 (shortest float32 form)", v)
	}
	if v, ok := f.Int("u32"); !ok || v != 4e9 {
		t.Errorf("Int(u32) = %v %v", v, ok)
	}
	if v, ok := f.Ints("ai32"); !ok || !slices.Equal(v, []int{1, -2, 3}) {
		t.Errorf("Ints(ai32) = %v %v", v, ok)
	}
	b, err := f.Raw("b")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := b.Float32s(); v[0] != 3 {
		t.Errorf("tensor b = %v, want [3] (64-byte alignment)", v)
	}
	if _, err := f.Config(); !errors.Is(err, ErrUnsupportedArchitecture) {
		t.Errorf("no architecture: got %v", err)
	}
}

// TestCorrupt checks that damaged files give an error naming the file and
// the problem.
func TestCorrupt(t *testing.T) {
	good := tinyModel().bytes()
	le := binary.LittleEndian
	// Byte offsets inside tinyModel's header.
	afterKV := bytes.Index(good, []byte("token_embd.weight")) - 8 // first tensor info
	firstOffset := afterKV + 8 + len("token_embd.weight") + 4 + 2*8 + 4
	mod := func(fn func(b []byte) []byte) []byte { return fn(append([]byte(nil), good...)) }
	cases := []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "not a GGUF file"},
		{"bad magic", mod(func(b []byte) []byte { copy(b, "GGML"); return b }), "not a GGUF file"},
		{"version 1", mod(func(b []byte) []byte { le.PutUint32(b[4:], 1); return b }), "version 1 is not supported"},
		{"version 9", mod(func(b []byte) []byte { le.PutUint32(b[4:], 9); return b }), "unknown GGUF version 9"},
		{"big-endian", mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[4:], 3); return b }), "big-endian"},
		{"header truncated", good[:12], "truncated at byte 8"},
		{"absurd tensor count", mod(func(b []byte) []byte { le.PutUint64(b[8:], 1<<60); return b }), "tensor count 1152921504606846976"},
		{"absurd kv count", mod(func(b []byte) []byte { le.PutUint64(b[16:], 1<<62); return b }), "metadata count"},
		{"absurd key length", mod(func(b []byte) []byte { le.PutUint64(b[24:], 1<<63); return b }), "metadata key 0 at byte 24: length"},
		{"metadata truncated", good[:200], "truncated"},
		{"tensor infos truncated", good[:afterKV+20], "truncated"},
		{"data truncated", good[:len(good)-100], "beyond its end (63388 bytes; file truncated?)"},
		{"offset beyond end", mod(func(b []byte) []byte { le.PutUint64(b[firstOffset:], 1<<40); return b }), "tensor token_embd.weight: bytes [1099511627776, 1099511628800)"},
		{"offset huge", mod(func(b []byte) []byte { le.PutUint64(b[firstOffset:], math.MaxUint64-31); return b }), "lie beyond its end"},
		{"misaligned offset", mod(func(b []byte) []byte { le.PutUint64(b[firstOffset:], 4); return b }), "offset 4 is not a multiple of the alignment 32"},
		{"unknown type", mod(func(b []byte) []byte { le.PutUint32(b[firstOffset-4:], 99); return b }), "unknown ggml type 99"},
		{"zero dim", mod(func(b []byte) []byte { le.PutUint64(b[firstOffset-12:], 0); return b }), "dimension 1 is 0"},
		{"huge dims", mod(func(b []byte) []byte { le.PutUint64(b[firstOffset-12:], 1<<62); return b }), "overflow"},
		{"too many dims", mod(func(b []byte) []byte { le.PutUint32(b[afterKV+8+len("token_embd.weight"):], 5); return b }), "has 5 dimensions"},
		{"duplicate tensor", newBuilder().tensor("a", TypeF32, []uint64{1}, f32s(1)).tensor("a", TypeF32, []uint64{1}, f32s(1)).bytes(), `tensor "a" is listed twice`},
		{"duplicate key", newBuilder().add("k", true).add("k", true).bytes(), `metadata key "k" at byte 38 is duplicated`},
		{"bad bool", newBuilder().addRaw("k", ValBool, []byte{7}).bytes(), "bool value 7"},
		{"unknown value type", newBuilder().addRaw("k", 13, []byte{0}).bytes(), "unknown value type 13"},
		{"absurd array", newBuilder().addRaw("k", ValArray, le.AppendUint64(le.AppendUint32(nil, uint32(ValUint32)), 1<<61)).bytes(), "length of array k"},
		{"bad alignment", newBuilder().add("general.alignment", uint32(48)).bytes(), "general.alignment 48 is not a power of two"},
		{"alignment type", newBuilder().add("general.alignment", uint64(32)).bytes(), "general.alignment has type uint64"},
		{"row not whole blocks", newBuilder().tensor("q", TypeQ8_0, []uint64{48, 1}, make([]byte, 64)).bytes(), "row length 48 is not a multiple of the Q8_0 block size 32"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("bad.gguf", tc.b)
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.HasPrefix(err.Error(), "gguf bad.gguf: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

// TestCorruptFiles opens damaged copies of a fixture from disk.
func TestCorruptFiles(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(fixtures, "qwen3-q4_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"truncated.gguf", src[:len(src)/2], "file truncated?"},
		{"header.gguf", src[:4096], "truncated"},
		{"magic.gguf", append([]byte("XXXX"), src[4:]...), "not a GGUF file"},
		{"empty.gguf", nil, "file is empty"},
	} {
		p := write(tc.name, tc.b)
		_, err := Open(p)
		if err == nil || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming the file and containing %q", tc.name, err, tc.want)
		}
	}
	if _, err := Open(filepath.Join(dir, "missing.gguf")); err == nil {
		t.Error("missing file: no error")
	}
	// A shape mismatch between metadata and tensors is caught by Config.
	b := tinyModel()
	b.add("qwen3moe.attention.head_count_kv", uint32(2)) // duplicate key: not allowed
	if _, err := Parse("dup.gguf", b.bytes()); err == nil {
		t.Error("duplicate key: no error")
	}
	w := newBuilder()
	w.add("general.architecture", "qwen3")
	w.add("qwen3.block_count", uint32(1))
	w.add("qwen3.embedding_length", uint32(32))
	w.add("qwen3.attention.head_count", uint32(2))
	w.add("qwen3.attention.layer_norm_rms_epsilon", float32(1e-6))
	w.tensor("token_embd.weight", TypeF32, []uint64{32, 4}, make([]byte, 32*4*4))
	f, err := Parse("short.gguf", w.bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Config(); err == nil || !strings.Contains(err.Error(), "is missing") {
		t.Errorf("missing layers: got %v", err)
	}
}

func TestVersion2AndUnsupportedTypes(t *testing.T) {
	w := newBuilder()
	w.version = 2
	w.tensor("q41", TypeQ4_1, []uint64{32, 2}, make([]byte, 2*20))
	w.tensor("f", TypeF32, []uint64{3}, f32s(1, 2, 3))
	f, err := Parse("v2.gguf", w.bytes())
	if err != nil {
		t.Fatal(err)
	}
	if f.Version() != 2 {
		t.Errorf("version %d, want 2", f.Version())
	}
	if ti, ok := f.Info("q41"); !ok || ti.Size != 40 || !slices.Equal(ti.Shape(), []int{2, 32}) {
		t.Errorf("q41 info %+v", ti)
	}
	if _, err := f.Raw("q41"); err == nil || !strings.Contains(err.Error(), "type Q4_1 is not supported") {
		t.Errorf("Q4_1: got %v", err)
	}
	if h, err := f.Raw("f"); err != nil || h.Format != tensor.F32 {
		t.Errorf("f: %v %v", h, err)
	}
	if _, err := f.Raw("nope"); err == nil || !strings.Contains(err.Error(), `no tensor "nope"`) {
		t.Errorf("missing: got %v", err)
	}
}

func TestSplitFileRefused(t *testing.T) {
	w := tinyModel()
	w.add("split.count", uint16(3))
	f, err := Parse("model-00001-of-00003.gguf", w.bytes())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Config(); err == nil || !strings.Contains(err.Error(), "split GGUF of 3 files") {
		t.Errorf("got %v, want a split-file error", err)
	}
}

func TestClose(t *testing.T) {
	f, err := Open(filepath.Join(fixtures, "qwen3-q8_0.gguf"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := f.Tensor("model.norm.weight"); err == nil {
		t.Error("Tensor after Close: no error")
	}
}
