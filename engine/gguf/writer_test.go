package gguf

import (
	"encoding/binary"
	"math"
)

// builder writes GGUF files for tests, independently of the parser.
type builder struct {
	version   uint32
	kv        []byte
	nKV       uint64
	infos     []byte
	nTensors  uint64
	data      []byte
	alignment int
}

func newBuilder() *builder { return &builder{version: 3, alignment: 32} }

func putStr(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// scalar encodes a Go value of a metadata type (without the type tag).
func scalar(b []byte, v any) ([]byte, ValueType) {
	le := binary.LittleEndian
	switch x := v.(type) {
	case uint8:
		return append(b, x), ValUint8
	case int8:
		return append(b, byte(x)), ValInt8
	case uint16:
		return le.AppendUint16(b, x), ValUint16
	case int16:
		return le.AppendUint16(b, uint16(x)), ValInt16
	case uint32:
		return le.AppendUint32(b, x), ValUint32
	case int32:
		return le.AppendUint32(b, uint32(x)), ValInt32
	case uint64:
		return le.AppendUint64(b, x), ValUint64
	case int64:
		return le.AppendUint64(b, uint64(x)), ValInt64
	case float32:
		return le.AppendUint32(b, math.Float32bits(x)), ValFloat32
	case float64:
		return le.AppendUint64(b, math.Float64bits(x)), ValFloat64
	case bool:
		if x {
			return append(b, 1), ValBool
		}
		return append(b, 0), ValBool
	case string:
		return putStr(b, x), ValString
	}
	panic("builder: unsupported value")
}

// arr encodes an array value: element type, count, elements.
func arr[T any](b []byte, xs []T) []byte {
	var et ValueType
	var body []byte
	for _, x := range xs {
		body, et = scalar(body, any(x))
	}
	if len(xs) == 0 {
		_, et = scalar(nil, any(*new(T)))
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(et))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(xs)))
	return append(b, body...)
}

func (w *builder) add(key string, v any) *builder {
	w.kv = putStr(w.kv, key)
	var body []byte
	var t ValueType
	body, t = scalar(nil, v)
	w.kv = binary.LittleEndian.AppendUint32(w.kv, uint32(t))
	w.kv = append(w.kv, body...)
	w.nKV++
	return w
}

// addRaw adds a key whose type tag and encoded value are given.
func (w *builder) addRaw(key string, t ValueType, enc []byte) *builder {
	w.kv = putStr(w.kv, key)
	w.kv = binary.LittleEndian.AppendUint32(w.kv, uint32(t))
	w.kv = append(w.kv, enc...)
	w.nKV++
	return w
}

// tensor appends a tensor with ggml dims and raw bytes, aligned.
func (w *builder) tensor(name string, t GGMLType, dims []uint64, raw []byte) *builder {
	for len(w.data)%w.alignment != 0 {
		w.data = append(w.data, 0)
	}
	w.infos = putStr(w.infos, name)
	w.infos = binary.LittleEndian.AppendUint32(w.infos, uint32(len(dims)))
	for _, d := range dims {
		w.infos = binary.LittleEndian.AppendUint64(w.infos, d)
	}
	w.infos = binary.LittleEndian.AppendUint32(w.infos, uint32(t))
	w.infos = binary.LittleEndian.AppendUint64(w.infos, uint64(len(w.data)))
	w.data = append(w.data, raw...)
	w.nTensors++
	return w
}

func (w *builder) bytes() []byte {
	b := []byte("GGUF")
	b = binary.LittleEndian.AppendUint32(b, w.version)
	b = binary.LittleEndian.AppendUint64(b, w.nTensors)
	b = binary.LittleEndian.AppendUint64(b, w.nKV)
	b = append(b, w.kv...)
	b = append(b, w.infos...)
	for len(b)%w.alignment != 0 {
		b = append(b, 0)
	}
	return append(b, w.data...)
}

// f32s encodes float32 values.
func f32s(xs ...float32) []byte {
	var b []byte
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

// tinyModel is a complete qwen3moe file with every tensor kind: hidden 32,
// 1 layer, 2 heads of 16 (1 kv head), 4 experts of width 32, vocabulary 8.
func tinyModel() *builder { return tinyMoE(false) }

// tinyMoE is tinyModel, with gate and up experts merged into one
// ffn_gate_up_exps tensor (same values: per expert its gate rows, then its
// up rows) when merged is set.
func tinyMoE(merged bool) *builder {
	return tinyMoEWith(func(w *builder, gate, up []byte) {
		if !merged {
			w.tensor("blk.0.ffn_gate_exps.weight", TypeF32, []uint64{32, 32, 4}, gate)
			w.tensor("blk.0.ffn_up_exps.weight", TypeF32, []uint64{32, 32, 4}, up)
			return
		}
		per := 4 * 32 * 32 // bytes of one expert's gate (or up) rows
		var gu []byte
		for e := range 4 {
			gu = append(gu, gate[e*per:(e+1)*per]...)
			gu = append(gu, up[e*per:(e+1)*per]...)
		}
		w.tensor("blk.0.ffn_gate_up_exps.weight", TypeF32, []uint64{32, 64, 4}, gu)
	})
}

// tinyMoEWith is tinyModel with the gate and up experts (F32 [4, 32, 32]
// each) written by gateUp.
func tinyMoEWith(gateUp func(w *builder, gate, up []byte)) *builder {
	w := newBuilder()
	w.add("general.architecture", "qwen3moe")
	w.add("qwen3moe.block_count", uint32(1))
	w.add("qwen3moe.embedding_length", uint32(32))
	w.add("qwen3moe.feed_forward_length", uint32(64))
	w.add("qwen3moe.attention.head_count", uint32(2))
	w.add("qwen3moe.attention.head_count_kv", uint32(1))
	w.add("qwen3moe.attention.key_length", uint32(16))
	w.add("qwen3moe.rope.freq_base", float32(1e6))
	w.add("qwen3moe.attention.layer_norm_rms_epsilon", float32(1e-6))
	w.add("qwen3moe.context_length", uint64(128))
	w.add("qwen3moe.expert_count", uint32(4))
	w.add("qwen3moe.expert_used_count", uint32(2))
	w.add("qwen3moe.expert_feed_forward_length", uint32(32))
	w.add("tokenizer.ggml.model", "gpt2")
	w.add("tokenizer.ggml.pre", "qwen2")
	w.addRaw("tokenizer.ggml.tokens", ValArray, arr(nil, []string{"a", "b", "ab", "Ġ", "Ġa", "<|im_end|>", "<think>", "[PAD7]"}))
	w.addRaw("tokenizer.ggml.token_type", ValArray, arr(nil, []int32{1, 1, 1, 1, 1, 3, 4, 5}))
	w.addRaw("tokenizer.ggml.merges", ValArray, arr(nil, []string{"a b", "Ġ a"}))
	w.add("tokenizer.ggml.eos_token_id", uint32(5))
	w.add("tokenizer.ggml.bos_token_id", uint32(5))
	w.add("tokenizer.ggml.add_bos_token", false)

	seq := float32(0)
	mat := func(n int) []byte {
		var xs []float32
		for range n {
			seq++
			xs = append(xs, seq)
		}
		return f32s(xs...)
	}
	w.tensor("token_embd.weight", TypeF32, []uint64{32, 8}, mat(32*8))
	w.tensor("output_norm.weight", TypeF32, []uint64{32}, mat(32))
	w.tensor("blk.0.attn_norm.weight", TypeF32, []uint64{32}, mat(32))
	w.tensor("blk.0.ffn_norm.weight", TypeF32, []uint64{32}, mat(32))
	w.tensor("blk.0.attn_q.weight", TypeF32, []uint64{32, 32}, mat(32*32))
	w.tensor("blk.0.attn_k.weight", TypeF32, []uint64{32, 16}, mat(32*16))
	w.tensor("blk.0.attn_v.weight", TypeF32, []uint64{32, 16}, mat(32*16))
	w.tensor("blk.0.attn_output.weight", TypeF32, []uint64{32, 32}, mat(32*32))
	w.tensor("blk.0.attn_q_norm.weight", TypeF32, []uint64{16}, mat(16))
	w.tensor("blk.0.attn_k_norm.weight", TypeF32, []uint64{16}, mat(16))
	w.tensor("blk.0.ffn_gate_inp.weight", TypeF32, []uint64{32, 4}, mat(32*4))
	gate, up := mat(32*32*4), mat(32*32*4)
	gateUp(w, gate, up)
	w.tensor("blk.0.ffn_down_exps.weight", TypeF32, []uint64{32, 32, 4}, mat(32*32*4))
	return w
}
