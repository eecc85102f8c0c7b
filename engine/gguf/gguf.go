// Package gguf reads GGUF files (llama.cpp's single-file model format,
// versions 2 and 3, little-endian): the metadata, the tensor directory and
// the tensor data, memory-mapped read-only. For the Qwen architectures it
// maps the file to the engine's conventions: a Hugging Face–style Config,
// tensors under their canonical Hugging Face names with logical
// [out_features, in_features] shapes (stacked experts sliced into per-expert
// views without copying), and a tokenizer Spec from the tokenizer metadata.
//
// Every count, size and offset read from the file is checked against the
// file's length before it is used: a corrupt or hostile file gives an error
// naming the file and the problem, never a panic or a huge allocation.
package gguf

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"
	"sort"
	"strconv"

	"github.com/macpool/macpool/engine/tensor"
)

// Errors callers may test for with errors.Is.
var (
	// ErrNotGGUF: the file does not start with the GGUF magic.
	ErrNotGGUF = errors.New("not a GGUF file")
	// ErrUnsupportedArchitecture: general.architecture is not one this
	// package maps to the engine's conventions.
	ErrUnsupportedArchitecture = errors.New("unsupported architecture")
)

const (
	magic            = 0x46554747 // "GGUF" little-endian
	defaultAlignment = 32
	maxDims          = 4 // GGML_MAX_DIMS
	maxArrayDepth    = 8
)

// TensorInfo is one entry of the tensor directory, as stored: Name is the
// GGUF name, Dims are in ggml order (Dims[0] is the innermost, contiguous
// dimension), Offset is relative to the start of the data section.
type TensorInfo struct {
	Name   string
	Dims   []uint64
	Type   GGMLType
	Offset uint64
	Size   uint64 // bytes
}

// Shape is the logical row-major shape: Dims reversed.
func (ti *TensorInfo) Shape() []int {
	s := make([]int, len(ti.Dims))
	for i, d := range ti.Dims {
		s[len(s)-1-i] = int(d)
	}
	return s
}

// File is a parsed GGUF file. Its tensors' Data point into the file's memory
// map: they are valid until Close and must not be written.
type File struct {
	path      string
	version   uint32
	keys      []string
	meta      map[string]any
	infos     []TensorInfo
	byName    map[string]int
	data      []byte // the data section
	dataStart int64  // its file offset
	alignment uint64
	unmap     func() error

	// Qwen mapping (model.go), filled by Parse for supported architectures.
	arch    string
	archErr error
	hf      map[string]hfRef
}

// Open maps the file at path read-only and parses it. Close releases it.
func Open(path string) (*File, error) {
	b, unmap, err := mapFile(path)
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", path, err)
	}
	f, err := Parse(path, b)
	if err != nil {
		if unmap != nil {
			unmap()
		}
		return nil, err
	}
	f.unmap = unmap
	return f, nil
}

// Close unmaps the file; tensors obtained from it must no longer be used.
// It is safe to call more than once.
func (f *File) Close() error {
	if f.unmap == nil {
		return nil
	}
	err := f.unmap()
	f.unmap = nil
	f.data = nil
	if err != nil {
		return fmt.Errorf("gguf %s: unmap: %w", f.path, err)
	}
	return nil
}

// Path is the name the file was opened or parsed under.
func (f *File) Path() string { return f.path }

// Version is the GGUF format version (2 or 3).
func (f *File) Version() uint32 { return f.version }

// DataStart is the file offset of the data section: a tensor's bytes are
// [DataStart+Offset, DataStart+Offset+Size) of the file.
func (f *File) DataStart() int64 { return f.dataStart }

// Alignment is the data alignment (general.alignment, default 32).
func (f *File) Alignment() uint64 { return f.alignment }

// Keys lists the metadata keys in file order.
func (f *File) Keys() []string { return f.keys }

// Value returns a metadata value: uint8, int8, uint16, int16, uint32, int32,
// uint64, int64, float32, float64, bool, string, or for arrays a typed slice
// of those ([]any for arrays of arrays). Treat slices as read-only.
func (f *File) Value(key string) (any, bool) {
	v, ok := f.meta[key]
	return v, ok
}

// Infos lists the tensor directory in file order.
func (f *File) Infos() []TensorInfo { return f.infos }

// Info returns the directory entry of the tensor with GGUF name name.
func (f *File) Info(name string) (TensorInfo, bool) {
	i, ok := f.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.infos[i], true
}

// Raw returns the tensor with GGUF name name, with its logical shape (Dims
// reversed) and its bytes in the memory map.
func (f *File) Raw(name string) (*tensor.Host, error) {
	i, ok := f.byName[name]
	if !ok {
		return nil, fmt.Errorf("gguf %s: no tensor %q", f.path, name)
	}
	return f.host(&f.infos[i], name)
}

func (f *File) host(ti *TensorInfo, name string) (*tensor.Host, error) {
	format, ok := ti.Type.Format()
	if !ok {
		return nil, fmt.Errorf("gguf %s: tensor %s (%s): type %v is not supported", f.path, name, ti.Name, ti.Type)
	}
	if f.data == nil {
		return nil, fmt.Errorf("gguf %s: tensor %s: file is closed", f.path, name)
	}
	return &tensor.Host{
		Name:   name,
		Format: format,
		Shape:  ti.Shape(),
		Data:   f.data[ti.Offset : ti.Offset+ti.Size : ti.Offset+ti.Size],
		Source: f.path,
	}, nil
}

// Parse parses a GGUF file held in b, which must stay unchanged while the
// File is used (tensor data are sub-slices of b). name is used in errors.
func Parse(name string, b []byte) (*File, error) {
	p := &parser{b: b}
	f, err := p.file(name)
	if err != nil {
		return nil, fmt.Errorf("gguf %s: %w", name, err)
	}
	f.mapArchitecture()
	return f, nil
}

type parser struct {
	b   []byte
	pos int
}

func (p *parser) remaining() int { return len(p.b) - p.pos }

func (p *parser) need(n int, what string) error {
	if n < 0 || p.remaining() < n {
		return fmt.Errorf("truncated at byte %d: %s needs %d bytes, %d left", p.pos, what, n, p.remaining())
	}
	return nil
}

func (p *parser) u8(what string) (uint8, error) {
	if err := p.need(1, what); err != nil {
		return 0, err
	}
	p.pos++
	return p.b[p.pos-1], nil
}

func (p *parser) u16(what string) (uint16, error) {
	if err := p.need(2, what); err != nil {
		return 0, err
	}
	p.pos += 2
	return binary.LittleEndian.Uint16(p.b[p.pos-2:]), nil
}

func (p *parser) u32(what string) (uint32, error) {
	if err := p.need(4, what); err != nil {
		return 0, err
	}
	p.pos += 4
	return binary.LittleEndian.Uint32(p.b[p.pos-4:]), nil
}

func (p *parser) u64(what string) (uint64, error) {
	if err := p.need(8, what); err != nil {
		return 0, err
	}
	p.pos += 8
	return binary.LittleEndian.Uint64(p.b[p.pos-8:]), nil
}

func (p *parser) str(what string) (string, error) {
	n, err := p.u64(what + " length")
	if err != nil {
		return "", err
	}
	if n > uint64(p.remaining()) {
		return "", fmt.Errorf("%s at byte %d: length %d exceeds the %d bytes left (truncated or corrupt)", what, p.pos-8, n, p.remaining())
	}
	s := string(p.b[p.pos : p.pos+int(n)])
	p.pos += int(n)
	return s, nil
}

// count reads a uint64 count of items each at least minSize bytes long and
// checks that that many could fit in the rest of the file.
func (p *parser) count(what string, minSize int) (int, error) {
	n, err := p.u64(what)
	if err != nil {
		return 0, err
	}
	if n > uint64(p.remaining()/minSize) {
		return 0, fmt.Errorf("%s %d at byte %d cannot fit in the %d bytes left (truncated or corrupt)", what, n, p.pos-8, p.remaining())
	}
	return int(n), nil
}

func (p *parser) file(name string) (*File, error) {
	m, err := p.u32("magic")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotGGUF, err)
	}
	if m != magic {
		return nil, fmt.Errorf("%w: magic %q", ErrNotGGUF, p.b[:4])
	}
	v, err := p.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case v == 2 || v == 3:
	case bits.ReverseBytes32(v) == 2 || bits.ReverseBytes32(v) == 3:
		return nil, fmt.Errorf("big-endian GGUF (version %d) is not supported", bits.ReverseBytes32(v))
	case v == 1:
		return nil, fmt.Errorf("GGUF version 1 is not supported (convert the file again)")
	default:
		return nil, fmt.Errorf("unknown GGUF version %d", v)
	}
	// A tensor info is at least 8 (name length) + 4 (n_dims) + 8 (dim) + 4
	// (type) + 8 (offset) bytes; a metadata pair at least 8 + 4 + 1.
	nTensors, err := p.count("tensor count", 32)
	if err != nil {
		return nil, err
	}
	nKV, err := p.count("metadata count", 13)
	if err != nil {
		return nil, err
	}
	f := &File{path: name, version: v, meta: make(map[string]any, nKV), byName: make(map[string]int, nTensors)}
	for i := 0; i < nKV; i++ {
		at := p.pos
		key, err := p.str(fmt.Sprintf("metadata key %d", i))
		if err != nil {
			return nil, err
		}
		if _, dup := f.meta[key]; dup {
			return nil, fmt.Errorf("metadata key %q at byte %d is duplicated", key, at)
		}
		t, err := p.u32("type of " + key)
		if err != nil {
			return nil, err
		}
		val, err := p.value(ValueType(t), key, 0)
		if err != nil {
			return nil, err
		}
		f.keys = append(f.keys, key)
		f.meta[key] = val
	}

	f.alignment = defaultAlignment
	if a, ok := f.meta["general.alignment"]; ok {
		av, ok := a.(uint32)
		if !ok {
			return nil, fmt.Errorf("general.alignment has type %T, want uint32", a)
		}
		if av == 0 || av&(av-1) != 0 {
			return nil, fmt.Errorf("general.alignment %d is not a power of two", av)
		}
		f.alignment = uint64(av)
	}

	f.infos = make([]TensorInfo, nTensors)
	for i := range f.infos {
		ti := &f.infos[i]
		if ti.Name, err = p.str(fmt.Sprintf("name of tensor %d", i)); err != nil {
			return nil, err
		}
		if _, dup := f.byName[ti.Name]; dup {
			return nil, fmt.Errorf("tensor %q is listed twice", ti.Name)
		}
		f.byName[ti.Name] = i
		nd, err := p.u32("dimension count of " + ti.Name)
		if err != nil {
			return nil, err
		}
		if nd == 0 || nd > maxDims {
			return nil, fmt.Errorf("tensor %s has %d dimensions, want 1 to %d", ti.Name, nd, maxDims)
		}
		ti.Dims = make([]uint64, nd)
		for j := range ti.Dims {
			if ti.Dims[j], err = p.u64("dimensions of " + ti.Name); err != nil {
				return nil, err
			}
		}
		t, err := p.u32("type of " + ti.Name)
		if err != nil {
			return nil, err
		}
		ti.Type = GGMLType(t)
		if ti.Offset, err = p.u64("offset of " + ti.Name); err != nil {
			return nil, err
		}
		if ti.Size, err = tensorBytes(ti); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", ti.Name, err)
		}
	}

	start := (uint64(p.pos) + f.alignment - 1) / f.alignment * f.alignment
	if nTensors == 0 {
		return f, nil
	}
	if start > uint64(len(p.b)) {
		return nil, fmt.Errorf("data section would start at byte %d, past the end of the file (%d bytes)", start, len(p.b))
	}
	f.data = p.b[start:]
	f.dataStart = int64(start)
	for i := range f.infos {
		ti := &f.infos[i]
		if ti.Offset%f.alignment != 0 {
			return nil, fmt.Errorf("tensor %s: offset %d is not a multiple of the alignment %d", ti.Name, ti.Offset, f.alignment)
		}
		if ti.Offset > uint64(len(f.data)) || ti.Size > uint64(len(f.data))-ti.Offset {
			return nil, fmt.Errorf("tensor %s: bytes [%d, %d) of the data section lie beyond its end (%d bytes; file truncated?)",
				ti.Name, ti.Offset, ti.Offset+ti.Size, len(f.data))
		}
	}
	return f, nil
}

// tensorBytes validates the type and dimensions of ti and returns its size.
func tensorBytes(ti *TensorInfo) (uint64, error) {
	tt, ok := typeInfos[ti.Type]
	if !ok {
		return 0, fmt.Errorf("unknown ggml type %d", uint32(ti.Type))
	}
	n := uint64(1)
	for j, d := range ti.Dims {
		if d == 0 {
			return 0, fmt.Errorf("dimension %d is 0", j)
		}
		hi, lo := bits.Mul64(n, d)
		if hi != 0 || lo > math.MaxInt64/16 {
			return 0, fmt.Errorf("dimensions %v overflow", ti.Dims)
		}
		n = lo
	}
	if ti.Dims[0]%tt.blockValues != 0 {
		return 0, fmt.Errorf("row length %d is not a multiple of the %v block size %d", ti.Dims[0], ti.Type, tt.blockValues)
	}
	hi, size := bits.Mul64(n/tt.blockValues, tt.blockBytes)
	if hi != 0 || size > math.MaxInt64 {
		return 0, fmt.Errorf("size of %v %v overflows", ti.Type, ti.Dims)
	}
	return size, nil
}

func (p *parser) value(t ValueType, key string, depth int) (any, error) {
	switch t {
	case ValUint8:
		return p.u8(key)
	case ValInt8:
		v, err := p.u8(key)
		return int8(v), err
	case ValUint16:
		return p.u16(key)
	case ValInt16:
		v, err := p.u16(key)
		return int16(v), err
	case ValUint32:
		return p.u32(key)
	case ValInt32:
		v, err := p.u32(key)
		return int32(v), err
	case ValUint64:
		return p.u64(key)
	case ValInt64:
		v, err := p.u64(key)
		return int64(v), err
	case ValFloat32:
		v, err := p.u32(key)
		return math.Float32frombits(v), err
	case ValFloat64:
		v, err := p.u64(key)
		return math.Float64frombits(v), err
	case ValBool:
		v, err := p.u8(key)
		if err == nil && v > 1 {
			return nil, fmt.Errorf("metadata %s: bool value %d", key, v)
		}
		return v == 1, err
	case ValString:
		return p.str(key)
	case ValArray:
		return p.array(key, depth)
	}
	return nil, fmt.Errorf("metadata %s at byte %d: unknown value type %d", key, p.pos-4, uint32(t))
}

func (p *parser) array(key string, depth int) (any, error) {
	if depth >= maxArrayDepth {
		return nil, fmt.Errorf("metadata %s: arrays nested deeper than %d", key, maxArrayDepth)
	}
	et, err := p.u32("element type of " + key)
	if err != nil {
		return nil, err
	}
	t := ValueType(et)
	minSize := t.size()
	switch t {
	case ValString, ValArray:
		minSize = 8 // a length or an element type + count
	case ValUint8, ValInt8, ValUint16, ValInt16, ValUint32, ValInt32, ValUint64, ValInt64,
		ValFloat32, ValFloat64, ValBool:
	default:
		return nil, fmt.Errorf("metadata %s: unknown array element type %d", key, et)
	}
	n, err := p.count("length of array "+key, minSize)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	raw := p.b[p.pos:]
	switch t {
	case ValUint8:
		out := append([]uint8(nil), raw[:n]...)
		p.pos += n
		return out, nil
	case ValInt8:
		out := make([]int8, n)
		for i := range out {
			out[i] = int8(raw[i])
		}
		p.pos += n
		return out, nil
	case ValBool:
		out := make([]bool, n)
		for i := range out {
			if raw[i] > 1 {
				return nil, fmt.Errorf("metadata %s: element %d: bool value %d", key, i, raw[i])
			}
			out[i] = raw[i] == 1
		}
		p.pos += n
		return out, nil
	case ValUint16:
		out := make([]uint16, n)
		for i := range out {
			out[i] = le.Uint16(raw[2*i:])
		}
		p.pos += 2 * n
		return out, nil
	case ValInt16:
		out := make([]int16, n)
		for i := range out {
			out[i] = int16(le.Uint16(raw[2*i:]))
		}
		p.pos += 2 * n
		return out, nil
	case ValUint32:
		out := make([]uint32, n)
		for i := range out {
			out[i] = le.Uint32(raw[4*i:])
		}
		p.pos += 4 * n
		return out, nil
	case ValInt32:
		out := make([]int32, n)
		for i := range out {
			out[i] = int32(le.Uint32(raw[4*i:]))
		}
		p.pos += 4 * n
		return out, nil
	case ValFloat32:
		out := make([]float32, n)
		for i := range out {
			out[i] = math.Float32frombits(le.Uint32(raw[4*i:]))
		}
		p.pos += 4 * n
		return out, nil
	case ValUint64:
		out := make([]uint64, n)
		for i := range out {
			out[i] = le.Uint64(raw[8*i:])
		}
		p.pos += 8 * n
		return out, nil
	case ValInt64:
		out := make([]int64, n)
		for i := range out {
			out[i] = int64(le.Uint64(raw[8*i:]))
		}
		p.pos += 8 * n
		return out, nil
	case ValFloat64:
		out := make([]float64, n)
		for i := range out {
			out[i] = math.Float64frombits(le.Uint64(raw[8*i:]))
		}
		p.pos += 8 * n
		return out, nil
	case ValString:
		out := make([]string, n)
		for i := range out {
			if out[i], err = p.str(fmt.Sprintf("%s[%d]", key, i)); err != nil {
				return nil, err
			}
		}
		return out, nil
	default: // ValArray
		out := make([]any, n)
		for i := range out {
			if out[i], err = p.array(fmt.Sprintf("%s[%d]", key, i), depth+1); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
}

// Typed metadata accessors. They convert between integer widths where the
// value fits, since writers differ in the widths they use.

// String returns a string value.
func (f *File) String(key string) (string, bool) {
	s, ok := f.meta[key].(string)
	return s, ok
}

// Int returns an integer value of any width that fits in an int.
func (f *File) Int(key string) (int, bool) {
	return toInt(f.meta[key])
}

func toInt(v any) (int, bool) {
	switch x := v.(type) {
	case uint8:
		return int(x), true
	case int8:
		return int(x), true
	case uint16:
		return int(x), true
	case int16:
		return int(x), true
	case uint32:
		return int(x), true
	case int32:
		return int(x), true
	case uint64:
		if x > math.MaxInt {
			return 0, false
		}
		return int(x), true
	case int64:
		if x > math.MaxInt || x < math.MinInt {
			return 0, false
		}
		return int(x), true
	}
	return 0, false
}

// Float returns a float32 or float64 value as float64. A float32 is widened
// through its shortest decimal form, so 1e-6 stored as float32 reads 1e-6.
func (f *File) Float(key string) (float64, bool) {
	switch x := f.meta[key].(type) {
	case float32:
		return shortFloat(x), true
	case float64:
		return x, true
	}
	if i, ok := f.Int(key); ok {
		return float64(i), true
	}
	return 0, false
}

func shortFloat(x float32) float64 {
	v, err := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
	if err != nil {
		return float64(x)
	}
	return v
}

// Bool returns a bool value.
func (f *File) Bool(key string) (bool, bool) {
	b, ok := f.meta[key].(bool)
	return b, ok
}

// Strings returns an array of strings.
func (f *File) Strings(key string) ([]string, bool) {
	s, ok := f.meta[key].([]string)
	return s, ok
}

// Ints returns an array of integers of any width as ints.
func (f *File) Ints(key string) ([]int, bool) {
	var out []int
	conv := func(n int, at func(int) (int, bool)) bool {
		out = make([]int, n)
		for i := range out {
			v, ok := at(i)
			if !ok {
				return false
			}
			out[i] = v
		}
		return true
	}
	var ok bool
	switch x := f.meta[key].(type) {
	case []int32:
		ok = conv(len(x), func(i int) (int, bool) { return int(x[i]), true })
	case []uint32:
		ok = conv(len(x), func(i int) (int, bool) { return int(x[i]), true })
	case []int64:
		ok = conv(len(x), func(i int) (int, bool) { return toInt(x[i]) })
	case []uint64:
		ok = conv(len(x), func(i int) (int, bool) { return toInt(x[i]) })
	case []int16:
		ok = conv(len(x), func(i int) (int, bool) { return int(x[i]), true })
	case []uint16:
		ok = conv(len(x), func(i int) (int, bool) { return int(x[i]), true })
	case []int8:
		ok = conv(len(x), func(i int) (int, bool) { return int(x[i]), true })
	case []uint8:
		ok = conv(len(x), func(i int) (int, bool) { return int(x[i]), true })
	}
	return out, ok
}

// sortedKeys returns the keys of m in order (for stable listings).
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func mapFile(path string) ([]byte, func() error, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("not a regular file")
	}
	size := st.Size()
	if size == 0 {
		return nil, nil, fmt.Errorf("%w: file is empty", ErrNotGGUF)
	}
	if size != int64(int(size)) {
		return nil, nil, fmt.Errorf("file of %d bytes is too large to map", size)
	}
	return mmap(fd, int(size))
}
