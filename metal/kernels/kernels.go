// Package kernels holds the Metal Shading Language sources of the metal
// backend (embedded .metal files and the shared header common.h) and turns
// them into the one self-contained source string that both the Metal
// compiler (newLibraryWithSource) and the emulator compile.
package kernels

import (
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
)

//go:embed *.metal *.h
var files embed.FS

var includeRE = regexp.MustCompile(`(?m)^[ \t]*#include[ \t]+"([^"]+)"[ \t]*$`)

// File is one .metal file made self-contained (headers inlined): one
// library. Compiling files separately keeps a kernel file that a compiler
// rejects from taking the others down, and recompiles only what changed.
type File struct {
	Name, Source string
}

// Files returns every .metal file, in name order, self-contained.
func Files() ([]File, error) {
	names, err := fs.Glob(files, "*.metal")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []File
	for _, n := range names {
		var b strings.Builder
		if err := expand(&b, n, map[string]bool{}); err != nil {
			return nil, err
		}
		out = append(out, File{Name: n, Source: b.String()})
	}
	return out, nil
}

// Source returns every .metal file (in name order) with local #include
// "x.h" lines replaced by the header's text, each header once: all kernels
// as one library.
func Source() (string, error) {
	names, err := fs.Glob(files, "*.metal")
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	var b strings.Builder
	seen := map[string]bool{}
	for _, n := range names {
		if err := expand(&b, n, seen); err != nil {
			return "", err
		}
	}
	return b.String(), nil
}

func expand(b *strings.Builder, name string, seen map[string]bool) error {
	data, err := files.ReadFile(name)
	if err != nil {
		return fmt.Errorf("kernels: %w", err)
	}
	src := string(data)
	fmt.Fprintf(b, "// ---- %s ----\n", name)
	last := 0
	for _, m := range includeRE.FindAllStringSubmatchIndex(src, -1) {
		b.WriteString(src[last:m[0]])
		inc := src[m[2]:m[3]]
		if !seen[inc] {
			seen[inc] = true
			if err := expand(b, inc, seen); err != nil {
				return fmt.Errorf("kernels: %s includes %w", name, err)
			}
		}
		last = m[1]
	}
	b.WriteString(src[last:])
	b.WriteString("\n")
	return nil
}
