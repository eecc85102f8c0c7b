package safetensors

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/macpool/macpool/engine/tensor"
)

// IndexFile is the name of the shard index written next to sharded
// checkpoints (Hugging Face and MLX both use it).
const IndexFile = "model.safetensors.index.json"

// Set is the tensors of a model folder: one file, or several shards tied by
// model.safetensors.index.json. Tensor names are unique across the set.
type Set struct {
	dir   string
	files []*File
	where map[string]*File
	names []string
}

// OpenDir opens the safetensors weights of a folder: the shards listed in
// model.safetensors.index.json if present, else model.safetensors, else
// every *.safetensors file in the folder.
func OpenDir(dir string) (*Set, error) {
	idx := filepath.Join(dir, IndexFile)
	if _, err := os.Stat(idx); err == nil {
		return OpenIndex(idx)
	}
	single := filepath.Join(dir, "model.safetensors")
	if _, err := os.Stat(single); err == nil {
		return OpenFiles(dir, single)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil {
		return nil, fmt.Errorf("safetensors %s: %w", dir, err)
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("safetensors %s: no %s, model.safetensors or *.safetensors files", dir, IndexFile)
	}
	sort.Strings(paths)
	return OpenFiles(dir, paths...)
}

// OpenFiles opens the given files as one set; a tensor name present in two
// files is an error.
func OpenFiles(dir string, paths ...string) (*Set, error) {
	s := &Set{dir: dir, where: map[string]*File{}}
	for _, p := range paths {
		f, err := Open(p)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.files = append(s.files, f)
		for _, t := range f.header.Tensors {
			if prev, dup := s.where[t.Name]; dup {
				s.Close()
				return nil, fmt.Errorf("safetensors %s: tensor %q is in both %s and %s", dir, t.Name, prev.path, f.path)
			}
			s.where[t.Name] = f
		}
	}
	s.sortNames()
	return s, nil
}

type index struct {
	WeightMap map[string]string `json:"weight_map"`
}

// OpenIndex opens the shards listed by a model.safetensors.index.json. Every
// shard must exist and hold every tensor the index assigns to it. Tensors
// present in a shard but absent from the index are served too.
func OpenIndex(indexPath string) (*Set, error) {
	raw, err := os.ReadFile(indexPath)
	if err != nil {
		return nil, fmt.Errorf("safetensors index: %w", err)
	}
	var ix index
	if err := json.Unmarshal(raw, &ix); err != nil {
		return nil, fmt.Errorf("safetensors index %s: invalid JSON: %v", indexPath, err)
	}
	if len(ix.WeightMap) == 0 {
		return nil, fmt.Errorf("safetensors index %s: weight_map is missing or empty", indexPath)
	}
	dir := filepath.Dir(indexPath)
	s := &Set{dir: dir, where: map[string]*File{}}
	byShard := map[string]*File{}
	var shards []string
	for _, shard := range ix.WeightMap {
		if _, ok := byShard[shard]; !ok {
			byShard[shard] = nil
			shards = append(shards, shard)
		}
	}
	sort.Strings(shards)
	for _, shard := range shards {
		if shard == "" || filepath.IsAbs(shard) || strings.ContainsAny(shard, `/\`) || shard == "." || shard == ".." {
			s.Close()
			return nil, fmt.Errorf("safetensors index %s: shard name %q must be a file name in the same folder", indexPath, shard)
		}
		p := filepath.Join(dir, shard)
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			s.Close()
			return nil, fmt.Errorf("safetensors index %s: shard %s is missing", indexPath, shard)
		}
		f, err := Open(p)
		if err != nil {
			s.Close()
			return nil, err
		}
		byShard[shard] = f
		s.files = append(s.files, f)
	}
	names := make([]string, 0, len(ix.WeightMap))
	for name := range ix.WeightMap {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := byShard[ix.WeightMap[name]]
		if _, ok := f.header.Lookup(name); !ok {
			s.Close()
			return nil, fmt.Errorf("safetensors index %s: tensor %q is listed in shard %s, which does not contain it", indexPath, name, ix.WeightMap[name])
		}
		s.where[name] = f
	}
	for _, f := range s.files {
		for _, t := range f.header.Tensors {
			if _, ok := s.where[t.Name]; !ok {
				s.where[t.Name] = f
			}
		}
	}
	s.sortNames()
	return s, nil
}

func (s *Set) sortNames() {
	s.names = make([]string, 0, len(s.where))
	for n := range s.where {
		s.names = append(s.names, n)
	}
	sort.Strings(s.names)
}

// Dir is the folder the set was opened from.
func (s *Set) Dir() string { return s.dir }

// Files are the open files, in shard-name order.
func (s *Set) Files() []*File { return s.files }

// Names lists every tensor in ascending order.
func (s *Set) Names() []string { return s.names }

// Has says whether the set has a tensor called name.
func (s *Set) Has(name string) bool { _, ok := s.where[name]; return ok }

// Info describes the tensor called name and names its file.
func (s *Set) Info(name string) (TensorInfo, *File, bool) {
	f, ok := s.where[name]
	if !ok {
		return TensorInfo{}, nil, false
	}
	t, _ := f.Info(name)
	return t, f, true
}

// Host returns the tensor as stored (see File.Host).
func (s *Set) Host(name string) (*tensor.Host, error) {
	f, ok := s.where[name]
	if !ok {
		return nil, fmt.Errorf("safetensors %s: no tensor %q", s.dir, name)
	}
	return f.Host(name)
}

// Metadata is the __metadata__ of the first file (shards repeat it).
func (s *Set) Metadata() map[string]string {
	if len(s.files) == 0 {
		return nil
	}
	return s.files[0].Metadata()
}

// Close unmaps every file; it is safe to call more than once.
func (s *Set) Close() error {
	var errs []error
	for _, f := range s.files {
		if err := f.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
