package regex

import "sync"

// A complement matches the strings its inner expression does not. Its
// states are the inner DFA's, except that the inner dead state becomes
// allState (every continuation matches) and inner states from which every
// continuation matches (a search that has matched, or an anchored tail
// such as .*) become Dead.

// allState is a complement's state once the inner automaton is dead.
const allState int32 = 1 << 30

// maxEscape bounds the inner states a complement explores to find how
// far a non-matching text is.
const maxEscape = 4096

type complement struct {
	inner *Regex
	reps  []rune // one cheapest character per class of the inner program
	mu    sync.Mutex
	dist  map[int32][2]int // inner state → fewest chars, bytes to a non-match
}

// Complement returns the expression that matches exactly the strings r
// does not (with r's search or whole-string semantics).
func Complement(r *Regex) *Regex {
	if r.neg != nil {
		return r.neg.inner
	}
	reps, _ := representatives(r.prog)
	cheap := make([]rune, len(reps))
	for i, lo := range reps {
		hi := rune(0x10FFFF)
		if i+1 < len(reps) {
			hi = reps[i+1] - 1
		}
		cheap[i] = cheapestIn(lo, hi)
	}
	return &Regex{src: "not " + r.src, search: r.search, prog: r.prog,
		neg: &complement{inner: r, reps: cheap, dist: map[int32][2]int{}}}
}

// cheapestIn returns a character of [lo, hi] with the shortest JSON
// encoding, a plain letter or digit where there is one.
func cheapestIn(lo, hi rune) rune {
	for _, c := range "a0A_-. " {
		if c >= lo && c <= hi {
			return c
		}
	}
	if lo < 0x80 && hi >= 0x20 {
		for c := max(lo, 0x20); c <= min(hi, 0x7E); c++ {
			if c != '"' && c != '\\' {
				return c
			}
		}
	}
	return lo
}

// escape returns the fewest characters and bytes after which the inner
// automaton, from s, no longer matches (inf: never).
func (n *complement) escape(s int32) (int, int) {
	n.mu.Lock()
	if d, ok := n.dist[s]; ok {
		n.mu.Unlock()
		return d[0], d[1]
	}
	n.mu.Unlock()
	in := n.inner
	// Dijkstra on bytes, tracking characters along; the graphs are small.
	type item struct {
		s            int32
		chars, bytes int
	}
	best := map[int32]int{s: 0}
	queue := []item{{s, 0, 0}}
	chars, bytes := inf, inf
	for len(queue) > 0 && len(best) < maxEscape {
		// Pop the cheapest.
		k := 0
		for i := range queue {
			if queue[i].bytes < queue[k].bytes {
				k = i
			}
		}
		it := queue[k]
		queue = append(queue[:k], queue[k+1:]...)
		if it.bytes > best[it.s] {
			continue
		}
		if it.s == Dead || !in.Accepting(it.s) {
			chars, bytes = min(chars, it.chars), min(bytes, it.bytes)
			continue
		}
		for _, c := range n.reps {
			t := in.Step(it.s, c)
			b := it.bytes + EncLen(c)
			if old, ok := best[t]; ok && old <= b {
				continue
			}
			best[t] = b
			queue = append(queue, item{t, it.chars + 1, b})
		}
	}
	// chars is the fewest along cheapest paths; a BFS would give fewer in
	// rare cases, never more than bytes.
	if len(best) >= maxEscape && bytes == inf {
		chars, bytes = 1, 1 // not found within the bound: assume one more character
	}
	n.mu.Lock()
	n.dist[s] = [2]int{chars, bytes}
	n.mu.Unlock()
	return chars, bytes
}

func (n *complement) start() int32 { return n.inner.Start() }

func (n *complement) step(s int32, c rune) int32 {
	if s == allState {
		return s
	}
	t := n.inner.Step(s, c)
	if t == Dead {
		return allState
	}
	if ch, _ := n.escape(t); ch >= inf {
		return Dead // every continuation matches the inner expression
	}
	return t
}

func (n *complement) accepting(s int32) bool {
	return s == allState || s >= 0 && !n.inner.Accepting(s)
}

func (n *complement) minChars(s int32) (int, int) {
	if s == allState {
		return 0, 0
	}
	return n.escape(s)
}

func (n *complement) acceptsRange(s int32, lo, hi rune) bool {
	if s == allState {
		return true
	}
	if n.inner.AcceptsRange(s, lo, hi) {
		// Some character keeps the inner automaton alive; it may still
		// leave the complement alive (checked on the representatives).
		for _, c := range n.reps {
			if c >= lo && c <= hi && n.step(s, c) != Dead {
				return true
			}
		}
		for _, c := range []rune{lo, hi} {
			if n.step(s, c) != Dead {
				return true
			}
		}
		return false
	}
	return true // a character the inner automaton refuses: the complement then takes anything
}
