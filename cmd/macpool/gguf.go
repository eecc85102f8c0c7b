package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/macpool/macpool/engine/gguf"
)

func init() {
	register("gguf-info", "print a GGUF file's metadata, model config and tensors", runGGUFInfo)
}

// runGGUFInfo prints the header of --file: metadata (long arrays shortened),
// the model config it maps to (or why not), and with --tensors the tensor
// directory with the canonical names the engine uses.
func runGGUFInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("gguf-info", stderr)
	file := fs.String("file", "", "GGUF file")
	tensors := fs.Bool("tensors", false, "also list the tensors")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return fmt.Errorf("%w: --file is required", errUsage)
	}
	f, err := gguf.Open(*file)
	if err != nil {
		return err
	}
	defer f.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "GGUF v%d, %d tensors, alignment %d, architecture %q\n", f.Version(), len(f.Infos()), f.Alignment(), f.Architecture())
	for _, k := range f.Keys() {
		v, _ := f.Value(k)
		fmt.Fprintf(&b, "  %s = %s\n", k, shortValue(v))
	}
	if cfg, err := f.Config(); err != nil {
		fmt.Fprintf(&b, "config: %v\n", err)
	} else {
		j, _ := json.MarshalIndent(cfg, "", "  ")
		fmt.Fprintf(&b, "config: %s\n", j)
	}
	if *tensors {
		canon := map[string][]string{} // GGUF name -> canonical names
		for _, n := range f.Names() {
			g, _, _ := f.Source(n)
			canon[g] = append(canon[g], n)
		}
		for _, ti := range f.Infos() {
			names := canon[ti.Name]
			desc := strings.Join(names, ", ")
			if len(names) > 2 {
				desc = fmt.Sprintf("%s ... (%d expert views)", names[0], len(names))
			}
			fmt.Fprintf(&b, "  %-28s %-5v %-16v %s\n", ti.Name, ti.Type, fmt.Sprint(ti.Shape()), desc)
		}
	}
	_, err = io.WriteString(stdout, b.String())
	return err
}

// shortValue prints a metadata value, shortening long arrays.
func shortValue(v any) string {
	s := fmt.Sprintf("%v", v)
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return fmt.Sprintf("%T %s", v, s)
}
