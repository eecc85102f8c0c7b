package grammar

import (
	"encoding/json"
	"fmt"

	"github.com/macpool/macpool/engine/chat/regex"
)

// oneOf and the complements it needs.
//
// A value is valid under oneOf when exactly one branch holds. The grammar
// enforces it as the union over branches i of
//
//	rest ∧ branch i ∧ ¬branch j (every j ≠ i)
//
// where rest is the sibling keywords. ¬branch j is not needed where the
// two branches are disjoint by a decidable discriminator (their types,
// const/enum values of a property one of them requires, a required
// property the other forbids); elsewhere it is the union that complement
// returns. That union is the whole complement for the forms negation has
// a schema for (type, const, enum, bounds, pattern — through the
// complement automaton —, required, properties, items, contains,
// dependencies, not, allOf, anyOf, if/then/else of those) and a subset of
// it otherwise — additionalProperties and patternProperties are broken by
// requiring a property the branch being kept lists, a format by strings
// outside a superset of it (formatSupersets), multipleOf and uniqueItems
// are left out. A subset is sound for
// constrained decoding: every document the matcher accepts matches exactly
// one branch; some valid documents are not generated (Grammar.Approximated
// says where). When no branch survives the exclusion, oneOf is refused
// (strict) or enforced as anyOf and reported (lenient).

// maxOneOfAlts caps the alternatives one oneOf branch expands into; past
// it the first ones are kept (a subset).
const maxOneOfAlts = 16

// maxTrials bounds the conjunctions one compilation tries for oneOf
// exclusions (each is compiled to see whether any value satisfies it);
// past it, branches that still need exclusions are left out.
const maxTrials = 1000

// maxComplementDepth bounds the nesting complement follows (recursive
// schemas, nested properties).
const maxComplementDepth = 6

func schemaObj(keys []string, vals ...any) *obj {
	o := newObj()
	for i, k := range keys {
		o.set(k, vals[i])
	}
	return o
}

func allOfObj(parts ...any) *obj { return schemaObj([]string{"allOf"}, parts) }

func anyOfObj(parts []any) *obj { return schemaObj([]string{"anyOf"}, parts) }

// complement returns schemas whose union holds only values s rejects, and
// whether the union holds all of them. Keywords whose negation has no
// schema form here are left out, making the union a subset. names are
// property names worth requiring to break s's additionalProperties or
// patternProperties (the names the branch being kept lists).
func (c *compiler) complement(s any, base string, names []string, depth int) ([]any, bool) {
	if depth > maxComplementDepth {
		return nil, false
	}
	s, base = c.deref(s, base)
	switch s := s.(type) {
	case bool:
		if s {
			return nil, true
		}
		return []any{true}, true
	case *obj:
		return c.complementObj(s, base, names, depth)
	}
	return nil, false
}

func (c *compiler) complementObj(s *obj, base string, names []string, depth int) ([]any, bool) {
	var out []any
	exact := true
	add := func(alts []any, ex bool) {
		out = append(out, alts...)
		exact = exact && ex
	}
	isObject := func(keys []string, vals ...any) *obj {
		return schemaObj(append([]string{"type"}, keys...), append([]any{"object"}, vals...)...)
	}
	props, _ := s.m["properties"].(*obj)
	pats, _ := s.m["patternProperties"].(*obj)
	for _, k := range s.keys {
		v := s.m[k]
		switch k {
		case "$ref", "$dynamicRef", "$recursiveRef":
			ref, _ := v.(string)
			t, tb, ok := c.resolve(ref, base)
			if !ok {
				exact = false
				continue
			}
			add(c.complement(t, tb, names, depth+1))
			if c.draft < 2019 && k == "$ref" {
				// Siblings of $ref are ignored before 2019-09.
				return out, exact
			}
		case "type":
			add([]any{schemaObj([]string{"not"}, schemaObj([]string{"type"}, v))}, true)
		case "const", "enum":
			vals := []any{v}
			if k == "enum" {
				vals, _ = v.([]any)
			}
			scalar := true
			for _, x := range vals {
				switch x.(type) {
				case *obj, []any:
					scalar = false
				}
			}
			if scalar {
				add([]any{schemaObj([]string{"not"}, schemaObj([]string{k}, v))}, true)
				continue
			}
			// Values of the other types fail it.
			var types []any
			for _, t := range []string{"object", "array", "string", "number", "boolean", "null"} {
				present := false
				for _, x := range vals {
					if jsonType(x) == t {
						present = true
					}
				}
				if !present {
					types = append(types, t)
				}
			}
			if len(types) > 0 {
				add([]any{schemaObj([]string{"type"}, types)}, false)
			} else {
				exact = false
			}
		case "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties":
			neg, _, ok := negateBound(k, v)
			switch {
			case !ok:
				// Draft 4's boolean exclusive bounds: the bound itself,
				// negated as inclusive, is a subset.
				exact = false
			case neg != nil:
				if c.draft == 4 && (k == "minimum" || k == "maximum") && s.m["exclusive"+upperFirst(k)] == true {
					exact = false
				}
				add([]any{neg}, true)
			}
		case "required":
			list, _ := v.([]any)
			for _, x := range list {
				name, _ := x.(string)
				add([]any{isObject([]string{"properties"}, schemaObj([]string{name}, false))}, true)
			}
		case "properties":
			for _, name := range props.keys {
				sub, ex := c.complement(props.m[name], base, nil, depth+1)
				for _, n := range sub {
					out = append(out, isObject([]string{"required", "properties"}, []any{name}, schemaObj([]string{name}, n)))
				}
				exact = exact && ex
			}
		case "patternProperties":
			exact = false
			for _, p := range pats.keys {
				re, err := regex.Compile(p)
				if err != nil {
					continue
				}
				var sub []any
				computed := false
				for _, name := range names {
					if !re.MatchString(name) {
						continue
					}
					if !computed {
						sub, _ = c.complement(pats.m[p], base, nil, depth+1)
						computed = true
					}
					for _, n := range sub {
						out = append(out, isObject([]string{"required", "properties"}, []any{name}, schemaObj([]string{name}, n)))
					}
				}
			}
		case "additionalProperties":
			if v == true {
				continue
			}
			exact = false
			sub, _ := c.complement(v, base, nil, depth+1)
			for _, name := range names {
				if _, listed := props.get(name); listed || matchesAny(pats, name) {
					continue
				}
				for _, n := range sub {
					out = append(out, isObject([]string{"required", "properties"}, []any{name}, schemaObj([]string{name}, n)))
				}
			}
			if v == false && pats == nil {
				// More keys than it lists: one of them is additional.
				n := 0
				if props != nil {
					n = len(props.keys)
				}
				out = append(out, isObject([]string{"minProperties"}, json.Number(fmt.Sprint(n+1))))
			}
		case "dependentRequired", "dependencies", "dependentSchemas":
			d, _ := v.(*obj)
			if d == nil {
				continue
			}
			for _, name := range d.keys {
				switch dv := d.m[name].(type) {
				case []any:
					for _, x := range dv {
						other, _ := x.(string)
						out = append(out, isObject([]string{"required", "properties"}, []any{name}, schemaObj([]string{other}, false)))
					}
				default:
					sub, ex := c.complement(dv, base, names, depth+1)
					for _, n := range sub {
						out = append(out, isObject([]string{"required", "allOf"}, []any{name}, []any{n}))
					}
					exact = exact && ex
				}
			}
		case "items", "prefixItems":
			tuple, isTuple := v.([]any)
			if !isTuple {
				if _, hasPrefix := s.m["prefixItems"]; hasPrefix {
					exact = false // items after a prefix: no schema form
					continue
				}
				if _, tupleItems := s.m["items"].([]any); tupleItems {
					continue
				}
				sub, ex := c.complement(v, base, nil, depth+1)
				for _, n := range sub {
					out = append(out, schemaObj([]string{"type", "contains"}, "array", n))
				}
				exact = exact && ex
				continue
			}
			if k == "items" {
				if _, hasPrefix := s.m["prefixItems"]; hasPrefix {
					continue // 2020-12 prefixItems wins
				}
			}
			for i, it := range tuple {
				sub, ex := c.complement(it, base, nil, depth+1)
				for _, n := range sub {
					pre := make([]any, i+1)
					for j := range i {
						pre[j] = true
					}
					pre[i] = n
					out = append(out, schemaObj([]string{"type", "minItems", "prefixItems", "items"}, "array", json.Number(fmt.Sprint(i+1)), pre, true))
				}
				exact = exact && ex
			}
		case "additionalItems":
			tuple, isTuple := s.m["items"].([]any)
			if !isTuple {
				continue // ignored without tuple items
			}
			if v == false {
				out = append(out, schemaObj([]string{"type", "minItems"}, "array", json.Number(fmt.Sprint(len(tuple)+1))))
			} else if v != true {
				exact = false
			}
		case "contains":
			if _, ok := s.m["minContains"]; ok && c.draft >= 2019 {
				exact = false
				continue
			}
			// No item matches: every item fails the contains schema.
			sub, ex := c.complement(v, base, nil, depth+1)
			out = append(out, schemaObj([]string{"type", "items"}, "array", anyOfObj(sub)))
			exact = exact && ex
		case "allOf":
			list, _ := v.([]any)
			for _, a := range list {
				add(c.complement(a, base, names, depth+1))
			}
		case "anyOf", "oneOf":
			// None of them holds (for oneOf, two holding is left out).
			list, _ := v.([]any)
			var parts []any
			ex := k == "anyOf"
			for _, a := range list {
				sub, e := c.complement(a, base, names, depth+1)
				ex = ex && e
				if len(sub) == 0 {
					parts = nil
					break
				}
				parts = append(parts, anyOfObj(sub))
			}
			if len(parts) > 0 && len(parts) <= 4 {
				out = append(out, allOfObj(parts...))
			} else if len(parts) > 4 {
				ex = false
			}
			exact = exact && ex
		case "not":
			out = append(out, v)
		case "if":
			thenS, hasThen := s.m["then"]
			elseS, hasElse := s.m["else"]
			if hasThen {
				sub, ex := c.complement(thenS, base, names, depth+1)
				if len(sub) > 0 {
					out = append(out, allOfObj(v, anyOfObj(sub)))
				}
				exact = exact && ex
			}
			if hasElse {
				negIf, ex1 := c.complement(v, base, names, depth+1)
				negElse, ex2 := c.complement(elseS, base, names, depth+1)
				if len(negIf) > 0 && len(negElse) > 0 {
					out = append(out, allOfObj(anyOfObj(negIf), anyOfObj(negElse)))
				}
				exact = exact && ex1 && ex2
			}
		case "pattern", mergedPatterns, "format", mergedFormats:
			// Strings the pattern does not match; for a format, strings
			// outside a superset of it (a subset of its complement).
			var list []string
			switch v := v.(type) {
			case string:
				list = []string{v}
			case []string:
				list = v
			}
			for _, p := range list {
				if k == "pattern" || k == mergedPatterns {
					if c.pattern(p) == nil {
						exact = false
						continue
					}
					out = append(out, schemaObj([]string{"type", mergedNotPatterns}, "string", []string{p}))
					continue
				}
				exact = false
				if sup, ok := formatSupersets[p]; ok {
					out = append(out, schemaObj([]string{"type", mergedNotFull}, "string", []string{sup}))
				}
			}
		case mergedNotPatterns:
			list, _ := v.([]string)
			for _, p := range list {
				out = append(out, schemaObj([]string{"type", "pattern"}, "string", p))
			}
		case "then", "else", "minContains", "maxContains":
			if k == "maxContains" && c.draft >= 2019 {
				exact = false
			}
		default:
			if assertionKeywords[k] || k == "pattern" || k == "format" || k == "multipleOf" || k == "uniqueItems" || k == "propertyNames" || k == "unevaluatedProperties" || k == "unevaluatedItems" || k[0] == 0 {
				// pattern, format, multipleOf, uniqueItems, propertyNames,
				// unevaluated*: no schema form of their negation here.
				if k != "$defs" && k != "definitions" && !(k == "uniqueItems" && v == false) {
					exact = false
				}
			}
		}
	}
	return out, exact
}

func upperFirst(s string) string { return string(s[0]-'a'+'A') + s[1:] }

func matchesAny(pats *obj, name string) bool {
	if pats == nil {
		return false
	}
	for _, p := range pats.keys {
		re, err := regex.Compile(p)
		if err != nil || re.MatchString(name) {
			return true // an unknown pattern may match
		}
	}
	return false
}

// jsonType is the JSON Schema type of a decoded value (integers as number).
func jsonType(v any) string {
	switch v.(type) {
	case *obj:
		return "object"
	case []any:
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	}
	return "null"
}

// Type sets: the JSON types a schema admits (integer counted as number).
const (
	tObject = 1 << iota
	tArray
	tString
	tNumber
	tBoolean
	tNull
	tAll = tObject | tArray | tString | tNumber | tBoolean | tNull
)

var typeBits = map[string]int{"object": tObject, "array": tArray, "string": tString, "number": tNumber, "integer": tNumber, "boolean": tBoolean, "null": tNull}

func typeSetOf(v any) int {
	switch v := v.(type) {
	case string:
		return typeBits[v]
	case []any:
		t := 0
		for _, x := range v {
			s, _ := x.(string)
			t |= typeBits[s]
		}
		return t
	}
	return tAll
}

// types returns a superset of the types of the values s admits.
func (c *compiler) types(s any, base string, depth int) int {
	if depth > maxComplementDepth {
		return tAll
	}
	s, base = c.deref(s, base)
	switch s := s.(type) {
	case bool:
		if s {
			return tAll
		}
		return 0
	case *obj:
		t := tAll
		if v, ok := s.m["type"]; ok {
			t &= typeSetOf(v)
		}
		if lits, ok := literalsOf(s); ok {
			lt := 0
			for _, l := range lits {
				lt |= typeBits[jsonType(l)]
			}
			t &= lt
		}
		if n, ok := s.m["not"].(*obj); ok && len(n.keys) == 1 {
			if v, ok := n.m["type"]; ok {
				t &^= typeSetOf(v)
			}
		}
		if all, ok := s.m["allOf"].([]any); ok {
			for _, a := range all {
				t &= c.types(a, base, depth+1)
			}
		}
		for _, k := range []string{"anyOf", "oneOf"} {
			if alts, ok := s.m[k].([]any); ok {
				u := 0
				for _, a := range alts {
					u |= c.types(a, base, depth+1)
				}
				t &= u
			}
		}
		if ref, ok := s.m["$ref"].(string); ok {
			if r, rb, ok := c.resolve(ref, base); ok {
				t &= c.types(r, rb, depth+1)
			}
		}
		return t
	}
	return tAll
}

// literalsOf returns the values s's const/enum allow (ok false: no such
// keyword).
func literalsOf(s *obj) ([]any, bool) {
	if v, ok := s.m["const"]; ok {
		if e, ok := s.m["enum"].([]any); ok && !containsJSON(e, v) {
			return nil, true
		}
		return []any{v}, true
	}
	if e, ok := s.m["enum"].([]any); ok {
		return e, true
	}
	return nil, false
}

// literals is literalsOf through $ref and allOf (intersected).
func (c *compiler) literals(s any, base string, depth int) ([]any, bool) {
	if depth > maxComplementDepth {
		return nil, false
	}
	s, base = c.deref(s, base)
	o, ok := s.(*obj)
	if !ok {
		return nil, false
	}
	lits, have := literalsOf(o)
	if all, ok := o.m["allOf"].([]any); ok {
		for _, a := range all {
			l, ok := c.literals(a, base, depth+1)
			if !ok {
				continue
			}
			if !have {
				lits, have = l, true
				continue
			}
			var keep []any
			for _, x := range lits {
				if containsJSON(l, x) {
					keep = append(keep, x)
				}
			}
			lits = keep
		}
	}
	return lits, have
}

// disjoint reports whether no value satisfies both a and b, decided by
// types and, for objects, by a property one of them requires that the
// other forbids or holds to disjoint values. false means "not shown".
func (c *compiler) disjoint(a, b any, base string, depth int) bool {
	if depth > maxComplementDepth {
		return false
	}
	ta, tb := c.types(a, base, depth), c.types(b, base, depth)
	common := ta & tb
	if common == 0 {
		return true
	}
	if la, ok := c.literals(a, base, depth); ok {
		if lb, ok := c.literals(b, base, depth); ok {
			shared := false
			for _, x := range la {
				if containsJSON(lb, x) {
					shared = true
				}
			}
			if !shared {
				return true
			}
		}
	}
	if common == tString && c.stringsDisjoint(a, b, base) {
		return true
	}
	if common != tObject {
		return false
	}
	ao, _ := derefObj(c, a, base)
	bo, _ := derefObj(c, b, base)
	if ao == nil || bo == nil {
		return false
	}
	for _, pair := range [][2]*obj{{ao, bo}, {bo, ao}} {
		x, y := pair[0], pair[1]
		for _, name := range c.requiredOf(x, base, depth) {
			ys, ok := propSchema(y, name)
			if !ok {
				continue
			}
			if ys == false {
				return true
			}
			if xs, ok := propSchema(x, name); ok && xs != nil && ys != nil && c.disjoint(xs, ys, base, depth+1) {
				return true
			}
		}
	}
	return false
}

func derefObj(c *compiler, s any, base string) (*obj, string) {
	t, tb := c.deref(s, base)
	o, _ := t.(*obj)
	return o, tb
}

// requiredOf lists the names o requires, its allOf members' included.
func (c *compiler) requiredOf(o *obj, base string, depth int) []string {
	out := requiredOf(o)
	if all, ok := o.m["allOf"].([]any); ok && depth <= maxComplementDepth {
		for _, a := range all {
			if ao, ab := derefObj(c, a, base); ao != nil {
				out = append(out, c.requiredOf(ao, ab, depth+1)...)
			}
		}
	}
	return out
}

func requiredOf(o *obj) []string {
	var out []string
	list, _ := o.m["required"].([]any)
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// propSchema returns the schema o's properties give name; false when
// additionalProperties: false (and no pattern) forbids it; ok false when
// o says nothing decidable about it.
func propSchema(o *obj, name string) (any, bool) {
	props, _ := o.m["properties"].(*obj)
	if v, ok := props.get(name); ok {
		return v, true
	}
	pats, _ := o.m["patternProperties"].(*obj)
	if o.m["additionalProperties"] == false && !matchesAny(pats, name) {
		return false, true
	}
	return nil, false
}

// propertyNames lists the names a schema's properties and required name.
func propertyNames(o *obj) []string {
	var out []string
	if props, ok := o.m["properties"].(*obj); ok {
		out = append(out, props.keys...)
	}
	for _, r := range requiredOf(o) {
		if !slicesContains(out, r) {
			out = append(out, r)
		}
	}
	return out
}

// oneOf compiles rest ∧ oneOf(alts) as described at the top of this file.
func (c *compiler) oneOf(rest *obj, alts []any, path, base string) *node {
	hasRest := hasAssertions(rest, "")
	// merged[i]: rest ∧ branch i as one schema object (nil: no value).
	merged := make([]*obj, len(alts))
	mergedOK := make([]bool, len(alts))
	for i, a := range alts {
		if a == false {
			continue
		}
		t, tb := c.deref(a, base)
		switch t := t.(type) {
		case bool:
			if !t {
				continue
			}
			merged[i], mergedOK[i] = rest, true
		case *obj:
			if !hasRest {
				merged[i], mergedOK[i] = t, true
				continue
			}
			m, ok := c.merge(fmt.Sprintf("%s/oneOf/%d", path, i), rest, t, tb)
			merged[i], mergedOK[i] = m, ok
		}
	}
	c.oneOfDepth++
	defer func() { c.oneOfDepth-- }()
	u := &node{kind: kUnion}
	exact := true
	for i, a := range alts {
		if t, _ := c.deref(a, base); t == false {
			continue
		}
		p := fmt.Sprintf("%s/oneOf/%d", path, i)
		var others []int
		for j := range alts {
			if j == i {
				continue
			}
			if t, _ := c.deref(alts[j], base); t == false {
				continue
			}
			var bj any = alts[j]
			if mergedOK[j] {
				bj = merged[j]
			}
			if mergedOK[i] && c.disjoint(merged[i], bj, base, 0) {
				continue
			}
			others = append(others, j)
		}
		if len(others) == 0 {
			// Exclusive of the others already.
			switch {
			case !hasRest:
				u.alts = append(u.alts, c.compileAt(a, p, base))
			case mergedOK[i]:
				u.alts = append(u.alts, c.compileObj(merged[i], p, base))
			default:
				c.refuse(p, "oneOf", "a recursive branch cannot be merged with its siblings")
				u.alts = append(u.alts, c.compileAt(a, p, base))
			}
			continue
		}
		if !mergedOK[i] || c.oneOfDepth > 8 {
			exact = false // a recursive branch: not generated
			continue
		}
		names := propertyNames(merged[i])
		type part struct {
			s *obj
			n *node
		}
		parts := []part{{s: merged[i]}}
		for _, j := range others {
			comp, ex := c.complement(alts[j], base, names, 0)
			exact = exact && ex
			var next []part
			for _, pt := range parts {
				for _, n := range comp {
					m, ok := c.merge(p, pt.s, n, base)
					if !ok {
						exact = false
						continue
					}
					// Keep only satisfiable conjunctions; what a trial
					// compile refuses is recorded again if it is kept.
					if c.trials++; c.trials > maxTrials {
						exact = false
						continue
					}
					mark := len(c.refused)
					nn := c.compileObj(m, p, base)
					computeCosts(nn)
					c.refused = c.refused[:mark]
					if nn.cost >= costInf {
						continue
					}
					if len(next) == maxOneOfAlts {
						exact = false
						continue
					}
					next = append(next, part{s: m, n: nn})
				}
			}
			parts = next
			if len(parts) == 0 {
				break
			}
		}
		for _, pt := range parts {
			u.alts = append(u.alts, c.compileObj(pt.s, p, base))
		}
	}
	n := simplifyUnion(u)
	if n.kind == kNever && !exact {
		c.refuse(path, "oneOf", "its branches overlap in ways no exclusive form of them can enforce")
		return c.anyOfNode(rest, alts, path, base, hasRest)
	}
	if !exact {
		c.approx = append(c.approx, "oneOf at "+path+" (enforced as a subset: values matching one branch are generated only where the others are excluded decidably)")
	}
	return n
}

// anyOfNode compiles rest ∧ anyOf(alts).
func (c *compiler) anyOfNode(rest *obj, alts []any, path, base string, hasRest bool) *node {
	u := &node{kind: kUnion}
	for i, a := range alts {
		p := fmt.Sprintf("%s/oneOf/%d", path, i)
		if a == false {
			continue
		}
		if !hasRest {
			u.alts = append(u.alts, c.compileAt(a, p, base))
			continue
		}
		t, tb := c.deref(a, base)
		m, ok := c.merge(p, rest, t, tb)
		if !ok {
			u.alts = append(u.alts, c.compileAt(a, p, base))
			continue
		}
		u.alts = append(u.alts, c.compileObj(m, p, base))
	}
	return simplifyUnion(u)
}

// stringsDisjoint reports whether a pattern or format of a and one of b
// match no common string.
func (c *compiler) stringsDisjoint(a, b any, base string) bool {
	ra, rb := c.regexesOf(a, base, 0), c.regexesOf(b, base, 0)
	for _, x := range ra {
		for _, y := range rb {
			k := [2]*regex.Regex{x, y}
			d, ok := c.disjointRes[k]
			if !ok {
				d, _ = regex.Disjoint(x, y)
				c.disjointRes[k] = d
			}
			if d {
				return true
			}
		}
	}
	return false
}

// regexesOf returns the automata of s's patterns and formats (all must
// match), through $ref and allOf.
func (c *compiler) regexesOf(s any, base string, depth int) []*regex.Regex {
	if depth > maxComplementDepth {
		return nil
	}
	o, ob := derefObj(c, s, base)
	if o == nil {
		return nil
	}
	var out []*regex.Regex
	for _, p := range patternsOf(o) {
		if re := c.pattern(p); re != nil {
			out = append(out, re)
		}
	}
	for _, f := range formatsOf(o) {
		if re := formatRegex(f); re != nil {
			out = append(out, re)
		}
	}
	if list, ok := o.m[mergedNotPatterns].([]string); ok {
		for _, p := range list {
			if re := c.pattern(p); re != nil {
				out = append(out, regex.Complement(re))
			}
		}
	}
	if all, ok := o.m["allOf"].([]any); ok {
		for _, x := range all {
			out = append(out, c.regexesOf(x, ob, depth+1)...)
		}
	}
	return out
}

// pattern returns the automaton of a pattern, nil if it has none.
func (c *compiler) pattern(p string) *regex.Regex {
	if re, ok := c.patterns[p]; ok {
		return re
	}
	re, err := regex.Compile(p)
	if err != nil {
		re = nil
	}
	c.patterns[p] = re
	return re
}

// fullPattern returns the automaton of a whole-string expression (of
// formatSupersets), nil if it has none.
func (c *compiler) fullPattern(p string) *regex.Regex {
	if re, ok := c.patterns["\x00"+p]; ok {
		return re
	}
	re, err := regex.CompileFull(p)
	if err != nil {
		re = nil
	}
	c.patterns["\x00"+p] = re
	return re
}

// formatSupersets holds, per format, a whole-string expression every
// valid value matches (as a strict validator reads the format): strings
// outside it are surely not of the format.
var formatSupersets = map[string]string{
	"hostname":  `[A-Za-z0-9.-]+`,
	"ipv4":      `[0-9.]+`,
	"ipv6":      `[0-9A-Fa-f:.]+`,
	"date":      `[0-9]{4}-[0-9]{2}-[0-9]{2}`,
	"date-time": `[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt].*`,
	"time":      `[0-9]{2}:[0-9]{2}:[0-9]{2}.*`,
	"uuid":      `[0-9A-Fa-f-]{36}`,
	"email":     `.*@.*`,
}
