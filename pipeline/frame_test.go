package pipeline

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/macpool/macpool/engine/tensor"
)

// testFrame is a batch of sequences of the given token counts with random
// hidden values of width cols, including the values a lossy or
// canonicalising encoder would change: -0, ±Inf, a NaN payload, subnormals.
func testFrame(seed uint64, cols int, enc Encoding, counts ...int) *Frame {
	r := rand.New(rand.NewPCG(seed, 7))
	f := &Frame{Batch: r.Uint64(), Cols: cols, Encoding: enc}
	for i, n := range counts {
		s := Seq{ID: r.Uint64(), Pos: r.IntN(1 << 20), PromptEnd: r.IntN(1 << 20), AllLogits: i%2 == 0, Greedy: i%3 == 1,
			Sample: i%3 == 2, Snapshot: i%4 == 3}
		for range n {
			s.Tokens = append(s.Tokens, r.IntN(1<<32))
		}
		f.Seqs = append(f.Seqs, s)
		f.Rows += n
	}
	f.Hidden = make([]float32, f.Rows*cols)
	for i := range f.Hidden {
		f.Hidden[i] = float32(r.NormFloat64() * 3)
	}
	special := []float32{float32(math.Copysign(0, -1)), float32(math.Inf(1)), float32(math.Inf(-1)),
		math.Float32frombits(0x7fc01234), math.Float32frombits(0x00000007)}
	for i, v := range special {
		if i < len(f.Hidden) {
			f.Hidden[i] = v
		}
	}
	return f
}

func sameFrame(t *testing.T, got, want *Frame, exact bool) {
	t.Helper()
	if got.Kind != want.Kind || !bytes.Equal(got.Payload, want.Payload) {
		t.Fatalf("kind %v payload %q, want %v %q", got.Kind, got.Payload, want.Kind, want.Payload)
	}
	if got.Batch != want.Batch || got.Rows != want.Rows || got.Cols != want.Cols || got.Encoding != want.Encoding || len(got.Seqs) != len(want.Seqs) {
		t.Fatalf("header: got batch %d [%d×%d] %v %d seqs, want %d [%d×%d] %v %d seqs",
			got.Batch, got.Rows, got.Cols, got.Encoding, len(got.Seqs), want.Batch, want.Rows, want.Cols, want.Encoding, len(want.Seqs))
	}
	for i := range want.Seqs {
		g, w := got.Seqs[i], want.Seqs[i]
		if g.ID != w.ID || g.Pos != w.Pos || g.PromptEnd != w.PromptEnd || g.AllLogits != w.AllLogits || g.Greedy != w.Greedy ||
			g.Sample != w.Sample || g.Logits != w.Logits || g.Snapshot != w.Snapshot || !slices.Equal(g.Tokens, w.Tokens) {
			t.Fatalf("sequence %d: got %+v, want %+v", i, g, w)
		}
	}
	if len(got.Hidden) != len(want.Hidden) {
		t.Fatalf("%d hidden values, want %d", len(got.Hidden), len(want.Hidden))
	}
	for i, w := range want.Hidden {
		if !exact {
			w = tensor.F16ToF32(tensor.F32ToF16(w))
		}
		if math.Float32bits(got.Hidden[i]) != math.Float32bits(w) {
			t.Fatalf("hidden[%d] = %#x, want %#x", i, math.Float32bits(got.Hidden[i]), math.Float32bits(w))
		}
	}
}

// Frames round-trip: float32 values bit for bit (the pipeline's exactness
// rests on it), f16 as the f16 rounding of each value; several frames on
// one stream, read into one reused Frame.
func TestFrameRoundTrip(t *testing.T) {
	var stream bytes.Buffer
	var frames []*Frame
	for i, tc := range []struct {
		cols   int
		enc    Encoding
		counts []int
	}{
		{2048, F32, []int{1}},
		{4096, F32, []int{1, 1, 1, 1, 1, 1, 1, 1}},
		{96, F32, []int{64, 21}},
		{128, F16, []int{5, 1, 3}},
		{7, F32, []int{512}},
	} {
		f := testFrame(uint64(i), tc.cols, tc.enc, tc.counts...)
		frames = append(frames, f)
		if _, err := writeFrame(&stream, f, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Control frames: a result (tokens and a logits row), an attach with
	// a payload, a forget of sequences without tokens.
	ctl := []*Frame{
		{Kind: Result, Batch: 9, Seqs: []Seq{{ID: 1, Tokens: []int{42}}, {ID: 2, Logits: true}}, Rows: 1, Cols: 3, Hidden: []float32{1, -2, 3}},
		{Kind: Attach, Batch: 10, Seqs: []Seq{{ID: 3, Pos: 64, Tokens: []int{5, 6, 7}}}, Rows: 3, Payload: []byte(`{"x":1}`)},
		{Kind: Forget, Seqs: []Seq{{ID: 4}, {ID: 5}}, Payload: []byte{}},
		{Kind: Failed, Batch: 11, Payload: []byte("stage 2: boom")},
	}
	for _, f := range ctl {
		frames = append(frames, f)
		if _, err := writeFrame(&stream, f, nil); err != nil {
			t.Fatal(err)
		}
	}
	var got Frame
	var buf []byte
	for i, want := range frames {
		var err error
		if buf, err = readFrame(&stream, &got, buf, 1<<30); err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		sameFrame(t, &got, want, want.Encoding == F32)
	}
	if _, err := readFrame(&stream, &got, buf, 1<<30); err != io.EOF {
		t.Errorf("after the last frame: got %v, want io.EOF", err)
	}
}

// The portable (big-endian host) path writes the same bytes as the
// memory-view path.
func TestFrameEncodingPortable(t *testing.T) {
	f := testFrame(3, 33, F32, 2, 3)
	var fast, slow bytes.Buffer
	if _, err := writeFrame(&fast, f, nil); err != nil {
		t.Fatal(err)
	}
	nativeLE = false
	defer func() { nativeLE = true }()
	if _, err := writeFrame(&slow, f, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fast.Bytes(), slow.Bytes()) {
		t.Fatal("portable encoding differs from the native one")
	}
	var got Frame
	if _, err := readFrame(&slow, &got, nil, 1<<30); err != nil {
		t.Fatal(err)
	}
	sameFrame(t, &got, f, true)
}

func TestFrameRejects(t *testing.T) {
	good := testFrame(1, 8, F32, 2, 1)
	var enc bytes.Buffer
	if _, err := writeFrame(&enc, good, nil); err != nil {
		t.Fatal(err)
	}
	raw := enc.Bytes()
	mutate := func(fn func(b []byte) []byte) []byte {
		return fn(append([]byte(nil), raw...))
	}
	le := binary.LittleEndian
	for _, tc := range []struct {
		name string
		data []byte
		max  int
		want error
		text string
	}{
		{"too large", raw, 64, ErrFrameTooLarge, "limit 64"},
		{"short header", mutate(func(b []byte) []byte { le.PutUint32(b, 8); return b }), 1 << 20, ErrBadFrame, "shorter than the header"},
		{"version", mutate(func(b []byte) []byte { b[4] = 9; return b }), 1 << 20, ErrBadFrame, "version 9"},
		{"encoding", mutate(func(b []byte) []byte { b[5] = 7; return b }), 1 << 20, ErrBadFrame, "encoding(7)"},
		{"kind", mutate(func(b []byte) []byte { le.PutUint16(b[6:], 9); return b }), 1 << 20, ErrBadFrame, "kind(9)"},
		{"payload", mutate(func(b []byte) []byte { le.PutUint32(b[4+28:], 1<<20); return b }), 1 << 20, ErrBadFrame, "do not make"},
		{"rows mismatch", mutate(func(b []byte) []byte { le.PutUint32(b[4+16:], 4); return b }), 1 << 20, ErrBadFrame, "do not make"},
		{"tokens vs rows", mutate(func(b []byte) []byte {
			// Second sequence claims 0 tokens.
			le.PutUint32(b[4+headerSize+seqHead+8+17:], 0)
			return b
		}), 1 << 20, ErrBadFrame, "sequence of 0 tokens"},
		{"truncated", raw[:len(raw)-3], 1 << 20, io.ErrUnexpectedEOF, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var f Frame
			_, err := readFrame(bytes.NewReader(tc.data), &f, nil, tc.max)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
				t.Errorf("got %v, want %v containing %q", err, tc.want, tc.text)
			}
		})
	}
	// The sender refuses frames whose shape does not add up.
	for _, tc := range []struct {
		name string
		fn   func(f *Frame)
		text string
	}{
		{"rows", func(f *Frame) { f.Rows++ }, "rows, the data frame's sequences make"},
		{"kind", func(f *Frame) { f.Kind = numKinds }, "kind(8)"},
		{"values", func(f *Frame) { f.Hidden = f.Hidden[1:] }, "hidden values"},
		{"empty seq", func(f *Frame) { f.Seqs[0].Tokens = nil }, "no tokens"},
		{"token", func(f *Frame) { f.Seqs[0].Tokens[0] = -1 }, "token -1 out of range"},
		{"encoding", func(f *Frame) { f.Encoding = 3 }, "encoding(3)"},
	} {
		f := testFrame(1, 8, F32, 2, 1)
		tc.fn(f)
		if _, err := writeFrame(io.Discard, f, nil); !errors.Is(err, ErrBadFrame) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: got %v, want ErrBadFrame containing %q", tc.name, err, tc.text)
		}
	}
}

// FuzzReadFrame: any input is either refused with an error or decodes into
// a frame that encodes and decodes again to the same frame; never a panic or
// a huge allocation (counts are checked against the length first).
func FuzzReadFrame(f *testing.F) {
	for i, counts := range [][]int{{1}, {2, 3}, {4}} {
		var b bytes.Buffer
		writeFrame(&b, testFrame(uint64(i), 3, F32, counts...), nil)
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fr Frame
		if _, err := readFrame(bytes.NewReader(data), &fr, nil, 1<<20); err != nil {
			return
		}
		var out bytes.Buffer
		if _, err := writeFrame(&out, &fr, nil); err != nil {
			t.Fatalf("decoded frame does not re-encode: %v", err)
		}
		var again Frame
		if _, err := readFrame(&out, &again, nil, 1<<20); err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if fr.Encoding == F32 {
			sameFrame(t, &again, &fr, true)
		}
	})
}
