package gguf

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// TestMergedGateUpExperts: a file with gate and up experts merged into
// ffn_gate_up_exps gives the same config and the same bytes under every
// canonical name as the file with separate ffn_gate_exps/ffn_up_exps, and
// each expert's gate_proj/up_proj is a view of the first/second half of its
// rows in the merged tensor, not a copy.
func TestMergedGateUpExperts(t *testing.T) {
	sep, err := Parse("sep.gguf", tinyMoE(false).bytes())
	if err != nil {
		t.Fatal(err)
	}
	mrg, err := Parse("merged.gguf", tinyMoE(true).bytes())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sep.Config()
	if err != nil {
		t.Fatal(err)
	}
	cm, err := mrg.Config()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cs, cm) {
		t.Errorf("config:\n merged %+v\n   want %+v", cm, cs)
	}
	if got, want := strings.Join(mrg.Names(), ","), strings.Join(sep.Names(), ","); got != want {
		t.Fatalf("names:\n merged %s\n   want %s", got, want)
	}
	raw, err := mrg.Raw("blk.0.ffn_gate_up_exps.weight")
	if err != nil {
		t.Fatal(err)
	}
	views := 0
	for _, name := range sep.Names() {
		a, err := sep.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := mrg.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		if b.Format != a.Format || !reflect.DeepEqual(b.Shape, a.Shape) || !bytes.Equal(b.Data, a.Data) {
			t.Errorf("%s: merged file gives %v %v, want %v %v (same bytes: %v)", name, b.Format, b.Shape, a.Format, a.Shape, bytes.Equal(b.Data, a.Data))
		}
		g, e, _ := mrg.Source(name)
		if g != "blk.0.ffn_gate_up_exps.weight" {
			continue
		}
		views++
		per := len(raw.Data) / 4 / 2
		off := 2 * e * per
		if strings.HasSuffix(name, "up_proj.weight") {
			off += per
		}
		if &b.Data[0] != &raw.Data[off] || len(b.Data) != per {
			t.Errorf("%s: not a view of bytes [%d, %d) of the merged tensor", name, off, off+per)
		}
	}
	if views != 8 {
		t.Errorf("%d canonical tensors come from ffn_gate_up_exps, want 8 (gate and up of 4 experts)", views)
	}
}

// TestMergedGateUpBadShape: a merged tensor with an odd number of rows per
// expert, or the wrong rank, cannot be split: the experts are reported
// missing, never sliced wrongly.
func TestMergedGateUpBadShape(t *testing.T) {
	for _, dims := range [][]uint64{{32, 63, 4}, {32, 64 * 4}} {
		w := tinyMoEWith(func(w *builder, _, _ []byte) {
			n := uint64(4)
			for _, d := range dims {
				n *= d
			}
			w.tensor("blk.0.ffn_gate_up_exps.weight", TypeF32, dims, make([]byte, n))
		})
		f, err := Parse("bad.gguf", w.bytes())
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.Config()
		if err == nil || !strings.Contains(err.Error(), "gate_proj.weight") || !strings.Contains(err.Error(), "is missing") {
			t.Errorf("dims %v: got error %v, want the expert gate_proj reported missing", dims, err)
		}
		if _, err := f.Tensor("model.layers.0.mlp.experts.0.up_proj.weight"); err == nil {
			t.Errorf("dims %v: got an up_proj view of an unsplittable tensor", dims)
		}
	}
}
