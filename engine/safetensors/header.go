// Package safetensors reads .safetensors files (and sharded sets of them)
// without copying tensor data: each file is memory-mapped read-only and
// tensors are handed out as views into the mapping.
//
// Every input is treated as untrusted: the header length, the JSON, dtypes,
// shapes and data offsets are checked against the file before any tensor is
// exposed, and errors name the file and the problem. Data offsets are honoured
// as written (MLX writes blocks out of header order and unpadded headers, so
// tensor data can start at any byte: callers must decode bytes, never cast the
// mapping to wider types).
package safetensors

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/bits"
	"sort"

	"github.com/macpool/macpool/engine/tensor"
)

// MaxHeaderSize bounds the JSON header (the reference implementation uses the
// same 100 MB limit), so a corrupt length cannot make us allocate gigabytes.
const MaxHeaderSize = 100 << 20

// dtypeSizes lists the dtypes of the safetensors format and their element
// sizes in bytes.
var dtypeSizes = map[string]int{
	"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
	"I16": 2, "U16": 2, "F16": 2, "BF16": 2,
	"I32": 4, "U32": 4, "F32": 4,
	"I64": 8, "U64": 8, "F64": 8,
}

// dtypeFormats maps the dtypes the engine can use to tensor formats.
var dtypeFormats = map[string]tensor.Format{
	"F32": tensor.F32, "F16": tensor.F16, "BF16": tensor.BF16,
	"I32": tensor.I32, "U32": tensor.U32, "U8": tensor.U8, "I64": tensor.I64,
}

// maxNumel bounds the element count so byte sizes cannot overflow int64.
const maxNumel = 1 << 56

// DTypeSize is the element size of a safetensors dtype, 0 if unknown.
func DTypeSize(dtype string) int { return dtypeSizes[dtype] }

// TensorInfo describes one tensor of a header. Begin and End are byte offsets
// relative to the start of the data section (right after the header).
type TensorInfo struct {
	Name  string
	DType string
	Shape []int
	Begin int64
	End   int64
}

// Numel is the number of elements.
func (t TensorInfo) Numel() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Header is a parsed and validated safetensors header.
type Header struct {
	// DataStart is the file offset of the data section (8 + header length).
	DataStart int64
	Metadata  map[string]string
	// Tensors in ascending name order.
	Tensors []TensorInfo
	byName  map[string]int
}

// Lookup returns the tensor called name.
func (h *Header) Lookup(name string) (TensorInfo, bool) {
	i, ok := h.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return h.Tensors[i], true
}

type rawTensor struct {
	DType       *string  `json:"dtype"`
	Shape       *[]int64 `json:"shape"`
	DataOffsets *[]int64 `json:"data_offsets"`
}

// ParseHeader parses and validates the header at the start of a safetensors
// file. buf holds the file's leading bytes (at least the 8-byte length and the
// JSON header); fileSize is the size of the whole file, against which the data
// offsets are checked. It never panics on bad input. Error messages do not
// name the file: callers add it.
func ParseHeader(buf []byte, fileSize int64) (*Header, error) {
	if len(buf) < 8 || fileSize < 8 {
		return nil, fmt.Errorf("file is %d bytes, too short for the 8-byte header length", max(int64(len(buf)), fileSize))
	}
	n := binary.LittleEndian.Uint64(buf)
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("header length %d exceeds the %d-byte limit", n, MaxHeaderSize)
	}
	if int64(n) > fileSize-8 {
		return nil, fmt.Errorf("header length %d runs past the end of the %d-byte file", n, fileSize)
	}
	if uint64(len(buf)-8) < n {
		return nil, fmt.Errorf("header length %d: only %d header bytes available", n, len(buf)-8)
	}
	js := buf[8 : 8+n]
	// Writers may pad the JSON with trailing spaces to align the data.
	js = bytes.TrimRight(js, " \x00")
	if len(js) == 0 || js[0] != '{' {
		return nil, fmt.Errorf("header is not a JSON object")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("header JSON: %v", err)
	}
	dataStart := int64(8 + n)
	dataLen := fileSize - dataStart
	h := &Header{DataStart: dataStart, byName: make(map[string]int, len(raw))}
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.Metadata); err != nil {
				return nil, fmt.Errorf("header __metadata__ must map strings to strings: %v", err)
			}
			continue
		}
		ti, err := parseTensor(name, msg, dataLen)
		if err != nil {
			return nil, err
		}
		h.Tensors = append(h.Tensors, ti)
	}
	sort.Slice(h.Tensors, func(i, j int) bool { return h.Tensors[i].Name < h.Tensors[j].Name })
	for i, t := range h.Tensors {
		h.byName[t.Name] = i
	}
	return h, nil
}

func parseTensor(name string, msg json.RawMessage, dataLen int64) (TensorInfo, error) {
	var rt rawTensor
	if err := json.Unmarshal(msg, &rt); err != nil {
		return TensorInfo{}, fmt.Errorf("tensor %q: %v", name, err)
	}
	switch {
	case rt.DType == nil:
		return TensorInfo{}, fmt.Errorf("tensor %q: missing dtype", name)
	case rt.Shape == nil:
		return TensorInfo{}, fmt.Errorf("tensor %q: missing shape", name)
	case rt.DataOffsets == nil:
		return TensorInfo{}, fmt.Errorf("tensor %q: missing data_offsets", name)
	}
	size := dtypeSizes[*rt.DType]
	if size == 0 {
		return TensorInfo{}, fmt.Errorf("tensor %q: unknown dtype %q", name, *rt.DType)
	}
	ti := TensorInfo{Name: name, DType: *rt.DType, Shape: make([]int, len(*rt.Shape))}
	numel := uint64(1)
	for i, d := range *rt.Shape {
		if d < 0 {
			return TensorInfo{}, fmt.Errorf("tensor %q: negative dimension %d in shape %v", name, d, *rt.Shape)
		}
		hi, lo := bits.Mul64(numel, uint64(d))
		if hi != 0 || lo > maxNumel {
			return TensorInfo{}, fmt.Errorf("tensor %q: shape %v is too large", name, *rt.Shape)
		}
		numel = lo
		ti.Shape[i] = int(d)
	}
	offs := *rt.DataOffsets
	if len(offs) != 2 {
		return TensorInfo{}, fmt.Errorf("tensor %q: data_offsets has %d values, want 2", name, len(offs))
	}
	ti.Begin, ti.End = offs[0], offs[1]
	if ti.Begin < 0 || ti.End < ti.Begin {
		return TensorInfo{}, fmt.Errorf("tensor %q: invalid data_offsets [%d, %d]", name, ti.Begin, ti.End)
	}
	if ti.End > dataLen {
		return TensorInfo{}, fmt.Errorf("tensor %q: data_offsets [%d, %d] run past the end of the data (%d bytes; file truncated?)", name, ti.Begin, ti.End, dataLen)
	}
	if want := numel * uint64(size); uint64(ti.End-ti.Begin) != want {
		return TensorInfo{}, fmt.Errorf("tensor %q: %d bytes for %s %v, want %d", name, ti.End-ti.Begin, ti.DType, ti.Shape, want)
	}
	return ti, nil
}
