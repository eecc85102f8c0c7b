package emu

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Kernel is one kernel function found in the source.
type Kernel struct {
	Name   string
	Params []Param
}

// Param is one kernel parameter: its declared type and Metal attribute.
type Param struct {
	Type, Name string
	Attr       string // "buffer", "thread_position_in_grid", ...
	Index      int    // buffer index for Attr == "buffer"
}

var (
	lineCommentRE  = regexp.MustCompile(`//[^\n]*`)
	blockCommentRE = regexp.MustCompile(`(?s)/\*.*?\*/`)
	attrRE         = regexp.MustCompile(`\[\[\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\(\s*([0-9]+)\s*\))?\s*\]\]`)
	kernelRE       = regexp.MustCompile(`\bkernel\s+void\s+([A-Za-z_][A-Za-z0-9_]*)\s*\(`)
	identTailRE    = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*$`)
	stdlibRE       = regexp.MustCompile(`(?m)^[ \t]*#[ \t]*include[ \t]*<metal_[a-z_]+>[ \t]*$`)
	// tgMemRE is a threadgroup-memory declaration (TG_MEM type name[N];).
	tgMemRE = regexp.MustCompile(`\bTG_MEM[ \t]+[^;\n]*?\b([A-Za-z_][A-Za-z0-9_]*)[ \t]*\[[^;\n\]]*\][ \t]*;`)
)

// ctxField maps a Metal thread-position attribute to the emulator's value.
var ctxField = map[string]string{
	"thread_position_in_grid":        "c.gid",
	"thread_position_in_threadgroup": "c.lid",
	"threadgroup_position_in_grid":   "c.tgid",
	"threads_per_threadgroup":        "c.tpg",
	"threadgroups_per_grid":          "c.ngroups",
	"threads_per_grid":               "c.grid",
	"thread_index_in_threadgroup":    "emu::scalar3(c.lindex)",
	"thread_index_in_simdgroup":      "emu::scalar3(c.lane)",
	"simd_lane_id":                   "emu::scalar3(c.lane)",
	"simdgroup_index_in_threadgroup": "emu::scalar3(c.sg)",
	"simd_group_id":                  "emu::scalar3(c.sg)",
	"simdgroups_per_threadgroup":     "emu::scalar3(c.nsg)",
	"threads_per_simdgroup":          "emu::scalar3(32)",
}

// Translate turns MSL source into C++ to be compiled after prelude.h: comments
// and [[attributes]] are removed (the address-space keywords are macros in
// the prelude), and an entry shim per kernel plus the kernel table
// (emu_kernels) are appended. It returns the kernels found.
func Translate(src string) (string, []Kernel, error) {
	src = blockCommentRE.ReplaceAllStringFunc(src, func(s string) string {
		return strings.Repeat("\n", strings.Count(s, "\n"))
	})
	src = lineCommentRE.ReplaceAllString(src, "")
	src = stdlibRE.ReplaceAllString(src, "") // the prelude is the emulator's metal_stdlib
	var kernels []Kernel
	for _, m := range kernelRE.FindAllStringSubmatchIndex(src, -1) {
		name := src[m[2]:m[3]]
		open := m[1] - 1
		end := matchParen(src, open)
		if end < 0 {
			return "", nil, fmt.Errorf("kernel %s: unbalanced parameter list", name)
		}
		k := Kernel{Name: name}
		for _, raw := range splitParams(src[open+1 : end]) {
			p, err := parseParam(raw)
			if err != nil {
				return "", nil, fmt.Errorf("kernel %s: %w", name, err)
			}
			k.Params = append(k.Params, p)
		}
		kernels = append(kernels, k)
	}
	if len(kernels) == 0 {
		return "", nil, fmt.Errorf("no kernel functions in source")
	}
	// Every threadgroup-memory variable is poisoned when its threadgroup
	// starts (the GPU's holds garbage) and counted against 32 KiB.
	src = tgMemRE.ReplaceAllString(src, "$0 static thread_local unsigned long emu_tg_serial_$1; emu_tg_init(&$1, sizeof($1), &emu_tg_serial_$1);")
	var b strings.Builder
	b.WriteString(attrRE.ReplaceAllString(src, ""))
	b.WriteString("\n// ---- emulator entry shims ----\n")
	for _, k := range kernels {
		fmt.Fprintf(&b, "static void emu_shim_%s(void **a, const emu::Ctx &c) {\n\t(void)a; (void)c;\n\t%s(", k.Name, k.Name)
		for i, p := range k.Params {
			if i > 0 {
				b.WriteString(",\n\t\t")
			}
			switch {
			case p.Attr == "buffer" && strings.HasSuffix(p.Type, "&"):
				fmt.Fprintf(&b, "*(%s *)a[%d]", strings.TrimSpace(strings.TrimSuffix(p.Type, "&")), p.Index)
			case p.Attr == "buffer":
				fmt.Fprintf(&b, "(%s)a[%d]", p.Type, p.Index)
			default:
				fmt.Fprintf(&b, "emu::attr<%s>(%s)", p.Type, ctxField[p.Attr])
			}
		}
		b.WriteString(");\n}\n")
	}
	// Per kernel, the bytes a binding at each buffer index must hold: the
	// referenced struct, or one element behind a pointer (Metal's
	// validation layer checks the same).
	for _, k := range kernels {
		sizes := argSizes(k)
		fmt.Fprintf(&b, "static const unsigned long emu_sizes_%s[] = {0", k.Name)
		for _, sz := range sizes {
			b.WriteString(", " + sz)
		}
		b.WriteString("};\n")
	}
	b.WriteString("extern \"C\" const emu::Kernel emu_kernels[] = {\n")
	for _, k := range kernels {
		fmt.Fprintf(&b, "\t{%q, emu_shim_%s, %d, emu_sizes_%s + 1},\n", k.Name, k.Name, len(argSizes(k)), k.Name)
	}
	fmt.Fprintf(&b, "};\nextern \"C\" const int emu_nkernels = %d;\n", len(kernels))
	return b.String(), kernels, nil
}

// argSizes is the C++ sizeof expression per buffer index of k ("0" for an
// index the kernel does not declare).
func argSizes(k Kernel) []string {
	n := 0
	for _, p := range k.Params {
		if p.Attr == "buffer" {
			n = max(n, p.Index+1)
		}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = "0"
	}
	for _, p := range k.Params {
		if p.Attr != "buffer" {
			continue
		}
		t := strings.TrimSpace(strings.TrimSuffix(strings.TrimSuffix(strings.TrimSpace(p.Type), "&"), "*"))
		out[p.Index] = "sizeof(" + t + ")"
	}
	return out
}

func matchParen(s string, open int) int {
	depth := 0
	for i := open; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return i
			}
		}
	}
	return -1
}

func splitParams(s string) []string {
	var out []string
	depth, last := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '[', '<':
			depth++
		case ')', ']', '>':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[last:i])
				last = i + 1
			}
		}
	}
	if strings.TrimSpace(s[last:]) != "" {
		out = append(out, s[last:])
	}
	return out
}

func parseParam(raw string) (Param, error) {
	am := attrRE.FindStringSubmatch(raw)
	if am == nil {
		return Param{}, fmt.Errorf("parameter %q has no [[attribute]]", strings.TrimSpace(raw))
	}
	decl := strings.TrimSpace(attrRE.ReplaceAllString(raw, ""))
	nm := identTailRE.FindStringSubmatchIndex(decl)
	if nm == nil {
		return Param{}, fmt.Errorf("parameter %q has no name", decl)
	}
	p := Param{
		Type: strings.Join(strings.Fields(decl[:nm[2]]), " "),
		Name: decl[nm[2]:nm[3]],
		Attr: am[1],
	}
	switch {
	case p.Attr == "buffer":
		if am[2] == "" {
			return Param{}, fmt.Errorf("parameter %s: [[buffer]] without index", p.Name)
		}
		p.Index, _ = strconv.Atoi(am[2])
	case ctxField[p.Attr] != "":
	default:
		return Param{}, fmt.Errorf("parameter %s: attribute [[%s]] not supported by the emulator", p.Name, p.Attr)
	}
	return p, nil
}
