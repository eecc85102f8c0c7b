package checkpoint

// Where a checkpoint's tensors lie in its files, grouped by what a pipeline
// stage holds, so that a stage's worker can fetch only the byte ranges it
// needs (the model store fetches the chunks that overlap them) and open the
// stage from files whose other bytes were never written.

import (
	"cmp"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/macpool/macpool/engine/gguf"
	"github.com/macpool/macpool/engine/safetensors"
)

// FileRange is bytes [Off, Off+Len) of the file Path: relative to the model
// folder, or the file's base name for a .gguf model.
type FileRange struct {
	Path string `json:"path"`
	Off  int64  `json:"off"`
	Len  int64  `json:"len"`
}

// Ranges are a checkpoint's weight-file bytes by owner. Files with no
// range (config, tokenizer, shard index) are needed whole by every stage.
type Ranges struct {
	// Layers are the tensors of each decoder layer.
	Layers [][]FileRange `json:"layers"`
	// Embed is the token embedding; Head the final norm and LM head (and,
	// without an LM head, the embedding again: tied).
	Embed []FileRange `json:"embed"`
	Head  []FileRange `json:"head"`
	// Common are what every stage reads: the weight files' headers and
	// tensors of no layer that are neither embedding nor head.
	Common []FileRange `json:"common"`
}

var (
	hfLayer   = regexp.MustCompile(`(?:^|\.)layers\.(\d+)\.`)
	ggufLayer = regexp.MustCompile(`^blk\.(\d+)\.`)
)

// part classifies a stored tensor name: a decoder layer (≥ 0), or -1
// embedding, -2 head (final norm, LM head), -3 anything else.
func part(raw string) int {
	for _, re := range []*regexp.Regexp{ggufLayer, hfLayer} {
		if m := re.FindStringSubmatch(raw); m != nil {
			if n, err := strconv.Atoi(m[1]); err == nil {
				return n
			}
		}
	}
	switch {
	case raw == "token_embd.weight" || strings.Contains(raw, "embed_tokens."):
		return -1
	case raw == "output.weight" || raw == "output_norm.weight" || strings.Contains(raw, "lm_head.") ||
		strings.HasSuffix(raw, "model.norm.weight") || raw == "norm.weight":
		return -2
	}
	return -3
}

// TensorRanges reads the headers of the checkpoint at path (a folder or a
// .gguf file) and returns where its tensors lie, with the model's Config.
func TensorRanges(path string) (*Ranges, *Config, error) {
	type tensorAt struct {
		raw string
		r   FileRange
	}
	var all []tensorAt
	var common []FileRange
	var cfg *Config
	if IsGGUF(path) {
		f, err := gguf.Open(path)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint ranges: %w", err)
		}
		defer f.Close()
		name := filepath.Base(path)
		common = append(common, FileRange{name, 0, f.DataStart()})
		for _, ti := range f.Infos() {
			all = append(all, tensorAt{ti.Name, FileRange{name, f.DataStart() + int64(ti.Offset), int64(ti.Size)}})
		}
		gc, err := f.Config()
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint ranges: %w", err)
		}
		cfg = configFromGGUF(gc)
	} else {
		var err error
		if cfg, err = LoadConfig(path); err != nil {
			return nil, nil, fmt.Errorf("checkpoint ranges: %w", err)
		}
		set, err := safetensors.OpenDir(path)
		if err != nil {
			return nil, nil, fmt.Errorf("checkpoint ranges: %w", err)
		}
		defer set.Close()
		for _, f := range set.Files() {
			rel, err := filepath.Rel(path, f.Path())
			if err != nil {
				return nil, nil, fmt.Errorf("checkpoint ranges: %w", err)
			}
			rel = filepath.ToSlash(rel)
			h := f.Header()
			common = append(common, FileRange{rel, 0, h.DataStart})
			for _, t := range h.Tensors {
				all = append(all, tensorAt{t.Name, FileRange{rel, h.DataStart + t.Begin, t.End - t.Begin}})
			}
		}
	}
	layers := cfg.NumHiddenLayers
	r := &Ranges{Layers: make([][]FileRange, layers)}
	hasHead := false
	for _, t := range all {
		switch p := part(t.raw); {
		case p >= layers:
			common = append(common, t.r) // e.g. multi-token prediction layers
		case p >= 0:
			r.Layers[p] = append(r.Layers[p], t.r)
		case p == -1:
			r.Embed = append(r.Embed, t.r)
		case p == -2:
			r.Head = append(r.Head, t.r)
			hasHead = hasHead || strings.Contains(t.raw, "lm_head.") || t.raw == "output.weight"
		default:
			common = append(common, t.r)
		}
	}
	if !hasHead {
		r.Head = append(r.Head, r.Embed...)
	}
	for i := range r.Layers {
		r.Layers[i] = mergeRanges(r.Layers[i])
	}
	r.Embed, r.Head, r.Common = mergeRanges(r.Embed), mergeRanges(r.Head), mergeRanges(common)
	return r, cfg, nil
}

// Bytes is the total length of rs.
func Bytes(rs []FileRange) int64 {
	var n int64
	for _, r := range rs {
		n += r.Len
	}
	return n
}

// Stage is every range stage s (resolved, of a model of len(r.Layers)
// layers) reads, merged.
func (r *Ranges) Stage(s Stage) []FileRange {
	out := slices.Clone(r.Common)
	for i := s.First; i < s.Last && i < len(r.Layers); i++ {
		out = append(out, r.Layers[i]...)
	}
	if s.IsFirst() {
		out = append(out, r.Embed...)
	}
	if s.IsLast(len(r.Layers)) {
		out = append(out, r.Head...)
	}
	return mergeRanges(out)
}

// mergeRanges sorts rs by file and offset and joins touching ranges.
func mergeRanges(rs []FileRange) []FileRange {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b FileRange) int {
		if c := cmp.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return cmp.Compare(a.Off, b.Off)
	})
	var out []FileRange
	for _, x := range rs {
		if x.Len <= 0 {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Path == x.Path && x.Off <= out[n-1].Off+out[n-1].Len {
			out[n-1].Len = max(out[n-1].Len, x.Off+x.Len-out[n-1].Off)
			continue
		}
		out = append(out, x)
	}
	return out
}
