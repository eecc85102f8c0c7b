// Package tensor describes weights as they lie in a checkpoint: a storage
// format, a logical shape and the raw bytes (usually memory-mapped), plus the
// reference dequantization of every format the engine loads. Backends turn
// Host tensors into their own resident weights; loaders (safetensors, MLX,
// GGUF) produce them. Nothing here allocates a dequantized copy of a whole
// matrix unless asked to (Float32s), so a mapped checkpoint stays mapped.
package tensor

import (
	"fmt"
)

// Format is the storage format of a tensor's elements.
type Format int

// Storage formats. Block formats store a row as consecutive blocks; a row's
// length must be a multiple of the block size.
const (
	F32  Format = iota + 1
	F16         // IEEE half
	BF16        // bfloat16
	I32
	U32
	U8
	I64
	Q8_0 // GGUF: blocks of 32: f16 scale + 32 int8
	Q4_0 // GGUF: blocks of 32: f16 scale + 16 bytes of 4-bit values (offset 8)
	Q4_K // GGUF k-quants: super-blocks of 256
	Q5_K
	Q6_K
	// MLXAffine is MLX's affine quantization: Data holds packed uint32 words
	// (Bits bits per value, little-endian within a word), with one Scale and
	// Bias (bf16/f16/f32) per GroupSize consecutive values of a row:
	// w = scale*q + bias.
	MLXAffine
)

var formatNames = map[Format]string{
	F32: "F32", F16: "F16", BF16: "BF16", I32: "I32", U32: "U32", U8: "U8", I64: "I64",
	Q8_0: "Q8_0", Q4_0: "Q4_0", Q4_K: "Q4_K", Q5_K: "Q5_K", Q6_K: "Q6_K", MLXAffine: "MLX_AFFINE",
}

func (f Format) String() string {
	if s, ok := formatNames[f]; ok {
		return s
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// Host is one tensor as stored. Shape is logical and row-major: a matrix is
// [rows, cols] = [out_features, in_features] (the Hugging Face Linear layout);
// stacked experts are [experts, rows, cols]. For block and MLX formats Shape
// counts logical (dequantized) elements, not bytes or words.
type Host struct {
	Name   string
	Format Format
	Shape  []int
	Data   []byte // raw bytes; may be a read-only memory map: never write

	// MLXAffine only.
	Bits      int   // 4 or 8 (also 2, 3, 5, 6 where MLX writes them)
	GroupSize int   // 32, 64 or 128
	Scales    *Host // shape [rows..., cols/GroupSize], float format
	Biases    *Host // same shape as Scales

	// Source names where the bytes came from, for error messages.
	Source string
}

// Numel is the number of logical elements.
func (h *Host) Numel() int {
	n := 1
	for _, d := range h.Shape {
		n *= d
	}
	return n
}

// Rows is the product of all but the last dimension; Cols is the last.
func (h *Host) Rows() int {
	if len(h.Shape) == 0 {
		return 1
	}
	return h.Numel() / h.Cols()
}

// Cols is the length of the last dimension (1 for a scalar).
func (h *Host) Cols() int {
	if len(h.Shape) == 0 {
		return 1
	}
	return h.Shape[len(h.Shape)-1]
}
