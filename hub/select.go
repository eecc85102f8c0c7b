package hub

import (
	"encoding/json"
	"fmt"
	"path"
	"sort"
	"strings"
)

// engineFiles are the small files the engine reads next to safetensors
// weights; each is fetched when the repo has it.
var engineFiles = []string{
	"config.json",
	"generation_config.json",
	"tokenizer.json",
	"tokenizer_config.json",
	"chat_template.jinja",
}

const safetensorsIndex = "model.safetensors.index.json"

// selection is what one ref needs from a repo.
type selection struct {
	small  []string // fetched first (the index among them)
	shards []string // weights; empty until the index is read when index != ""
	index  string   // "" or safetensorsIndex: shards come from its weight_map
	gguf   string   // the chosen GGUF file ("" for safetensors)
}

// files lists everything selected so far, in download order.
func (s selection) files() []string {
	out := append([]string(nil), s.small...)
	if s.gguf != "" {
		out = append(out, s.gguf)
	}
	return append(out, s.shards...)
}

// selectFiles picks what the engine needs among the repo's file names.
// A safetensors checkpoint takes precedence over GGUF files unless the ref
// names a file. Only top-level safetensors count (subfolders hold other
// variants, e.g. onnx/ or original/).
func selectFiles(r Ref, names []string) (selection, error) {
	have := make(map[string]bool, len(names))
	var ggufs, tensors []string
	for _, n := range names {
		have[n] = true
		switch {
		case isGGUF(n):
			ggufs = append(ggufs, n)
		case strings.HasSuffix(n, ".safetensors") && !strings.Contains(n, "/"):
			tensors = append(tensors, n)
		}
	}
	sort.Strings(ggufs)
	sort.Strings(tensors)
	if r.File != "" {
		f, err := pickGGUF(r, ggufs, have)
		if err != nil {
			return selection{}, err
		}
		return selection{gguf: f}, nil
	}
	if len(tensors) > 0 || have[safetensorsIndex] {
		if !have["config.json"] {
			return selection{}, fmt.Errorf("repo %s@%s has safetensors but no config.json", r.Repo, r.Revision)
		}
		var s selection
		for _, f := range engineFiles {
			if have[f] {
				s.small = append(s.small, f)
			}
		}
		if have[safetensorsIndex] {
			s.small = append(s.small, safetensorsIndex)
			s.index = safetensorsIndex
		} else {
			s.shards = tensors
		}
		return s, nil
	}
	switch len(ggufs) {
	case 0:
		return selection{}, fmt.Errorf("repo %s@%s has neither safetensors weights nor a .gguf file", r.Repo, r.Revision)
	case 1:
		return selection{gguf: ggufs[0]}, nil
	}
	return selection{}, fmt.Errorf("repo %s@%s has %d GGUF files; pick one as %s:FILE or by quantisation as %s:Q4_K_M: %s",
		r.Repo, r.Revision, len(ggufs), r.Repo, r.Repo, strings.Join(ggufs, ", "))
}

// isGGUF reports whether n is a GGUF weight file (projector files of
// vision models are not).
func isGGUF(n string) bool {
	base := strings.ToLower(path.Base(n))
	return strings.HasSuffix(base, ".gguf") && !strings.HasPrefix(base, "mmproj")
}

// pickGGUF finds the GGUF file r.File names: an exact path, else the one
// file whose name contains the tag (case-insensitive), preferring names that
// end in TAG.gguf when several contain it.
func pickGGUF(r Ref, ggufs []string, have map[string]bool) (string, error) {
	if have[r.File] {
		if !strings.HasSuffix(strings.ToLower(r.File), ".gguf") {
			return "", fmt.Errorf("%s: a file picked after ':' must be a .gguf file (safetensors repos need no file)", r)
		}
		return r.File, nil
	}
	tag := strings.ToLower(strings.TrimSuffix(r.File, ".gguf"))
	var hits, ends []string
	for _, g := range ggufs {
		base := strings.ToLower(path.Base(g))
		if strings.Contains(base, tag) {
			hits = append(hits, g)
			if strings.HasSuffix(base, tag+".gguf") {
				ends = append(ends, g)
			}
		}
	}
	if len(ends) == 1 {
		return ends[0], nil
	}
	switch len(hits) {
	case 1:
		return hits[0], nil
	case 0:
		if len(ggufs) == 0 {
			return "", fmt.Errorf("%s: %w: the repo has no .gguf files", r, ErrNotFound)
		}
		return "", fmt.Errorf("%s: %w: no .gguf file matches %q; the repo has: %s", r, ErrNotFound, r.File, strings.Join(ggufs, ", "))
	}
	return "", fmt.Errorf("%s: %q matches %d .gguf files, name one exactly: %s", r, r.File, len(hits), strings.Join(hits, ", "))
}

// shardsFromIndex reads the shard names of a safetensors index.
func shardsFromIndex(data []byte) ([]string, error) {
	var idx struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("parse %s: %w", safetensorsIndex, err)
	}
	seen := map[string]bool{}
	var out []string
	for _, f := range idx.WeightMap {
		if !seen[f] {
			if !safeRelPath(f) {
				return nil, fmt.Errorf("parse %s: shard name %q is not a relative path", safetensorsIndex, f)
			}
			seen[f] = true
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("parse %s: empty weight_map", safetensorsIndex)
	}
	sort.Strings(out)
	return out, nil
}
