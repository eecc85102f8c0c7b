package safetensors

import (
	"fmt"
	"math"
	"os"
	"sync"

	"github.com/macpool/macpool/engine/tensor"
)

// File is one open, memory-mapped .safetensors file. Byte slices it returns
// alias the read-only mapping: never write to them, and do not use them after
// Close.
type File struct {
	path   string
	data   []byte
	header *Header

	closeOnce sync.Once
	unmap     func() error
	closeErr  error
}

// Open maps and validates the file at path.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("safetensors %s: not a regular file", path)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("safetensors %s: file is %d bytes, too short for the 8-byte header length", path, size)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("safetensors %s: file of %d bytes too large to map", path, size)
	}
	data, unmap, err := mapFile(f, size)
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: map: %w", path, err)
	}
	h, err := ParseHeader(data, size)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("safetensors %s: %w", path, err)
	}
	return &File{path: path, data: data, header: h, unmap: unmap}, nil
}

// Path is the file's path as given to Open.
func (f *File) Path() string { return f.path }

// Header is the parsed header.
func (f *File) Header() *Header { return f.header }

// Metadata is the header's __metadata__ (nil if absent).
func (f *File) Metadata() map[string]string { return f.header.Metadata }

// Names lists the tensors in ascending order.
func (f *File) Names() []string {
	out := make([]string, len(f.header.Tensors))
	for i, t := range f.header.Tensors {
		out[i] = t.Name
	}
	return out
}

// Info describes the tensor called name.
func (f *File) Info(name string) (TensorInfo, bool) { return f.header.Lookup(name) }

// Bytes returns the raw bytes of a tensor, aliasing the mapping.
func (f *File) Bytes(name string) ([]byte, error) {
	t, ok := f.header.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("safetensors %s: no tensor %q", f.path, name)
	}
	return f.bytes(t), nil
}

func (f *File) bytes(t TensorInfo) []byte {
	b, e := f.header.DataStart+t.Begin, f.header.DataStart+t.End
	return f.data[b:e:e]
}

// Host returns the tensor as a tensor.Host viewing the mapped bytes. Shape
// and format are as stored; dtypes without a tensor.Format give an error.
func (f *File) Host(name string) (*tensor.Host, error) {
	t, ok := f.header.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("safetensors %s: no tensor %q", f.path, name)
	}
	format, ok := dtypeFormats[t.DType]
	if !ok {
		return nil, fmt.Errorf("safetensors %s: tensor %q: dtype %s is not supported by the engine", f.path, name, t.DType)
	}
	return &tensor.Host{
		Name:   name,
		Format: format,
		Shape:  append([]int(nil), t.Shape...),
		Data:   f.bytes(t),
		Source: f.path,
	}, nil
}

// Close unmaps the file. It is safe to call more than once.
func (f *File) Close() error {
	f.closeOnce.Do(func() {
		f.closeErr = f.unmap()
		f.data = nil
	})
	return f.closeErr
}
