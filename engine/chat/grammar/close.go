package grammar

import (
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/macpool/macpool/engine/chat/regex"
)

// Costs are in bytes of compact JSON. A node's cost is the length of its
// shortest value; a state's close cost the length of its shortest
// completion. Both are exact for the automaton except where noted
// (strings with both a pattern and a minLength take the larger of the two
// lower bounds; dependencies of optional properties are not counted).

func isStatic(n *node) bool {
	switch n {
	case anyNode, neverNode, anyObject, anyArray, stringNode, numberNode, boolNode, nullNode:
		return true
	}
	return false
}

// computeCosts sets n.cost for every node reachable from root by
// iterating to a fixpoint (schemas may be recursive) and returns the
// largest finite cost.
func computeCosts(root *node) int {
	var nodes []*node
	seen := map[*node]bool{}
	var walk func(n *node)
	walk = func(n *node) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		if !isStatic(n) {
			nodes = append(nodes, n)
			n.cost = costInf
		}
		for _, p := range n.props {
			walk(p.n)
		}
		for _, p := range n.patterns {
			walk(p.n)
		}
		for _, c := range n.combos {
			walk(c)
		}
		walk(n.additional)
		walk(n.keyNode)
		for _, p := range n.prefix {
			walk(p)
		}
		walk(n.items)
		for _, p := range n.cprefix {
			walk(p)
		}
		walk(n.citems)
		for _, a := range n.alts {
			walk(a)
		}
	}
	walk(root)
	for changed := true; changed; {
		changed = false
		for _, n := range nodes {
			if c := staticCost(n); c < n.cost {
				n.cost = c
				changed = true
			}
		}
	}
	most := 0
	for _, n := range nodes {
		if n.cost < costInf && n.cost > most {
			most = n.cost
		}
	}
	return most
}

func addCost(a, b int) int {
	if a >= costInf || b >= costInf {
		return costInf
	}
	return a + b
}

func staticCost(n *node) int {
	switch n.kind {
	case kAny:
		return 1
	case kNever:
		return costInf
	case kLiteral:
		c := costInf
		for _, l := range n.lits {
			c = min(c, len(l))
		}
		return c
	case kUnion:
		c := costInf
		for _, a := range n.alts {
			c = min(c, a.cost)
		}
		return c
	case kNumber:
		if n.num == nil {
			return 1
		}
		if l, ok := n.num.minLen(); ok {
			return l
		}
		return costInf
	case kString:
		return 2 + strNeed(n, 0, nil)
	case kObject:
		f := &frame{n: n, k: fObj, sub: objOpen, aux: -1, seen: make([]uint64, len(n.required))}
		return 1 + objRest(f, true)
	case kArray:
		f := &frame{n: n, k: fArr, sub: arrOpen}
		return 1 + arrRest(f)
	}
	return costInf
}

// strNeed is the fewest bytes to add to a string with cnt code points and
// regex states rs (nil: the start states) before its closing quote.
func strNeed(n *node, cnt int, rs []int32) int {
	need := max(n.minLen-cnt, 0)
	for i, re := range n.res {
		s := re.Start()
		if rs != nil {
			s = rs[i]
		}
		chars, bytes := re.MinChars(s)
		if chars >= 1<<29 {
			return costInf
		}
		if n.maxLen >= 0 && chars > n.maxLen-cnt {
			return costInf
		}
		need = max(need, bytes)
	}
	return need
}

// keyCost is the cost of `"key":value` for listed property i.
func keyCost(n *node, i int) int { return addCost(len(n.props[i].key)+1, n.props[i].n.cost) }

// freeCost is the cheapest `"key":value` for a key not listed.
func freeCost(n *node) int {
	c := costInf
	if n.additional != nil {
		k := 2 + strNeed(n.keyNode, 0, nil)
		c = addCost(k+1, n.additional.cost)
	}
	for _, p := range n.patterns {
		_, kb := p.re.MinChars(p.re.Start())
		c = min(c, addCost(kb+3, p.n.cost))
	}
	return c
}

// objRest is the cost to finish object frame f (not counting its parent):
// the missing required properties, enough more to reach minProperties,
// the commas and the closing brace. open: f is right after '{'.
func objRest(f *frame, open bool) int {
	n := f.n
	if f.sub == objColon {
		q := *f
		q.sub = objAfter
		return addCost(addCost(1, f.vn.cost), objRest(&q, false))
	}
	cost, keys := 1, 0
	var optional []int
	req := needed(f)
	for j := range n.props {
		if isSeen(f, j) {
			continue
		}
		if has(req, j) {
			cost = addCost(cost, keyCost(n, j))
			keys++
		} else if int32(j) > f.aux {
			optional = append(optional, keyCost(n, j))
		}
	}
	need := max(n.minProps-int(f.cnt)-keys, 0)
	if f.sub == objNext && keys == 0 {
		need = max(need, 1)
	}
	if need > 0 {
		fc := freeCost(n)
		sort.Ints(optional)
		for i := 0; i < need; i++ {
			c := fc
			if i < len(optional) && optional[i] < c {
				c = optional[i]
			} else if fc < costInf {
				// free keys must differ; each costs at least as much again
			}
			if c >= costInf {
				return costInf
			}
			cost += c
		}
		keys += need
	}
	switch {
	case f.sub == objAfter:
		cost += keys
	case f.sub == objNext:
		cost += keys - 1
	case keys > 0:
		cost += keys - 1
	}
	return cost
}

// arrRest is the cost to finish array frame f (not counting its parent).
func arrRest(f *frame) int {
	n := f.n
	need := max(n.minItems-int(f.cnt), 0)
	cneed := 0
	if n.hasContains {
		cneed = max(n.minContains-int(f.aux), 0)
	}
	items := max(need, cneed)
	if f.sub == arrNext {
		items = max(items, 1)
	}
	cost := 1
	for i := 0; i < items; i++ {
		it, ct := n.itemAt(int(f.cnt) + i)
		c := costInf
		if i < cneed {
			if ct != nil {
				c = ct.cost
			}
		} else {
			if it != nil {
				c = it.cost
			}
			if ct != nil {
				c = min(c, ct.cost)
			}
		}
		if cost = addCost(cost, c); cost >= costInf {
			return costInf
		}
	}
	switch {
	case f.sub == arrAfter:
		cost += items
	case f.sub == arrNext:
		cost += items - 1
	case items > 0:
		cost += items - 1
	}
	return cost
}

// coster computes close costs, memoizing the cost above each frame for
// the duration of one mask (frames are immutable).
type coster struct {
	g    *Grammar
	memo map[*frame]int
}

// closeCost is the fewest bytes that complete the document from stack f.
func (g *Grammar) closeCost(f *frame) int { return (&coster{g: g}).closeCost(f) }

func (cs *coster) closeCost(f *frame) int {
	g := cs.g
	switch f.k {
	case fRoot:
		if f.sub == 1 {
			return 0
		}
		return costInf
	case fValue:
		return addCost(f.n.cost, cs.after(f.parent))
	case fObj:
		return addCost(objRest(f, f.sub == objOpen), cs.after(f.parent))
	case fArr:
		return addCost(arrRest(f), cs.after(f.parent))
	case fNum:
		extra := 0
		switch {
		case f.n.num != nil:
			i := f.n.num.info(f.lit)
			if !i.ok {
				return costInf
			}
			extra = i.extra
		case f.sub == numSign || f.sub == numDot || f.sub == numExp || f.sub == numExpSign:
			extra = 1
		}
		return addCost(extra, cs.after(f.parent))
	case fLit:
		c := costInf
		for _, l := range f.n.lits {
			if len(l) >= len(f.lit) && l[:len(f.lit)] == f.lit {
				c = min(c, len(l)-len(f.lit))
			}
		}
		return addCost(c, cs.after(f.parent))
	case fStr:
		pending := 0
		switch f.sub {
		case strEsc:
			pending = 5 // \uXXXX, unless a short escape may come
			if f.n.plain {
				pending = 1
			}
			for _, c := range "\"\\/\b\f\n\r\t" {
				if g.rangeFeasible(f, c, c) {
					pending = 1
					break
				}
			}
		case strHex, strUTF8:
			pending = int(f.left)
		case strSurr:
			pending = 6
		case strSurrU:
			pending = 5
		}
		var rs []int32
		if len(f.n.res) > 0 {
			rs = f.rs[:len(f.n.res)]
		}
		if f.key {
			return cs.keyClose(f, rs, pending)
		}
		return addCost(addCost(pending, strNeed(f.n, int(f.cnt), rs)+1), cs.after(f.parent))
	}
	return costInf
}

// keyClose is the cheapest way to finish a key being read, its value and
// the rest of the document.
func (cs *coster) keyClose(k *frame, rs []int32, pending int) int {
	g := cs.g
	o := k.parent
	n := o.n
	best := costInf
	for i, p := range n.props {
		if !k.free && len(p.name) >= len(k.lit) && p.name[:len(k.lit)] == k.lit && g.candidate(o, i) {
			rest := len(encodeCompact(p.name[len(k.lit):])) - 1 // the suffix and the quote
			switch k.sub {
			case strEsc, strHex, strSurr, strSurrU:
				// The escape being read must spell the name's next character.
				r, size := utf8.DecodeRuneInString(p.name[len(k.lit):])
				if size == 0 {
					continue
				}
				if k.sub == strHex && k.hi == 0 {
					shift := 4 * uint(k.left)
					if r < k.r<<shift || r > (k.r+1)<<shift-1 {
						continue
					}
				}
				esc := pending
				if k.sub == strEsc && !strings.ContainsRune("\"\\/\b\f\n\r\t", r) {
					esc = 5 // only as \uXXXX
				}
				rest = esc + len(encodeCompact(p.name[len(k.lit)+size:])) - 1
			}
			q, ok := g.keyDone(o, &frame{lit: p.name, n: k.n, rs: k.rs})
			if !ok {
				continue
			}
			best = min(best, addCost(rest, cs.closeCost(q)))
		}
	}
	if n.additional != nil || len(n.patterns) > 0 {
		// A key not listed: its value follows the patterns it matches
		// when it ends, additionalProperties when it matches none. Ending
		// the key as it stands, or after the fewest characters that make a
		// still-open pattern match.
		kb := strNeed(k.n, int(k.cnt), rs)
		try := func(extra int, vn *node) {
			if vn == nil || vn.kind == kNever {
				return
			}
			q := o.with()
			q.sub, q.vn, q.cnt = objColon, vn, o.cnt+1
			best = min(best, addCost(pending+extra+1, cs.closeCost(q)))
		}
		mask, alive := 0, false
		for i, p := range n.patterns {
			st := k.rs[len(k.n.res)+i]
			if st == regex.Dead {
				continue
			}
			alive = true
			if p.re.Accepting(st) {
				mask |= 1 << i
			} else if _, b := p.re.MinChars(st); b < costInf {
				try(max(kb, b), p.n)
			}
		}
		if pending == 0 {
			switch {
			case mask == 0:
				try(kb, n.additional)
			case len(n.combos) > 0:
				try(kb, n.combos[mask&(len(n.combos)-1)])
			}
		} else if !alive || mask == 0 {
			try(kb, n.additional)
		}
	}
	return best
}

// after is the cost to finish the document once the value p is reading
// is complete.
func (cs *coster) after(p *frame) int {
	if cs.memo != nil {
		if c, ok := cs.memo[p]; ok {
			return c
		}
	}
	c := cs.afterUncached(p)
	if cs.memo != nil {
		cs.memo[p] = c
	}
	return c
}

func (cs *coster) afterUncached(p *frame) int {
	switch p.k {
	case fRoot:
		return 0
	case fObj:
		q := *p
		q.sub = objAfter
		return addCost(objRest(&q, false), cs.after(p.parent))
	case fArr:
		q := *p
		q.sub = arrAfter
		q.cnt++
		if p.counted {
			q.aux = min(q.aux+1, containsCap(p.n))
		}
		return addCost(arrRest(&q), cs.after(p.parent))
	}
	return costInf
}

func (g *Grammar) minClose(states []*frame) int { return (&coster{g: g}).minClose(states) }

func (cs *coster) minClose(states []*frame) int {
	c := costInf
	for _, s := range states {
		c = min(c, cs.closeCost(s))
	}
	return c
}

// MinCloseBytes returns the fewest bytes that complete the document from
// the current state (0 when it is complete). Each byte is a token of a
// byte-level vocabulary, so that many tokens always suffice.
func (m *Matcher) MinCloseBytes() int {
	if m.Done() {
		return 0
	}
	return m.g.minClose(m.states)
}
