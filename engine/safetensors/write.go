package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"sort"
)

// WriteTensor is one tensor to write: raw little-endian bytes of DType
// (e.g. "BF16", "F32") with the given shape.
type WriteTensor struct {
	Name  string
	DType string
	Shape []int
	Data  []byte
}

// Write writes tensors (and optional string metadata) to a .safetensors file
// at path: header sorted by name, data in the same order, the JSON padded
// with spaces so that the data section starts at a multiple of 8 bytes. The
// file is written to a temporary name and renamed into place.
func Write(path string, tensors []WriteTensor, metadata map[string]string) error {
	ts := append([]WriteTensor(nil), tensors...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for i, t := range ts {
		if t.Name == "" || t.Name == "__metadata__" {
			return fmt.Errorf("write %s: tensor %d has an invalid name %q", path, i, t.Name)
		}
		if _, dup := header[t.Name]; dup {
			return fmt.Errorf("write %s: duplicate tensor %s", path, t.Name)
		}
		size := DTypeSize(t.DType)
		if size == 0 {
			return fmt.Errorf("write %s: tensor %s: unknown dtype %q", path, t.Name, t.DType)
		}
		n := 1
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("write %s: tensor %s: negative dimension in shape %v", path, t.Name, t.Shape)
			}
			n *= d
		}
		if n*size != len(t.Data) {
			return fmt.Errorf("write %s: tensor %s: shape %v of %s needs %d bytes, got %d", path, t.Name, t.Shape, t.DType, n*size, len(t.Data))
		}
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		header[t.Name] = map[string]any{"dtype": t.DType, "shape": shape, "data_offsets": []int64{off, off + int64(len(t.Data))}}
		off += int64(len(t.Data))
	}
	js, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("write %s: header: %w", path, err)
	}
	for (8+len(js))%8 != 0 {
		js = append(js, ' ')
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(js)))
	w.Write(lenBuf[:])
	w.Write(js)
	for _, t := range ts {
		w.Write(t.Data)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
