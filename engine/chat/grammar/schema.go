// Package grammar constrains decoding to JSON: a byte-level automaton for
// OpenAI response_format "json_object" (any JSON object) and "json_schema"
// (JSON Schema, drafts 4 to 2020-12), and, given the tokenizer's vocabulary
// as bytes, the set of tokens allowed at each step.
//
// # Output shape
//
// Schema-constrained output is compact JSON: no whitespace between tokens,
// listed properties in the order the schema lists them, nothing after the
// document. An object that lists properties without saying
// additionalProperties gets only those (Options.OpenObjects restores JSON
// Schema's open default). json_object allows one whitespace byte per gap.
// Numbers are at most MaxNumberLen bytes; numbers under bounds or
// multipleOf are written without exponent; integers are written without
// fraction and, unless the schema bounds them otherwise, stay below 10^18
// in magnitude (they fit in 64 bits). All of these choose a subset of the
// documents the schema allows.
//
// # Keywords
//
// Enforced exactly: type (and lists), enum, const, properties, required,
// additionalProperties, patternProperties (with properties they also
// match), propertyNames (its string keywords), minProperties,
// maxProperties, dependentRequired, dependentSchemas and both forms of
// dependencies, items, prefixItems, additionalItems, minItems, maxItems,
// contains with minContains, minimum, maximum, exclusiveMinimum,
// exclusiveMaximum (both drafts' forms), multipleOf, minLength, maxLength
// (in code points), pattern (ECMA-262, see package regex), the formats
// listed in format.go (each a regular subset of its RFC), $ref/$defs/
// definitions with recursion, $id (and draft-4 id) relative refs and
// $anchor, boolean schemas; anyOf; not and if/then/else when the schema
// negated has an exact complement (see complement in oneof.go: type,
// const, enum, bounds, pattern, required, properties, items, contains,
// dependencies, not, allOf, anyOf, if/then/else of those); oneOf when its
// branches are disjoint by a decidable discriminator (types, const/enum
// or pattern of a property one branch requires, a property the other
// forbids) or have exact complements.
//
// Approximated (the matcher accepts a superset or a subset, as stated):
//   - allOf is merged into one schema: keyword by keyword intersection
//     (types, bounds, required, enums, properties recursively; patterns,
//     formats and multipleOf all apply; anyOf/oneOf as the product of
//     their branches, up to 128). A member that is a recursive reference
//     cannot be inlined and is reported as not enforced.
//   - other oneOf is enforced as a subset (Grammar.Approximated lists
//     these): each branch excludes the others by the part of their
//     complement that has a schema form — additionalProperties and
//     patternProperties are broken by requiring a property the kept
//     branch lists, a format by strings outside a superset of it;
//     multipleOf and uniqueItems have no such part. Every accepted
//     document matches exactly one branch; some that do are not
//     generated. Where no branch survives, strict mode
//     refuses oneOf with its location and lenient mode enforces it as
//     anyOf, listed in Unenforced.
//   - maxContains bounds only the items the matcher counted for contains.
//   - uniqueItems is exact for scalar items (strings, numbers, literals);
//     for object and array items it is not enforced.
//   - a key matching several of more than four patternProperties is held
//     to the first four.
//   - unevaluatedProperties/unevaluatedItems act as additionalProperties/
//     items of the merged schema; $dynamicRef/$recursiveRef as $ref.
//   - nullable (OpenAPI, not JSON Schema) is ignored.
//
// In strict mode (the default; OpenAI's strict: true) a keyword that is not
// enforced is an error wrapping ErrUnsupported that names it and its
// JSON-pointer location; with Options.Lenient the grammar enforces the rest
// and Unenforced lists what it did not. Annotations (title, description,
// default, examples, deprecated, …), unknown keywords and unknown formats
// are ignored.
//
// # Never truncated
//
// MinCloseBytes says how many bytes at least complete the document from
// the current state; every byte is a token of a byte-level vocabulary, so
// that many tokens always suffice. MaskBudget applies the rule: with n
// tokens left, a token is allowed only if the document can still be
// completed in n-1 tokens after it. While the budget lasts, this forbids
// nothing; as it runs out, it steers to close open strings, arrays and
// objects along the shortest completion. If the budget is already smaller
// than the shortest completion, nothing can save the document and the mask
// is the plain one.
package grammar

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/macpool/macpool/engine/chat/regex"
)

// Limits on unbounded JSON constructs.
const (
	MaxWhitespace = 1 // json_object: whitespace bytes per gap
	MaxNumberLen  = 24
)

type kind uint8

const (
	kAny kind = iota
	kObject
	kArray
	kString
	kNumber
	kLiteral // enum, const, true/false/null: one of a set of JSON texts
	kUnion
	kNever // no value (schema false, or contradictory keywords)
)

// node is one compiled schema.
type node struct {
	kind kind

	// object
	props      []prop
	propIndex  map[string]int
	required   []uint64 // bitset over props
	patterns   []patProp
	combos     []*node // free keys: value schema by bitmask of matching patterns
	additional *node   // value schema of keys not in props nor patterns; nil: not allowed
	keyNode    *node   // string constraints on every key (propertyNames)
	minProps   int
	maxProps   int     // < 0: none
	deps       [][]int // deps[i]: props required once props[i] is present
	hasDeps    bool

	// array
	prefix      []*node
	items       *node   // nil: nothing after prefix
	cprefix     []*node // item ∧ contains, by position
	citems      *node
	minItems    int
	maxItems    int // < 0: none
	hasContains bool
	minContains int
	maxContains int // < 0: none
	unique      bool

	// string
	res    []*regex.Regex // all must match
	minLen int            // code points
	maxLen int            // < 0: none
	plain  bool           // no constraint: plain text leaves the state unchanged

	// tokens that stay inside the string, per vocabulary and automaton
	// states (see Matcher.inString); nil without res
	strCache *tokenCache

	// number
	num *numCons // nil: any number

	// literal
	lits []string
	// scalars: canonical texts this value must not be (not const/enum)
	notLits []string

	// union
	alts []*node

	cost int // fewest bytes of a value (costInf: none), see computeCosts

	// pending marks the placeholder of a recursive schema still being
	// compiled (kAny until filled in): not "any value".
	pending bool
}

type prop struct {
	name string
	key  string // JSON encoding of name, quotes included
	n    *node
	req  bool
}

type patProp struct {
	re *regex.Regex
	n  *node
}

var (
	anyNode    = &node{kind: kAny, cost: 1}
	neverNode  = &node{kind: kNever, cost: costInf}
	anyObject  = &node{kind: kObject, additional: anyNode, maxProps: -1, keyNode: stringNode, cost: 2}
	anyArray   = &node{kind: kArray, items: anyNode, maxItems: -1, maxContains: -1, cost: 2}
	stringNode = &node{kind: kString, maxLen: -1, plain: true, cost: 2}
	numberNode = &node{kind: kNumber, cost: 1}
	boolNode   = &node{kind: kLiteral, lits: []string{"true", "false"}, cost: 4}
	nullNode   = &node{kind: kLiteral, lits: []string{"null"}, cost: 4}
)

const costInf = 1 << 28

// Options select how a schema is compiled.
type Options struct {
	// Lenient enforces what can be enforced and lists the rest in
	// Grammar.Unenforced instead of refusing the schema.
	Lenient bool
	// AnyKeyOrder accepts properties in any order; by default properties
	// the schema lists come in its order.
	AnyKeyOrder bool
	// Whitespace is the number of whitespace bytes allowed in each gap
	// between JSON tokens (0: compact).
	Whitespace int
	// Draft is the JSON Schema draft (4, 6, 7, 2019, 2020) of a schema
	// without $schema; 0 means 2020-12.
	Draft int
	// OpenObjects follows JSON Schema's default for objects that list
	// properties without saying additionalProperties: any other key is
	// allowed. By default such objects get only their listed (and
	// pattern) keys, as XGrammar's strict mode does: the output is a
	// subset of what the schema allows, and a model cannot wander into
	// keys nobody asked for.
	OpenObjects bool
}

// Grammar is a compiled response format. It is immutable and safe for
// concurrent use; each generation gets its own Matcher.
type Grammar struct {
	root       *node
	ws         int
	ordered    bool
	maxCost    int // largest cost of a node (see MaskBudget)
	unenforced []string
	approx     []string
}

// Approximated lists the keywords (with their locations) enforced only
// approximately, as the package comment describes (oneOf enforced as a
// subset of its values).
func (g *Grammar) Approximated() []string { return g.approx }

// Unenforced lists the keywords (with their locations) a lenient
// compilation could not enforce; empty for strict grammars.
func (g *Grammar) Unenforced() []string { return g.unenforced }

// JSONObject returns the grammar of response_format {"type":"json_object"}:
// any JSON object, with at most MaxWhitespace whitespace bytes per gap.
func JSONObject() *Grammar { return &Grammar{root: anyObject, ws: MaxWhitespace, maxCost: 4} }

// ErrUnsupported wraps refusals of schemas (or parts) that cannot be
// enforced; the message names the keyword and its location.
var ErrUnsupported = errors.New("cannot be enforced")

// Compile compiles a JSON Schema strictly (see the package comment).
func Compile(schema json.RawMessage) (*Grammar, error) {
	return CompileOptions(schema, Options{})
}

// CompileOptions compiles a JSON Schema.
func CompileOptions(schema json.RawMessage, opts Options) (*Grammar, error) {
	root, err := decodeOrdered(schema)
	if err != nil {
		return nil, fmt.Errorf("json schema: %w", err)
	}
	c := &compiler{opts: opts, root: root, ids: map[string]any{}, bases: map[*obj]string{},
		cache: map[*obj]*node{}, compiled: map[*obj]compiledSchema{},
		patterns: map[string]*regex.Regex{}, disjointRes: map[[2]*regex.Regex]bool{}, draft: 2020}
	if opts.Draft != 0 {
		c.draft = opts.Draft
	}
	if o, ok := root.(*obj); ok {
		if s, ok := o.m["$schema"].(string); ok {
			c.draft = draftOf(s)
		}
	}
	c.index(root, defaultBase)
	n := c.compile(root, "#", defaultBase)
	if c.err != nil {
		return nil, fmt.Errorf("json schema: %w", c.err)
	}
	c.refused, c.approx = uniqueStrings(c.refused), uniqueStrings(c.approx)
	if len(c.refused) > 0 && !opts.Lenient {
		return nil, fmt.Errorf("json schema: %w: %s", ErrUnsupported, strings.Join(c.refused, "; "))
	}
	most := computeCosts(n)
	if n.cost >= costInf {
		return nil, errors.New("json schema: no JSON value satisfies the schema")
	}
	g := &Grammar{root: n, ws: opts.Whitespace, ordered: !opts.AnyKeyOrder, maxCost: max(most, 4)}
	if opts.Lenient {
		g.unenforced = c.refused
	}
	g.approx = c.approx
	return g, nil
}

const defaultBase = "urn:macpool:schema"

// uniqueStrings drops repeated entries (a sub-schema compiled in several
// alternatives reports once), keeping the first order.
func uniqueStrings(list []string) []string {
	seen := map[string]bool{}
	out := list[:0]
	for _, s := range list {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func draftOf(s string) int {
	switch {
	case strings.Contains(s, "draft-03"), strings.Contains(s, "draft-04"):
		return 4
	case strings.Contains(s, "draft-06"):
		return 6
	case strings.Contains(s, "draft-07"):
		return 7
	case strings.Contains(s, "2019-09"):
		return 2019
	}
	return 2020
}

type compiler struct {
	opts     Options
	draft    int
	root     any
	ids      map[string]any // absolute URI (with #anchor for anchors) → schema
	bases    map[*obj]string
	cache    map[*obj]*node
	refused  []string
	approx   []string
	err      error
	depth    int
	compiled map[*obj]compiledSchema
	// patterns and disjointRes cache regex work of oneOf exclusions.
	trials      int
	patterns    map[string]*regex.Regex
	disjointRes map[[2]*regex.Regex]bool
	// oneOfDepth counts the oneOf exclusions being compiled, one inside
	// another (recursive branches inline their targets).
	oneOfDepth int
}

func (c *compiler) fail(format string, args ...any) *node {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
	return neverNode
}

// refuse records a keyword that is not enforced.
func (c *compiler) refuse(path, keyword, why string) {
	c.refused = append(c.refused, fmt.Sprintf("%s at %s (%s)", keyword, path, why))
}

func resolveURI(base, ref string) string {
	b, err := url.Parse(base)
	if err != nil {
		return ref
	}
	r, err := url.Parse(ref)
	if err != nil {
		return ref
	}
	if b.Opaque != "" && !r.IsAbs() {
		// urn-like bases: only fragments resolve against them.
		if strings.HasPrefix(ref, "#") {
			return base + ref
		}
		if ref == "" {
			return base
		}
		return defaultBase + "/" + ref
	}
	return b.ResolveReference(r).String()
}

func stripFragment(u string) (string, string) {
	if i := strings.IndexByte(u, '#'); i >= 0 {
		return u[:i], u[i+1:]
	}
	return u, ""
}

// index records every schema resource ($id) and anchor under its absolute
// URI and the base URI of every schema object.
func (c *compiler) index(v any, base string) {
	switch v := v.(type) {
	case *obj:
		idKey := "$id"
		if c.draft == 4 {
			idKey = "id"
		}
		if id, ok := v.m[idKey].(string); ok {
			if strings.HasPrefix(id, "#") && c.draft < 2019 {
				c.ids[base+id] = v
			} else {
				abs, frag := stripFragment(resolveURI(base, id))
				base = abs
				c.ids[abs] = v
				if frag != "" {
					c.ids[abs+"#"+frag] = v
				}
			}
		}
		if a, ok := v.m["$anchor"].(string); ok {
			c.ids[base+"#"+a] = v
		}
		if a, ok := v.m["$dynamicAnchor"].(string); ok {
			c.ids[base+"#"+a] = v
		}
		if _, ok := c.ids[base]; !ok {
			c.ids[base] = v
		}
		c.bases[v] = base
		for _, k := range v.keys {
			if k == "enum" || k == "const" || k == "examples" || k == "default" {
				continue
			}
			c.index(v.m[k], base)
		}
	case []any:
		for _, x := range v {
			c.index(x, base)
		}
	}
}

// resolve finds the schema a $ref names.
func (c *compiler) resolve(ref, base string) (any, string, bool) {
	abs := resolveURI(base, ref)
	uri, frag := stripFragment(abs)
	if frag != "" && !strings.HasPrefix(frag, "/") {
		if t, ok := c.ids[uri+"#"+frag]; ok {
			return t, c.baseOf(t, uri), true
		}
		return nil, "", false
	}
	doc, ok := c.ids[uri]
	if !ok {
		return nil, "", false
	}
	cur := doc
	if frag != "" {
		frag, _ = url.PathUnescape(frag)
		for _, tok := range strings.Split(frag[1:], "/") {
			tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
			switch x := cur.(type) {
			case *obj:
				if cur, ok = x.m[tok]; !ok {
					return nil, "", false
				}
			case []any:
				i, err := strconv.Atoi(tok)
				if err != nil || i < 0 || i >= len(x) {
					return nil, "", false
				}
				cur = x[i]
			default:
				return nil, "", false
			}
		}
	}
	return cur, c.baseOf(cur, uri), true
}

func (c *compiler) baseOf(v any, fallback string) string {
	if o, ok := v.(*obj); ok {
		if b, ok := c.bases[o]; ok {
			return b
		}
	}
	return fallback
}

func (c *compiler) compile(s any, path, base string) *node {
	switch v := s.(type) {
	case bool:
		if v {
			return anyNode
		}
		return neverNode
	case *obj:
		b, original := c.bases[v]
		if !original {
			return c.compileObj(v, path, base)
		}
		// A schema of the document compiles to one node wherever it is
		// used (oneOf alternatives share their unchanged parts); what it
		// refused or approximated is recorded again at each use.
		// Met again while it compiles (a oneOf branch inlined its
		// recursive target): the placeholder, filled in below, as for $ref.
		if e, ok := c.compiled[v]; ok {
			c.refused = append(c.refused, e.refused...)
			c.approx = append(c.approx, e.approx...)
			return e.n
		}
		n := &node{kind: kAny, pending: true}
		c.compiled[v] = compiledSchema{n: n}
		r0, a0 := len(c.refused), len(c.approx)
		fill(n, c.compileObj(v, path, b))
		c.compiled[v] = compiledSchema{n: n,
			refused: append([]string(nil), c.refused[r0:]...), approx: append([]string(nil), c.approx[a0:]...)}
		return n
	}
	return c.fail("%s: a schema must be an object or a boolean", path)
}

// compiledSchema is a compiled schema object of the document and what
// compiling it recorded.
type compiledSchema struct {
	n               *node
	refused, approx []string
}

// keywords that only annotate or that this compiler handles elsewhere.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$schema": true,
	"$id": true, "id": true, "$comment": true, "deprecated": true, "readOnly": true, "writeOnly": true,
	"$defs": true, "definitions": true, "$anchor": true, "$dynamicAnchor": true, "$vocabulary": true,
	"contentMediaType": true, "contentEncoding": true, "contentSchema": true, "example": true,
	"$recursiveAnchor": true, "discriminator": true, "xml": true, "externalDocs": true,
}

// deref returns the schema behind a $ref-only wrapper (for merging).
func (c *compiler) deref(s any, base string) (any, string) {
	for i := 0; i < 32; i++ {
		o, ok := s.(*obj)
		if !ok {
			return s, base
		}
		if b, ok := c.bases[o]; ok {
			base = b
		}
		ref, ok := o.m["$ref"].(string)
		if !ok || hasAssertions(o, "$ref") {
			return s, base
		}
		t, tb, ok := c.resolve(ref, base)
		if !ok {
			return s, base
		}
		s, base = t, tb
	}
	return s, base
}

func hasAssertions(o *obj, except string) bool {
	for _, k := range o.keys {
		if k != except && !annotations[k] {
			return true
		}
	}
	return false
}

func (c *compiler) compileObj(s *obj, path, base string) *node {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > 200 {
		return c.fail("%s: schema nesting deeper than 200", path)
	}
	if ref, ok := s.m["$ref"].(string); ok {
		onlyRef := c.draft < 2019 || !hasAssertions(s, "$ref")
		if onlyRef {
			return c.ref(ref, path, base)
		}
		// 2019+: $ref applies together with its siblings.
		rest := s.clone()
		rest.del("$ref")
		t, tb, ok := c.resolve(ref, base)
		if !ok {
			c.refuse(path, "$ref "+strconv.Quote(ref), "cannot be resolved; remote references are not fetched")
			return c.compileObj(rest, path, base)
		}
		if t == false {
			return neverNode
		}
		merged, ok := c.merge(path, rest, t, tb)
		if !ok {
			// A recursive target cannot be inlined: enforce the ref alone.
			return c.ref(ref, path, base)
		}
		return c.compileObj(merged, path, base)
	}
	for _, k := range []string{"$dynamicRef", "$recursiveRef"} {
		if ref, ok := s.m[k].(string); ok {
			// Without dynamic scopes, resolve as a plain $ref.
			rest := s.clone()
			rest.del(k)
			rest.set("$ref", ref)
			return c.compileObj(rest, path, base)
		}
	}
	if ds, ok := c.dependentSchemas(s); ok {
		s = ds
	}
	if all, ok := s.m["allOf"].([]any); ok {
		merged := s.clone()
		merged.del("allOf")
		for i, a := range all {
			if a == false {
				return neverNode
			}
			t, tb := c.deref(a, base)
			if t == false {
				return neverNode
			}
			m, ok := c.merge(fmt.Sprintf("%s/allOf/%d", path, i), merged, t, tb)
			if !ok {
				c.refuse(fmt.Sprintf("%s/allOf/%d", path, i), "allOf", "a recursive member cannot be merged")
				continue
			}
			merged = m
		}
		return c.compileObj(merged, path, base)
	}
	if alts, key, ok := c.branches(s); ok {
		rest := s.clone()
		rest.del(key)
		if key == "oneOf" {
			return c.oneOf(rest, alts, path, base)
		}
		u := &node{kind: kUnion}
		for i, a := range alts {
			p := fmt.Sprintf("%s/%s/%d", path, key, i)
			if a == false {
				continue
			}
			t, tb := c.deref(a, base)
			if !hasAssertions(rest, "") {
				u.alts = append(u.alts, c.compileAt(a, p, base))
				continue
			}
			m, ok := c.merge(p, rest, t, tb)
			if !ok {
				c.refuse(p, key, "a recursive branch cannot be merged with its siblings")
				u.alts = append(u.alts, c.compileAt(a, p, base))
				continue
			}
			u.alts = append(u.alts, c.compileObj(m, p, base))
		}
		return simplifyUnion(u)
	}
	if not, ok := s.m["not"]; ok && !simpleNot(not) {
		t, tb := c.deref(not, base)
		if neg, ok := c.negate(t, tb); ok {
			rest := s.clone()
			rest.del("not")
			prev, _ := rest.m["allOf"].([]any)
			if len(neg) == 0 {
				return neverNode
			}
			rest.set("allOf", append(append([]any(nil), prev...), &obj{keys: []string{"anyOf"}, m: map[string]any{"anyOf": neg}}))
			return c.compileObj(rest, path, base)
		}
	}
	if _, ok := s.m["if"]; ok {
		return c.ifThenElse(s, path, base)
	}
	if _, ok := s.m["enum"]; ok {
		return c.enum(s, path, base)
	}
	if _, ok := s.m["const"]; ok {
		return c.enum(s, path, base)
	}
	return c.typed(s, path, base)
}

func (c *compiler) compileAt(s any, path, base string) *node {
	return c.compile(s, path, base)
}

// branches returns the alternatives of anyOf, else of oneOf; with both,
// the anyOf ones (each branch then keeps the oneOf).
func (c *compiler) branches(s *obj) ([]any, string, bool) {
	if a, ok := s.m["anyOf"].([]any); ok {
		return a, "anyOf", true
	}
	if o, ok := s.m["oneOf"].([]any); ok {
		return o, "oneOf", true
	}
	return nil, "", false
}

// dependentSchemas rewrites dependentSchemas (and the schema form of
// dependencies) as allOf members: property absent, or present and the
// schema holds.
func (c *compiler) dependentSchemas(s *obj) (*obj, bool) {
	var extra []any
	out := s
	for _, key := range []string{"dependentSchemas", "dependencies"} {
		d, ok := s.m[key].(*obj)
		if !ok {
			continue
		}
		keep := newObj()
		for _, name := range d.keys {
			sch := d.m[name]
			if _, isList := sch.([]any); isList {
				keep.set(name, sch)
				continue
			}
			absent := newObj()
			props := newObj()
			props.set(name, false)
			absent.set("properties", props)
			present := &obj{keys: []string{"required"}, m: map[string]any{"required": []any{name}}}
			extra = append(extra, &obj{keys: []string{"anyOf"}, m: map[string]any{"anyOf": []any{
				absent, &obj{keys: []string{"allOf"}, m: map[string]any{"allOf": []any{present, sch}}},
			}}})
		}
		if out == s {
			out = s.clone()
		}
		if len(keep.keys) > 0 && key == "dependencies" {
			out.set(key, keep)
		} else {
			out.del(key)
		}
	}
	if len(extra) == 0 {
		return s, false
	}
	prev, _ := out.m["allOf"].([]any)
	out.set("allOf", append(append([]any(nil), prev...), extra...))
	return out, true
}

// assertionKeywords are the keywords whose values merge in allOf.
var assertionKeywords = map[string]bool{
	"type": true, "enum": true, "const": true, "properties": true, "patternProperties": true,
	"additionalProperties": true, "required": true, "propertyNames": true, "minProperties": true,
	"maxProperties": true, "dependentRequired": true, "dependencies": true, "dependentSchemas": true,
	"items": true, "prefixItems": true, "additionalItems": true, "contains": true, "minContains": true,
	"maxContains": true, "minItems": true, "maxItems": true, "uniqueItems": true, "minimum": true,
	"maximum": true, "exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true,
	"minLength": true, "maxLength": true, "pattern": true, "format": true, "allOf": true, "anyOf": true,
	"oneOf": true, "not": true, "if": true, "then": true, "else": true, "$ref": true,
	"unevaluatedProperties": true, "unevaluatedItems": true, "$defs": true, "definitions": true,
}

// ifAsAnyOf rewrites if/then/else of s as the union
// (if ∧ then) ∨ (¬if ∧ else), when if has a simple complement.
func (c *compiler) ifAsAnyOf(s *obj, base string) ([]any, bool) {
	ifs, ib := c.deref(s.m["if"], base)
	neg, ok := c.negate(ifs, ib)
	if !ok {
		return nil, false
	}
	thenS, hasThen := s.m["then"]
	elseS, hasElse := s.m["else"]
	if !hasThen {
		thenS = true
	}
	if !hasElse {
		elseS = true
	}
	alts := []any{&obj{keys: []string{"allOf"}, m: map[string]any{"allOf": []any{ifs, thenS}}}}
	for _, n := range neg {
		alts = append(alts, &obj{keys: []string{"allOf"}, m: map[string]any{"allOf": []any{n, elseS}}})
	}
	return alts, true
}

// simpleNot reports whether not's schema is of the forms typed handles
// directly (type, enum and const of scalars).
func simpleNot(v any) bool {
	o, ok := v.(*obj)
	if !ok {
		return true
	}
	for _, k := range o.keys {
		switch k {
		case "type":
		case "anyOf":
			// ¬(A ∨ B) = ¬A ∧ ¬B: simple when each member is (see not).
			alts, _ := o.m[k].([]any)
			for _, a := range alts {
				if !simpleNot(a) {
					return false
				}
			}
		case "enum", "const":
			vals := []any{o.m[k]}
			if k == "enum" {
				vals, _ = o.m[k].([]any)
			}
			for _, x := range vals {
				switch x.(type) {
				case *obj, []any:
					return false
				}
			}
		default:
			if !annotations[k] {
				return false
			}
		}
	}
	return true
}

// negateBound returns the schema of the values of a bound's type that
// violate it (nil: none do) and that type.
func negateBound(k string, v any) (*obj, string, bool) {
	r, ok := numRat(v)
	if !ok {
		return nil, "", false // draft-4 boolean exclusive bounds
	}
	one := func(key string, val any, typ string) (*obj, string, bool) {
		return &obj{keys: []string{"type", key}, m: map[string]any{"type": typ, key: val}}, typ, true
	}
	num := json.Number(r.RatString())
	if !r.IsInt() {
		num = json.Number(r.FloatString(20))
	}
	switch k {
	case "minimum":
		return one("exclusiveMaximum", num, "number")
	case "maximum":
		return one("exclusiveMinimum", num, "number")
	case "exclusiveMinimum":
		return one("maximum", num, "number")
	case "exclusiveMaximum":
		return one("minimum", num, "number")
	}
	if !r.IsInt() {
		return nil, "", false
	}
	n := r.Num().Int64()
	typ := map[string]string{"minLength": "string", "maxLength": "string", "minItems": "array", "maxItems": "array", "minProperties": "object", "maxProperties": "object"}[k]
	if strings.HasPrefix(k, "min") {
		if n <= 0 {
			return nil, typ, true // every value meets a minimum of 0
		}
		return one("max"+k[3:], json.Number(strconv.FormatInt(n-1, 10)), typ)
	}
	return one("min"+k[3:], json.Number(strconv.FormatInt(n+1, 10)), typ)
}

func simplifyUnion(u *node) *node {
	var alts []*node
	for _, a := range u.alts {
		if a.kind == kNever {
			continue
		}
		if a.kind == kAny && !a.pending {
			return anyNode
		}
		alts = append(alts, a)
	}
	switch len(alts) {
	case 0:
		return neverNode
	case 1:
		return alts[0]
	}
	return &node{kind: kUnion, alts: alts}
}

func (c *compiler) ref(ref, path, base string) *node {
	t, tb, ok := c.resolve(ref, base)
	if !ok {
		c.refuse(path, "$ref "+strconv.Quote(ref), "cannot be resolved; remote references are not fetched")
		return anyNode
	}
	o, isObj := t.(*obj)
	if !isObj {
		return c.compile(t, path, tb)
	}
	if n, ok := c.cache[o]; ok {
		return n
	}
	// A placeholder filled in after compiling, so recursive schemas work.
	n := &node{kind: kAny, pending: true}
	c.cache[o] = n
	fill(n, c.compile(o, ref, tb))
	return n
}

// fill makes placeholder p the compiled node r. A placeholder still
// pending itself (a chain of references back into a schema being
// compiled) cannot be copied: p becomes a union of it alone, which sees
// it once filled in.
func fill(p, r *node) {
	if r.pending {
		*p = node{kind: kUnion, alts: []*node{r}}
		return
	}
	*p = *r
}

// enum compiles enum/const: the literals that also satisfy the schema's
// other keywords.
func (c *compiler) enum(s *obj, path, base string) *node {
	var vals []any
	if v, ok := s.m["const"]; ok {
		vals = []any{v}
	}
	if e, ok := s.m["enum"]; ok {
		arr, ok := e.([]any)
		if !ok {
			return c.fail("%s/enum: must be an array", path)
		}
		if vals != nil {
			// enum and const together: the const, if the enum has it.
			var keep []any
			for _, a := range arr {
				if jsonEqual(a, vals[0]) {
					keep = vals
				}
			}
			vals = keep
		} else {
			vals = arr
		}
	}
	rest := s.clone()
	rest.del("enum")
	rest.del("const")
	var check *Grammar
	if hasAssertions(rest, "") {
		if n := c.typed(rest, path, base); c.err == nil {
			computeCosts(n)
			check = &Grammar{root: n}
		}
	}
	lit := &node{kind: kLiteral}
	seen := map[string]bool{}
	for _, v := range vals {
		for _, t := range literalForms(v) {
			if seen[t] {
				continue
			}
			if check != nil && !check.acceptsAnyOrder(t) {
				continue
			}
			seen[t] = true
			lit.lits = append(lit.lits, t)
		}
	}
	if len(lit.lits) == 0 {
		return neverNode
	}
	return lit
}

// literalForms returns the compact spellings of an enum value: numbers
// with an integral value also as integers (1.0 → 1).
func literalForms(v any) []string {
	t := encodeCompact(v)
	if n, ok := v.(json.Number); ok {
		if r, ok := new(big.Rat).SetString(n.String()); ok && r.IsInt() && r.Num().String() != n.String() {
			return []string{r.Num().String(), t}
		}
	}
	return []string{t}
}

func (g *Grammar) acceptsAnyOrder(doc string) bool {
	h := &Grammar{root: g.root, ordered: false, ws: g.ws}
	m := h.NewMatcher()
	return m.AcceptBytes([]byte(doc)) == nil && m.Done()
}

var typeNames = []string{"object", "array", "string", "number", "integer", "boolean", "null"}

// typed compiles the type-specific keywords of s.
func (c *compiler) typed(s *obj, path, base string) *node {
	types := map[string]bool{}
	switch t := s.m["type"].(type) {
	case string:
		types[t] = true
	case []any:
		for _, x := range t {
			str, _ := x.(string)
			types[str] = true
		}
	case nil:
		for _, t := range typeNames {
			types[t] = true
		}
		delete(types, "integer") // number covers it
	default:
		return c.fail("%s/type: must be a string or an array", path)
	}
	for t := range types {
		if !slicesContains(typeNames, t) {
			return c.fail("%s/type: unknown type %q", path, t)
		}
	}
	if types["integer"] && types["number"] {
		delete(types, "integer")
	}
	var notLits []string
	if not, ok := s.m["not"]; ok {
		notLits = c.not(not, path+"/not", base, types)
	}
	var alts []*node
	for _, t := range typeNames {
		if !types[t] {
			continue
		}
		var n *node
		switch t {
		case "object":
			n = c.object(s, path, base)
		case "array":
			n = c.array(s, path, base)
		case "string":
			n = c.str(s, path)
		case "number", "integer":
			n = c.number(s, path, t == "integer")
		case "boolean":
			n = boolNode
		case "null":
			n = nullNode
		}
		if len(notLits) > 0 && n.kind != kNever {
			n = withNot(n, notLits)
		}
		alts = append(alts, n)
	}
	return simplifyUnion(&node{kind: kUnion, alts: alts})
}

func slicesContains(s []string, x string) bool {
	for _, y := range s {
		if y == x {
			return true
		}
	}
	return false
}

// withNot excludes literal texts from a scalar node.
func withNot(n *node, lits []string) *node {
	switch n.kind {
	case kLiteral:
		m := &node{kind: kLiteral}
		for _, l := range n.lits {
			if !slicesContains(lits, l) {
				m.lits = append(m.lits, l)
			}
		}
		if len(m.lits) == 0 {
			return neverNode
		}
		return m
	case kString, kNumber:
		m := *n
		m.notLits = append(append([]string(nil), n.notLits...), lits...)
		m.plain = false
		return &m
	}
	return n
}

// not handles the simple forms of not: it removes types from types and
// returns scalar texts to exclude.
func (c *compiler) not(v any, path, base string, types map[string]bool) []string {
	v, _ = c.deref(v, base)
	switch v := v.(type) {
	case bool:
		if v {
			for t := range types {
				delete(types, t)
			}
		}
		return nil
	case *obj:
		if !hasAssertions(v, "") {
			for t := range types {
				delete(types, t)
			}
			return nil
		}
		var lits []string
		for _, k := range v.keys {
			switch k {
			case "anyOf":
				// ¬(A ∨ B) = ¬A ∧ ¬B
				alts, _ := v.m[k].([]any)
				for i, a := range alts {
					lits = append(lits, c.not(a, fmt.Sprintf("%s/anyOf/%d", path, i), base, types)...)
				}
			case "type":
				switch t := v.m[k].(type) {
				case string:
					delete(types, t)
					if t == "number" {
						delete(types, "integer")
					}
				case []any:
					for _, x := range t {
						if s, ok := x.(string); ok {
							delete(types, s)
							if s == "number" {
								delete(types, "integer")
							}
						}
					}
				}
			case "const", "enum":
				vals := []any{v.m[k]}
				if k == "enum" {
					vals, _ = v.m[k].([]any)
				}
				for _, x := range vals {
					switch x.(type) {
					case *obj, []any:
						c.refuse(path, "not "+k, "only scalar values are excluded")
					default:
						lits = append(lits, literalForms(x)...)
					}
				}
			default:
				if !annotations[k] {
					c.refuse(path, "not", "only {type}, {enum} and {const} forms are enforced")
					return lits
				}
			}
		}
		return lits
	}
	return nil
}

// ifThenElse enforces decidable conditions as a union:
// (if ∧ then) ∨ (¬if ∧ else).
func (c *compiler) ifThenElse(s *obj, path, base string) *node {
	rest := s.clone()
	ifs, ib := c.deref(s.m["if"], base)
	thenS, hasThen := s.m["then"]
	elseS, hasElse := s.m["else"]
	rest.del("if")
	rest.del("then")
	rest.del("else")
	if !hasThen && !hasElse {
		return c.compileObj(rest, path, base)
	}
	if !hasThen {
		thenS = true
	}
	if !hasElse {
		elseS = true
	}
	neg, ok := c.negate(ifs, ib)
	if !ok {
		c.refuse(path+"/if", "if", "the condition is not of a decidable form")
		return c.compileObj(rest, path, base)
	}
	branch := func(cond, body any, p string) *node {
		m, ok := c.merge(p, rest, cond, base)
		if !ok {
			return neverNode
		}
		if body != true {
			bt, bb := c.deref(body, base)
			if bt == false {
				return neverNode
			}
			if m, ok = c.merge(p, m, bt, bb); !ok {
				return neverNode
			}
		}
		return c.compileObj(m, p, base)
	}
	u := &node{kind: kUnion}
	if ifs != false {
		u.alts = append(u.alts, branch(ifs, thenS, path+"/then"))
	}
	for i, n := range neg {
		u.alts = append(u.alts, branch(n, elseS, fmt.Sprintf("%s/else/%d", path, i)))
	}
	return simplifyUnion(u)
}

// negate returns schemas whose union is the complement of s, when
// complement finds all of it.
func (c *compiler) negate(s any, base string) ([]any, bool) {
	alts, exact := c.complement(s, base, nil, 0)
	if !exact {
		return nil, false
	}
	return alts, true
}

func (c *compiler) str(s *obj, path string) *node {
	n := &node{kind: kString, maxLen: -1}
	if v, ok := intKeyword(s, "minLength"); ok {
		n.minLen = v
	}
	if v, ok := intKeyword(s, "maxLength"); ok {
		n.maxLen = v
	}
	if n.maxLen >= 0 && n.maxLen < n.minLen {
		return neverNode
	}
	for _, p := range patternsOf(s) {
		re, err := regex.Compile(p)
		if err != nil {
			if errors.Is(err, regex.ErrUnsupported) {
				c.refuse(path+"/pattern", "pattern", err.Error())
				continue
			}
			return c.fail("%s/pattern: %v", path, err)
		}
		n.res = append(n.res, re)
	}
	for _, f := range formatsOf(s) {
		if re := formatRegex(f); re != nil {
			n.res = append(n.res, re)
		}
		// Unknown formats are annotations (2019-09 and later) and ignored.
	}
	negated := false
	for _, key := range []string{mergedNotPatterns, mergedNotFull} {
		list, _ := s.m[key].([]string)
		for _, p := range list {
			var re *regex.Regex
			if key == mergedNotPatterns {
				re = c.pattern(p)
			} else {
				re = c.fullPattern(p)
			}
			if re != nil {
				n.res = append(n.res, regex.Complement(re))
				negated = true
			}
		}
	}
	if negated && len(n.res) > 1 {
		// Each automaton alone can finish; together they may not.
		if empty, known := regex.Empty(n.res...); empty && known {
			return neverNode
		}
	}
	n.plain = len(n.res) == 0 && n.minLen == 0 && n.maxLen < 0
	if len(n.res) > 0 {
		n.strCache = &tokenCache{}
	}
	return n
}

// patternsOf returns pattern and the patterns merged from allOf members.
func patternsOf(s *obj) []string {
	var out []string
	if p, ok := s.m["pattern"].(string); ok {
		out = append(out, p)
	}
	if ps, ok := s.m[mergedPatterns].([]string); ok {
		out = append(out, ps...)
	}
	return out
}

func formatsOf(s *obj) []string {
	var out []string
	if f, ok := s.m["format"].(string); ok {
		out = append(out, f)
	}
	if fs, ok := s.m[mergedFormats].([]string); ok {
		out = append(out, fs...)
	}
	return out
}

// Keys that hold the extra patterns and formats of merged allOf members.
const (
	mergedPatterns = "\x00patterns"
	mergedFormats  = "\x00formats"
	// Strings must not match these (oneOf exclusions, see complement):
	// patterns with JSON Schema's search semantics, and whole-string
	// expressions that hold for every value of a format.
	mergedNotPatterns = "\x00notPatterns"
	mergedNotFull     = "\x00notFull"
)

func intKeyword(s *obj, k string) (int, bool) {
	r, ok := numRat(s.m[k])
	if !ok {
		return 0, false
	}
	f, _ := r.Float64()
	if f < 0 {
		return 0, true
	}
	if f > 1<<30 {
		return 1 << 30, true
	}
	return int(f), true
}

func (c *compiler) number(s *obj, path string, integer bool) *node {
	nc := &numCons{integer: integer}
	constrained := integer
	if r, ok := numRat(s.m["minimum"]); ok {
		nc.lo, constrained = r, true
	}
	if r, ok := numRat(s.m["maximum"]); ok {
		nc.hi, constrained = r, true
	}
	switch v := s.m["exclusiveMinimum"].(type) {
	case bool:
		nc.loEx = v && nc.lo != nil
	case json.Number:
		r, _ := numRat(v)
		if nc.lo == nil || r.Cmp(nc.lo) >= 0 {
			nc.lo, nc.loEx = r, true
		}
		constrained = true
	}
	switch v := s.m["exclusiveMaximum"].(type) {
	case bool:
		nc.hiEx = v && nc.hi != nil
	case json.Number:
		r, _ := numRat(v)
		if nc.hi == nil || r.Cmp(nc.hi) <= 0 {
			nc.hi, nc.hiEx = r, true
		}
		constrained = true
	}
	if r, ok := numRat(s.m["multipleOf"]); ok {
		if r.Sign() <= 0 {
			return c.fail("%s/multipleOf: must be greater than 0", path)
		}
		nc.mult, constrained = r, true
	}
	if extra, ok := s.m[mergedMultiples].([]*big.Rat); ok {
		for _, m := range extra {
			nc.mult = lcmRat(nc.mult, m)
		}
		constrained = true
	}
	if !constrained {
		return numberNode
	}
	if integer {
		// Integers stay within 64 bits unless the schema asks for more.
		if nc.hi == nil {
			nc.hi = new(big.Rat).SetInt64(maxInt)
		}
		if nc.lo == nil {
			nc.lo = new(big.Rat).SetInt64(-maxInt)
		}
	}
	nc = sharedNumCons(nc)
	n := &node{kind: kNumber, num: nc}
	if _, ok := nc.minLen(); !ok {
		return neverNode
	}
	return n
}

var (
	numConsMu sync.Mutex
	numConsBy = map[string]*numCons{}
)

// sharedNumCons returns the one numCons of these constraints, so that
// equal number schemas (most are a plain integer) share their prefix cache
// across schemas and requests.
func sharedNumCons(nc *numCons) *numCons {
	key := fmt.Sprint(ratString(nc.lo), nc.loEx, ratString(nc.hi), nc.hiEx, ratString(nc.mult), nc.integer)
	numConsMu.Lock()
	defer numConsMu.Unlock()
	if c, ok := numConsBy[key]; ok {
		return c
	}
	if len(numConsBy) > 4096 {
		clear(numConsBy) // bounded memory under many distinct bounds
	}
	numConsBy[key] = nc
	return nc
}

func ratString(r *big.Rat) string {
	if r == nil {
		return "-"
	}
	return r.RatString()
}

const mergedMultiples = "\x00multiples"

// maxInt bounds integers the schema leaves unbounded (|n| < 10^18).
const maxInt = 999_999_999_999_999_999

// lcmRat is the least common multiple of two positive rationals (nil: b).
func lcmRat(a, b *big.Rat) *big.Rat {
	if a == nil {
		return b
	}
	// lcm(p1/q1, p2/q2) = lcm(p1·q2, p2·q1) / (q1·q2)
	x := new(big.Int).Mul(a.Num(), b.Denom())
	y := new(big.Int).Mul(b.Num(), a.Denom())
	g := new(big.Int).GCD(nil, nil, x, y)
	l := new(big.Int).Mul(x, y)
	l.Quo(l, g)
	return new(big.Rat).SetFrac(l, new(big.Int).Mul(a.Denom(), b.Denom()))
}

func (c *compiler) object(s *obj, path, base string) *node {
	n := &node{kind: kObject, maxProps: -1, keyNode: stringNode}
	n.propIndex = map[string]int{}
	if v, ok := intKeyword(s, "minProperties"); ok {
		n.minProps = v
	}
	if v, ok := intKeyword(s, "maxProperties"); ok {
		n.maxProps = v
	}
	if pn, ok := s.m["propertyNames"]; ok {
		pn, _ = c.deref(pn, base)
		switch pn := pn.(type) {
		case bool:
			if !pn {
				n.maxProps = 0
			}
		case *obj:
			k := c.str(pn, path+"/propertyNames")
			for _, key := range pn.keys {
				switch key {
				case "pattern", "format", "minLength", "maxLength", "type", mergedPatterns, mergedFormats, mergedNotPatterns, mergedNotFull:
				default:
					if !annotations[key] {
						c.refuse(path+"/propertyNames", "propertyNames "+key, "only string keywords apply to keys")
					}
				}
			}
			n.keyNode = k
		}
	}
	var patRaw []any
	if pp, ok := s.m["patternProperties"].(*obj); ok {
		for _, p := range pp.keys {
			re, err := regex.Compile(p)
			if err != nil {
				if errors.Is(err, regex.ErrUnsupported) {
					c.refuse(path+"/patternProperties", "patternProperties", err.Error())
					continue
				}
				return c.fail("%s/patternProperties: %v", path, err)
			}
			n.patterns = append(n.patterns, patProp{re: re, n: c.compile(pp.m[p], path+"/patternProperties/"+escapePointer(p), base)})
			patRaw = append(patRaw, pp.m[p])
		}
	}
	var ap any = true
	closed := false // closed by default, not by the schema
	if v, ok := s.m["additionalProperties"]; ok {
		ap = v
	} else if v, ok := s.m["unevaluatedProperties"]; ok {
		ap = v
	} else if !c.opts.OpenObjects && (s.m["properties"] != nil || s.m["patternProperties"] != nil) {
		ap, closed = false, true
	}
	if ap != false {
		n.additional = c.compile(ap, path+"/additionalProperties", base)
		if n.additional.kind == kNever {
			n.additional = nil
		}
	}
	props, _ := s.m["properties"].(*obj)
	addProp := func(name string, schema any, p string) int {
		if i, ok := n.propIndex[name]; ok {
			return i
		}
		// Patterns that match a listed name apply to its value too.
		var parts []any
		if schema != nil {
			parts = append(parts, schema)
		}
		for i, pp := range n.patterns {
			if pp.re.MatchString(name) {
				parts = append(parts, patRaw[i])
			}
		}
		var vn *node
		switch len(parts) {
		case 0:
			vn = n.additional
			switch {
			case vn == nil && closed:
				vn = anyNode // named by required or a dependency: allowed
			case vn == nil:
				vn = neverNode
			}
		case 1:
			vn = c.compile(parts[0], p, base)
		default:
			vn = c.compile(&obj{keys: []string{"allOf"}, m: map[string]any{"allOf": parts}}, p, base)
		}
		if !n.keyNode.plain && !(&Grammar{root: n.keyNode}).acceptsAnyOrder(encodeCompact(name)) {
			vn = neverNode // propertyNames forbids it
		}
		i := len(n.props)
		n.props = append(n.props, prop{name: name, key: encodeCompact(name), n: vn})
		n.propIndex[name] = i
		return i
	}
	if props != nil {
		for _, k := range props.keys {
			addProp(k, props.m[k], path+"/properties/"+escapePointer(k))
		}
	}
	if req, ok := s.m["required"].([]any); ok {
		for _, r := range req {
			name, ok := r.(string)
			if !ok {
				return c.fail("%s/required: must hold strings", path)
			}
			i := addProp(name, nil, path+"/required")
			n.props[i].req = true
		}
	}
	var depsSrc *obj
	if d, ok := s.m["dependentRequired"].(*obj); ok {
		depsSrc = d
	} else if d, ok := s.m["dependencies"].(*obj); ok {
		depsSrc = d
	}
	if depsSrc != nil {
		for _, k := range depsSrc.keys {
			i := addProp(k, nil, path+"/dependentRequired")
			switch d := depsSrc.m[k].(type) {
			case []any:
				for _, r := range d {
					name, _ := r.(string)
					j := addProp(name, nil, path+"/dependentRequired/"+escapePointer(k))
					for len(n.deps) <= i {
						n.deps = append(n.deps, nil)
					}
					n.deps[i] = append(n.deps[i], j)
				}
			}
		}
	}
	for len(n.deps) < len(n.props) {
		n.deps = append(n.deps, nil)
	}
	for _, d := range n.deps {
		if len(d) > 0 {
			n.hasDeps = true
		}
	}
	n.required = make([]uint64, (len(n.props)+63)/64)
	for i, p := range n.props {
		if p.req {
			if p.n.kind == kNever {
				return neverNode
			}
			n.required[i/64] |= 1 << (i % 64)
		}
	}
	// Free keys matching several patterns: their schemas merged ahead of
	// time for up to four patterns.
	if k := len(n.patterns); k > 0 {
		if k > 4 {
			c.refuse(path+"/patternProperties", "patternProperties", "a key matching several of more than four patterns is held to the first only")
		}
		size := 1 << min(k, 4)
		n.combos = make([]*node, size)
		n.combos[0] = n.additional
		for mask := 1; mask < size; mask++ {
			var parts []*node
			for i := 0; i < min(k, 4); i++ {
				if mask&(1<<i) != 0 {
					parts = append(parts, n.patterns[i].n)
				}
			}
			n.combos[mask] = parts[0]
			if len(parts) > 1 {
				var raws []any
				for i := 0; i < min(k, 4); i++ {
					if mask&(1<<i) != 0 {
						raws = append(raws, patRaw[i])
					}
				}
				n.combos[mask] = c.compile(&obj{keys: []string{"allOf"}, m: map[string]any{"allOf": raws}}, path+"/patternProperties", base)
			}
		}
	}
	return n
}

func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

func (c *compiler) array(s *obj, path, base string) *node {
	n := &node{kind: kArray, items: anyNode, maxItems: -1, maxContains: -1}
	var itemSchemas []any
	var restSchema any = true
	if pi, ok := s.m["prefixItems"].([]any); ok {
		itemSchemas = pi
		if it, ok := s.m["items"]; ok {
			restSchema = it
		}
	} else if it, ok := s.m["items"].([]any); ok {
		itemSchemas = it
		if ai, ok := s.m["additionalItems"]; ok {
			restSchema = ai
		}
	} else if it, ok := s.m["items"]; ok {
		restSchema = it
	}
	if _, ok := s.m["items"]; !ok {
		if ui, ok := s.m["unevaluatedItems"]; ok {
			restSchema = ui
		}
	}
	for i, it := range itemSchemas {
		n.prefix = append(n.prefix, c.compile(it, fmt.Sprintf("%s/items/%d", path, i), base))
	}
	n.items = c.compile(restSchema, path+"/items", base)
	if n.items.kind == kNever {
		n.items = nil
	}
	if v, ok := intKeyword(s, "minItems"); ok {
		n.minItems = v
	}
	if v, ok := intKeyword(s, "maxItems"); ok {
		n.maxItems = v
	}
	// Positions that cannot hold an item cap the length.
	for i, p := range n.prefix {
		if p.kind == kNever {
			if n.maxItems < 0 || n.maxItems > i {
				n.maxItems = i
			}
			break
		}
	}
	if n.items == nil && (n.maxItems < 0 || n.maxItems > len(n.prefix)) {
		n.maxItems = len(n.prefix)
	}
	if n.maxItems >= 0 && n.maxItems < n.minItems {
		return neverNode
	}
	if u, _ := s.m["uniqueItems"].(bool); u {
		n.unique = true
	}
	if cs, ok := s.m["contains"]; ok {
		n.hasContains = true
		n.minContains = 1
		if v, ok := intKeyword(s, "minContains"); ok && c.draft >= 2019 {
			n.minContains = v
		}
		if v, ok := intKeyword(s, "maxContains"); ok && c.draft >= 2019 {
			n.maxContains = v
		}
		ct, cb := c.deref(cs, base)
		counted := func(item any, p string) *node {
			if item == nil {
				return c.compile(ct, p, cb)
			}
			it, ib := c.deref(item, base)
			if it == false || ct == false {
				return neverNode
			}
			if io, ok := it.(*obj); ok {
				if m, ok := c.merge(p, io, ct, cb); ok {
					return c.compileObj(m, p, ib)
				}
			} else if it == true {
				return c.compile(ct, p, cb)
			}
			c.refuse(p, "contains", "cannot be merged with items")
			return c.compile(ct, p, cb)
		}
		for _, it := range itemSchemas {
			n.cprefix = append(n.cprefix, counted(it, path+"/contains"))
		}
		if restSchema == true {
			n.citems = counted(nil, path+"/contains")
		} else {
			n.citems = counted(restSchema, path+"/contains")
		}
		if n.citems.kind == kNever {
			n.citems = nil
		}
		if n.maxContains >= 0 && n.maxContains < n.minContains {
			return neverNode
		}
	}
	return n
}

// itemAt returns the schema of item i (nil: no item allowed there) and
// the one it has when it counts for contains.
func (n *node) itemAt(i int) (*node, *node) {
	var it, ct *node
	if i < len(n.prefix) {
		it = n.prefix[i]
		if i < len(n.cprefix) {
			ct = n.cprefix[i]
		}
	} else {
		it, ct = n.items, n.citems
	}
	if it != nil && it.kind == kNever {
		it = nil
	}
	if ct != nil && ct.kind == kNever {
		ct = nil
	}
	return it, ct
}

// merge returns the conjunction of schema a (an object) and b as one
// schema object; false when b is a recursive reference that cannot be
// inlined.
func (c *compiler) merge(path string, a *obj, b any, bbase string) (*obj, bool) {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > 64 {
		return nil, false
	}
	b, bbase = c.deref(b, bbase)
	switch b := b.(type) {
	case bool:
		if b {
			return a, true
		}
		out := a.clone()
		out.set("not", true)
		return out, true
	case *obj:
		if _, ok := b.m["$ref"]; ok {
			t, tb, ok := c.resolve(b.m["$ref"].(string), bbase)
			if !ok {
				return nil, false
			}
			rest := b.clone()
			rest.del("$ref")
			if c.draft < 2019 {
				rest = newObj()
			}
			m, ok := c.merge(path, a, rest, bbase)
			if !ok {
				return nil, false
			}
			return c.merge(path, m, t, tb)
		}
		if _, ok := a.m["if"]; ok {
			if _, ok := b.m["if"]; ok {
				// Two conditionals: the second as its union form.
				if alts, ok := c.ifAsAnyOf(b, bbase); ok {
					b = b.clone()
					b.del("if")
					b.del("then")
					b.del("else")
					prev, _ := b.m["allOf"].([]any)
					b.set("allOf", append(append([]any(nil), prev...), &obj{keys: []string{"anyOf"}, m: map[string]any{"anyOf": alts}}))
				}
			}
		}
		out := a.clone()
		for _, k := range b.keys {
			bv := b.m[k]
			av, has := out.m[k]
			if !has {
				out.set(k, bv)
				continue
			}
			if k == "const" && !jsonEqual(av, bv) {
				out.set("enum", []any{}) // two different constants: nothing
				continue
			}
			if !assertionKeywords[k] && !strings.HasPrefix(k, "\x00") {
				continue // annotations and unknown keywords: keep the first
			}
			if extra, ok := extraKey[k]; ok && !jsonEqual(av, bv) {
				out.set(extra, appendExtra(out.m[extra], bv))
				continue
			}
			switch k {
			case mergedPatterns, mergedFormats, mergedMultiples, mergedNotPatterns, mergedNotFull:
				out.set(k, appendExtra(av, bv))
				continue
			}
			merged, ok := c.mergeKeyword(path, k, av, bv, bbase)
			if !ok {
				return nil, false
			}
			out.set(k, merged)
		}
		// Properties one side lists are additional properties of the
		// other: its additionalProperties applies to them.
		c.closeOver(out, a, b)
		c.closeOver(out, b, a)
		// Nested allOf/anyOf/$ref are compiled from the merged object.
		return out, true
	}
	return a, true
}

// closeOver applies x's additionalProperties, in the merged schema out, to the properties and patternProperties y
// adds: the names x neither lists nor matches by a pattern. Patterns of y
// get it whatever they match (stricter where x lists or matches the key:
// a subset).
func (c *compiler) closeOver(out, x, y *obj) {
	// unevaluatedProperties does not apply: y's properties are evaluated.
	ap, ok := x.m["additionalProperties"]
	if !ok || ap == true {
		return
	}
	xProps, _ := x.m["properties"].(*obj)
	xPats, _ := x.m["patternProperties"].(*obj)
	matched := func(name string) bool {
		if xPats == nil {
			return false
		}
		for _, p := range xPats.keys {
			if re := c.pattern(p); re != nil && re.MatchString(name) {
				return true
			}
		}
		return false
	}
	if yProps, ok := y.m["properties"].(*obj); ok {
		var props *obj
		for _, name := range yProps.keys {
			if _, listed := xProps.get(name); listed || matched(name) {
				continue
			}
			if props == nil {
				props = out.m["properties"].(*obj).clone()
			}
			props.set(name, allOfObj(props.m[name], ap))
		}
		if props != nil {
			out.set("properties", props)
		}
	}
	if yPats, ok := y.m["patternProperties"].(*obj); ok {
		var pats *obj
		for _, p := range yPats.keys {
			if _, shared := xPats.get(p); shared {
				continue
			}
			if pats == nil {
				pats = out.m["patternProperties"].(*obj).clone()
			}
			pats.set(p, allOfObj(pats.m[p], ap))
		}
		if pats != nil {
			out.set("patternProperties", pats)
		}
	}
}

func (c *compiler) mergeKeyword(path, k string, av, bv any, bbase string) (any, bool) {
	if jsonEqual(av, bv) {
		return av, true
	}
	switch k {
	case "type":
		return intersectTypes(av, bv), true
	case "properties", "patternProperties", "$defs", "definitions", "dependentRequired":
		ao, ok1 := av.(*obj)
		bo, ok2 := bv.(*obj)
		if !ok1 || !ok2 {
			break
		}
		out := ao.clone()
		for _, name := range bo.keys {
			if x, ok := out.m[name]; ok {
				if k == "dependentRequired" {
					out.set(name, unionStrings(x, bo.m[name]))
				} else {
					out.set(name, &obj{keys: []string{"allOf"}, m: map[string]any{"allOf": []any{x, bo.m[name]}}})
				}
			} else {
				out.set(name, bo.m[name])
			}
		}
		return out, true
	case "required":
		return unionStrings(av, bv), true
	case "allOf":
		a, _ := av.([]any)
		b, _ := bv.([]any)
		return append(append([]any(nil), a...), b...), true
	case "anyOf", "oneOf":
		// (a1 ∨ a2) ∧ (b1 ∨ b2): the product of branches.
		a, _ := av.([]any)
		b, _ := bv.([]any)
		if len(a)*len(b) > 128 {
			c.refuse(path, k, "too many branches to combine")
			return av, true
		}
		var prod []any
		for _, x := range a {
			for _, y := range b {
				prod = append(prod, &obj{keys: []string{"allOf"}, m: map[string]any{"allOf": []any{x, y}}})
			}
		}
		return prod, true
	case "items", "additionalProperties", "additionalItems", "contains", "propertyNames", "unevaluatedProperties", "unevaluatedItems", "not":
		if k == "not" {
			return &obj{keys: []string{"anyOf"}, m: map[string]any{"anyOf": []any{av, bv}}}, true
		}
		if _, arr := av.([]any); arr {
			break
		}
		if _, arr := bv.([]any); arr {
			break
		}
		return &obj{keys: []string{"allOf"}, m: map[string]any{"allOf": []any{av, bv}}}, true
	case "minimum", "minLength", "minItems", "minProperties", "minContains":
		return maxNum(av, bv), true
	case "maximum", "maxLength", "maxItems", "maxProperties", "maxContains":
		return minNum(av, bv), true
	case "exclusiveMinimum":
		if _, ok := av.(bool); ok {
			break
		}
		return maxNum(av, bv), true
	case "exclusiveMaximum":
		if _, ok := av.(bool); ok {
			break
		}
		return minNum(av, bv), true
	case "enum":
		a, _ := av.([]any)
		b, _ := bv.([]any)
		var keep []any
		for _, x := range a {
			for _, y := range b {
				if jsonEqual(x, y) {
					keep = append(keep, x)
					break
				}
			}
		}
		return keep, true
	case "uniqueItems":
		return av == true || bv == true, true
	case "title", "description", "default", "examples", "$comment", "$id", "id", "$schema", "$anchor":
		return av, true
	}
	c.refuse(path, k, "conflicting values in allOf; the first is enforced")
	return av, true
}

// extraKey names where the second value of a keyword that cannot be
// merged into one value is kept: all of them apply.
var extraKey = map[string]string{"pattern": mergedPatterns, "format": mergedFormats, "multipleOf": mergedMultiples}

// appendExtra appends v (a keyword value, or a list of merged values) to
// the list held in list.
func appendExtra(list, v any) any {
	switch l := list.(type) {
	case nil:
	case []string:
		if s, ok := v.(string); ok {
			return append(append([]string(nil), l...), s)
		}
		if s, ok := v.([]string); ok {
			return append(append([]string(nil), l...), s...)
		}
	case []*big.Rat:
		if r, ok := numRat(v); ok {
			return append(append([]*big.Rat(nil), l...), r)
		}
		if r, ok := v.([]*big.Rat); ok {
			return append(append([]*big.Rat(nil), l...), r...)
		}
	}
	switch v := v.(type) {
	case string:
		return []string{v}
	case []string, []*big.Rat:
		return v
	}
	if r, ok := numRat(v); ok {
		return []*big.Rat{r}
	}
	return list
}

func intersectTypes(a, b any) any {
	set := func(v any) map[string]bool {
		m := map[string]bool{}
		switch v := v.(type) {
		case string:
			m[v] = true
		case []any:
			for _, x := range v {
				if s, ok := x.(string); ok {
					m[s] = true
				}
			}
		}
		if m["number"] {
			m["integer"] = true
		}
		return m
	}
	sa, sb := set(a), set(b)
	var out []any
	for _, t := range typeNames {
		if sa[t] && sb[t] {
			if t == "integer" && sa["number"] && sb["number"] {
				continue
			}
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return []any{}
	}
	return out
}

func unionStrings(a, b any) any {
	x, _ := a.([]any)
	y, _ := b.([]any)
	out := append([]any(nil), x...)
	for _, v := range y {
		if !containsJSON(out, v) {
			out = append(out, v)
		}
	}
	return out
}

func containsJSON(list []any, v any) bool {
	for _, x := range list {
		if jsonEqual(x, v) {
			return true
		}
	}
	return false
}

func maxNum(a, b any) any {
	x, ok1 := numRat(a)
	y, ok2 := numRat(b)
	if !ok1 {
		return b
	}
	if !ok2 || x.Cmp(y) >= 0 {
		return a
	}
	return b
}

func minNum(a, b any) any {
	x, ok1 := numRat(a)
	y, ok2 := numRat(b)
	if !ok1 {
		return b
	}
	if !ok2 || x.Cmp(y) <= 0 {
		return a
	}
	return b
}

// FromResponseFormat compiles an OpenAI response_format object: "text" (or
// absent) gives nil, "json_object" any JSON object, "json_schema" its
// json_schema.schema — strictly when json_schema.strict is true, leniently
// otherwise (Grammar.Unenforced then lists what is not enforced).
func FromResponseFormat(raw json.RawMessage) (*Grammar, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var rf struct {
		Type       string `json:"type"`
		JSONSchema *struct {
			Name   string          `json:"name"`
			Strict *bool           `json:"strict"`
			Schema json.RawMessage `json:"schema"`
		} `json:"json_schema"`
	}
	if err := json.Unmarshal(raw, &rf); err != nil {
		return nil, fmt.Errorf("response_format: %w", err)
	}
	switch rf.Type {
	case "", "text":
		return nil, nil
	case "json_object":
		return JSONObject(), nil
	case "json_schema":
		if rf.JSONSchema == nil || len(rf.JSONSchema.Schema) == 0 {
			return nil, errors.New("response_format: json_schema.schema is required")
		}
		strict := rf.JSONSchema.Strict != nil && *rf.JSONSchema.Strict
		g, err := CompileOptions(rf.JSONSchema.Schema, Options{Lenient: !strict})
		if err != nil {
			return nil, fmt.Errorf("response_format: %w", err)
		}
		return g, nil
	}
	return nil, fmt.Errorf("response_format: unknown type %q (want text, json_object or json_schema)", rf.Type)
}
