package gguf

import (
	"fmt"

	"github.com/macpool/macpool/engine/tensor"
)

// GGMLType is a tensor element type as numbered by ggml (enum ggml_type).
type GGMLType uint32

// The ggml types this package knows the block geometry of. Tensors of every
// listed type can be parsed and located; only those with a tensor.Format
// (see Format) can be returned as *tensor.Host.
const (
	TypeF32     GGMLType = 0
	TypeF16     GGMLType = 1
	TypeQ4_0    GGMLType = 2
	TypeQ4_1    GGMLType = 3
	TypeQ5_0    GGMLType = 6
	TypeQ5_1    GGMLType = 7
	TypeQ8_0    GGMLType = 8
	TypeQ8_1    GGMLType = 9
	TypeQ2_K    GGMLType = 10
	TypeQ3_K    GGMLType = 11
	TypeQ4_K    GGMLType = 12
	TypeQ5_K    GGMLType = 13
	TypeQ6_K    GGMLType = 14
	TypeQ8_K    GGMLType = 15
	TypeIQ2_XXS GGMLType = 16
	TypeIQ2_XS  GGMLType = 17
	TypeIQ3_XXS GGMLType = 18
	TypeIQ1_S   GGMLType = 19
	TypeIQ4_NL  GGMLType = 20
	TypeIQ3_S   GGMLType = 21
	TypeIQ2_S   GGMLType = 22
	TypeIQ4_XS  GGMLType = 23
	TypeI8      GGMLType = 24
	TypeI16     GGMLType = 25
	TypeI32     GGMLType = 26
	TypeI64     GGMLType = 27
	TypeF64     GGMLType = 28
	TypeIQ1_M   GGMLType = 29
	TypeBF16    GGMLType = 30
	TypeTQ1_0   GGMLType = 34
	TypeTQ2_0   GGMLType = 35
	TypeMXFP4   GGMLType = 39
)

type typeInfo struct {
	name        string
	blockValues uint64
	blockBytes  uint64
	format      tensor.Format // 0: no decoder in engine/tensor
}

// typeInfos follows ggml's type_traits (blck_size, type_size).
var typeInfos = map[GGMLType]typeInfo{
	TypeF32:     {"F32", 1, 4, tensor.F32},
	TypeF16:     {"F16", 1, 2, tensor.F16},
	TypeQ4_0:    {"Q4_0", 32, 18, tensor.Q4_0},
	TypeQ4_1:    {"Q4_1", 32, 20, 0},
	TypeQ5_0:    {"Q5_0", 32, 22, 0},
	TypeQ5_1:    {"Q5_1", 32, 24, 0},
	TypeQ8_0:    {"Q8_0", 32, 34, tensor.Q8_0},
	TypeQ8_1:    {"Q8_1", 32, 36, 0},
	TypeQ2_K:    {"Q2_K", 256, 84, 0},
	TypeQ3_K:    {"Q3_K", 256, 110, 0},
	TypeQ4_K:    {"Q4_K", 256, 144, tensor.Q4_K},
	TypeQ5_K:    {"Q5_K", 256, 176, tensor.Q5_K},
	TypeQ6_K:    {"Q6_K", 256, 210, tensor.Q6_K},
	TypeQ8_K:    {"Q8_K", 256, 292, 0},
	TypeIQ2_XXS: {"IQ2_XXS", 256, 66, 0},
	TypeIQ2_XS:  {"IQ2_XS", 256, 74, 0},
	TypeIQ3_XXS: {"IQ3_XXS", 256, 98, 0},
	TypeIQ1_S:   {"IQ1_S", 256, 50, 0},
	TypeIQ4_NL:  {"IQ4_NL", 32, 18, 0},
	TypeIQ3_S:   {"IQ3_S", 256, 110, 0},
	TypeIQ2_S:   {"IQ2_S", 256, 82, 0},
	TypeIQ4_XS:  {"IQ4_XS", 256, 136, 0},
	TypeI8:      {"I8", 1, 1, 0},
	TypeI16:     {"I16", 1, 2, 0},
	TypeI32:     {"I32", 1, 4, tensor.I32},
	TypeI64:     {"I64", 1, 8, tensor.I64},
	TypeF64:     {"F64", 1, 8, 0},
	TypeIQ1_M:   {"IQ1_M", 256, 56, 0},
	TypeBF16:    {"BF16", 1, 2, tensor.BF16},
	TypeTQ1_0:   {"TQ1_0", 256, 54, 0},
	TypeTQ2_0:   {"TQ2_0", 256, 66, 0},
	TypeMXFP4:   {"MXFP4", 32, 17, 0},
}

func (t GGMLType) String() string {
	if ti, ok := typeInfos[t]; ok {
		return ti.name
	}
	return fmt.Sprintf("GGMLType(%d)", uint32(t))
}

// Format is the engine storage format of t; ok is false where the engine has
// no decoder for it (the tensor can be located but not returned as a Host).
func (t GGMLType) Format() (f tensor.Format, ok bool) {
	ti, ok := typeInfos[t]
	return ti.format, ok && ti.format != 0
}

// ValueType is the type tag of a metadata value (enum gguf_type).
type ValueType uint32

// Metadata value types.
const (
	ValUint8   ValueType = 0
	ValInt8    ValueType = 1
	ValUint16  ValueType = 2
	ValInt16   ValueType = 3
	ValUint32  ValueType = 4
	ValInt32   ValueType = 5
	ValFloat32 ValueType = 6
	ValBool    ValueType = 7
	ValString  ValueType = 8
	ValArray   ValueType = 9
	ValUint64  ValueType = 10
	ValInt64   ValueType = 11
	ValFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
	"bool", "string", "array", "uint64", "int64", "float64"}

func (v ValueType) String() string {
	if int(v) < len(valueTypeNames) {
		return valueTypeNames[v]
	}
	return fmt.Sprintf("ValueType(%d)", uint32(v))
}

// size is the encoded size of a scalar of type v (0 for string and array).
func (v ValueType) size() int {
	switch v {
	case ValUint8, ValInt8, ValBool:
		return 1
	case ValUint16, ValInt16:
		return 2
	case ValUint32, ValInt32, ValFloat32:
		return 4
	case ValUint64, ValInt64, ValFloat64:
		return 8
	}
	return 0
}
