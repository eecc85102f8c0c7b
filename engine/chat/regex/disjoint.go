package regex

import (
	"regexp/syntax"
	"slices"
)

// maxDisjointPairs bounds the state pairs Disjoint explores.
const maxDisjointPairs = 4096

// Disjoint reports whether no string matches both a and b, by a search of
// the product automaton over one character of each class the two
// programs distinguish. known is false when the search was cut short or
// the programs fold case (classes are then not exact); disjoint is then
// false.
func Disjoint(a, b *Regex) (disjoint, known bool) {
	reps, ok := representatives(a.prog, b.prog)
	if !ok {
		return false, false
	}
	type pair struct{ a, b int32 }
	start := pair{a.Start(), b.Start()}
	seen := map[pair]bool{start: true}
	queue := []pair{start}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if a.Accepting(p.a) && b.Accepting(p.b) {
			return false, true
		}
		for _, c := range reps {
			q := pair{a.Step(p.a, c), b.Step(p.b, c)}
			if q.a == Dead || q.b == Dead || seen[q] {
				continue
			}
			if len(seen) >= maxDisjointPairs {
				return false, false
			}
			seen[q] = true
			queue = append(queue, q)
		}
	}
	return true, true
}

// representatives returns one character of every interval of code points
// on which each instruction of the programs matches all or none.
func representatives(progs ...*syntax.Prog) ([]rune, bool) {
	bounds := []rune{0, '\n', '\n' + 1}
	for _, p := range progs {
		for _, in := range p.Inst {
			switch in.Op {
			case syntax.InstRune1:
				bounds = append(bounds, in.Rune[0], in.Rune[0]+1)
			case syntax.InstRune:
				if syntax.Flags(in.Arg)&syntax.FoldCase != 0 {
					return nil, false
				}
				if len(in.Rune) == 1 {
					bounds = append(bounds, in.Rune[0], in.Rune[0]+1)
					continue
				}
				for i := 0; i+1 < len(in.Rune); i += 2 {
					bounds = append(bounds, in.Rune[i], in.Rune[i+1]+1)
				}
			}
		}
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	out := bounds[:0]
	for i, r := range bounds {
		if r > 0x10FFFF {
			break
		}
		if r >= 0xD800 && r <= 0xDFFF {
			// Surrogates are no characters: the interval's first scalar.
			next := rune(0x110000)
			if i+1 < len(bounds) {
				next = bounds[i+1]
			}
			if next <= 0xE000 {
				continue
			}
			r = 0xE000
		}
		out = append(out, r)
	}
	return out, true
}

// Empty reports whether no string matches all of rs, by the search
// Disjoint makes over their product; known is false when it was cut short.
func Empty(rs ...*Regex) (empty, known bool) {
	progs := make([]*syntax.Prog, len(rs))
	for i, r := range rs {
		progs[i] = r.prog
	}
	reps, ok := representatives(progs...)
	if !ok {
		return false, false
	}
	key := func(st []int32) string {
		b := make([]byte, 0, 4*len(st))
		for _, s := range st {
			b = append(b, byte(s), byte(s>>8), byte(s>>16), byte(s>>24))
		}
		return string(b)
	}
	start := make([]int32, len(rs))
	for i, r := range rs {
		start[i] = r.Start()
	}
	seen := map[string]bool{key(start): true}
	queue := [][]int32{start}
	for len(queue) > 0 {
		st := queue[0]
		queue = queue[1:]
		all := true
		for i, r := range rs {
			if !r.Accepting(st[i]) {
				all = false
				break
			}
		}
		if all {
			return false, true
		}
	next:
		for _, c := range reps {
			nx := make([]int32, len(rs))
			for i, r := range rs {
				if nx[i] = r.Step(st[i], c); nx[i] == Dead {
					continue next
				}
			}
			k := key(nx)
			if seen[k] {
				continue
			}
			if len(seen) >= maxDisjointPairs {
				return false, false
			}
			seen[k] = true
			queue = append(queue, nx)
		}
	}
	return true, true
}
