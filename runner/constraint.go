package runner

import (
	"bytes"
	"encoding/json"
	"math"
	"slices"

	"github.com/macpool/macpool/engine/chat/grammar"
)

// A constraint steers one sequence's decoding through a list of segments:
// forced literal tokens, a JSON grammar (engine/chat/grammar masks), free
// text without '<' (XML parameter values), a choice among literal strings
// (a tool name), and the end of sequence. It is how response_format and
// forced tool calls (tool_choice required / named) are enforced.
//
// Per step: prepare masks the logits (disallowed → -inf) or names a forced
// token; accept records the token actually chosen and may substitute it:
// an EOS picked where the grammar may end but more segments follow becomes
// the next segment's first forced token.
type constraint struct {
	v    *vocab
	segs []segment
	i    int
	pos  int // tokens consumed in the current segment
	m    *grammar.Matcher
	buf  []byte // bytes of the current choice so far
	mask []bool
	done bool // EOS accepted
	// left is how many more tokens the generation may produce (max_tokens
	// less those generated), 0 when unknown. With it a grammar segment
	// closes its document in time (grammar.Matcher.MaskBudget), leaving
	// room for the forced tokens of the segments after it.
	left int
}

type segKind int

const (
	segLiteral segKind = iota
	segGrammar
	segText
	segChoice
	segEOS
)

type segment struct {
	kind    segKind
	lit     []int            // segLiteral: forced tokens
	g       *grammar.Grammar // segGrammar
	maxToks int              // segText: most tokens before the text is ended
	alts    []string         // segChoice
	eosOK   bool             // segChoice: the sequence may end instead
	then    func(alt string) []segment
}

func (e *Runner) literal(s string) segment {
	return segment{kind: segLiteral, lit: e.tok.Encode(s)}
}

func newConstraint(v *vocab, segs []segment) *constraint {
	c := &constraint{v: v, segs: segs, mask: make([]bool, v.g.Size())}
	c.enter()
	return c
}

// enter skips empty literals and sets up the current segment.
func (c *constraint) enter() {
	for c.i < len(c.segs) && c.segs[c.i].kind == segLiteral && c.pos >= len(c.segs[c.i].lit) {
		c.i++
		c.pos = 0
	}
	c.m, c.buf = nil, nil
	if c.i < len(c.segs) && c.segs[c.i].kind == segGrammar {
		c.m = c.segs[c.i].g.NewMatcher()
	}
}

func (c *constraint) next() {
	c.i++
	c.pos = 0
	c.enter()
}

func (c *constraint) last() bool { return c.i >= len(c.segs)-1 }

// prepare returns a forced token (≥ 0) or -1 after masking logits in place.
func (c *constraint) prepare(logits []float32) int {
	if c.i >= len(c.segs) {
		return c.v.eos[0]
	}
	sg := &c.segs[c.i]
	switch sg.kind {
	case segLiteral:
		return sg.lit[c.pos]
	case segEOS:
		return c.v.eos[0]
	case segGrammar:
		if c.left > 0 {
			c.m.MaskBudget(c.v.g, c.mask, c.left-c.reserved())
		} else {
			c.m.Mask(c.v.g, c.mask)
		}
	case segText:
		if c.pos >= sg.maxToks {
			c.next()
			return c.prepare(logits)
		}
		copy(c.mask, c.v.noLT)
		if c.pos > 0 {
			for _, id := range c.v.eos {
				c.mask[id] = true
			}
		}
	case segChoice:
		c.choiceMask(sg)
	}
	allowed := false
	for id, ok := range c.mask {
		if !ok && id < len(logits) {
			logits[id] = float32(math.Inf(-1))
		} else if ok {
			allowed = true
		}
	}
	if !allowed {
		// Nothing allowed (should not happen): end the sequence.
		return c.v.eos[0]
	}
	return -1
}

// shortest bounds the tokens of the shortest way through choice sg and
// the segments it leads to (a byte is at most a token).
func (c *constraint) shortest(sg *segment) int {
	best := math.MaxInt
	for _, a := range sg.alts {
		n := len(a)
		if sg.then != nil {
			for _, s := range sg.then(a) {
				switch s.kind {
				case segLiteral:
					n += len(s.lit)
				case segGrammar:
					n += s.g.NewMatcher().MinCloseBytes()
				}
			}
		}
		best = min(best, n)
	}
	return best
}

// reserved counts the forced literal tokens after the current segment up
// to the next free one: they must fit in the budget too.
func (c *constraint) reserved() int {
	n := 0
	for _, sg := range c.segs[c.i+1:] {
		if sg.kind != segLiteral {
			break
		}
		n += len(sg.lit)
	}
	return n
}

func (c *constraint) choiceMask(sg *segment) {
	clear(c.mask)
	if sg.eosOK && len(c.buf) == 0 {
		for _, id := range c.v.eos {
			c.mask[id] = true
		}
		if c.left > 0 && c.left < c.shortest(sg) {
			return // no room for another complete call: end here
		}
	}
	for id, tb := range c.v.bytes {
		if len(tb) == 0 {
			continue
		}
		cand := append(c.buf[:len(c.buf):len(c.buf)], tb...)
		for _, a := range sg.alts {
			if len(cand) <= len(a) && a[:len(cand)] == string(cand) {
				c.mask[id] = true
				break
			}
		}
	}
}

func (c *constraint) isEOS(id int) bool { return slices.Contains(c.v.eos, id) }

// accept records token id and returns the token to use in its place (the
// same id, or a substitute when an EOS ends a non-final segment).
func (c *constraint) accept(id int) int {
	if c.i >= len(c.segs) {
		c.done = true
		return id
	}
	sg := &c.segs[c.i]
	switch sg.kind {
	case segLiteral:
		c.pos++
		if c.pos >= len(sg.lit) {
			c.next()
		}
		return id
	case segEOS:
		c.done = true
		return id
	case segGrammar:
		if c.isEOS(id) {
			if c.last() {
				c.done = true
				return id
			}
			c.next()
			return c.substitute()
		}
		if err := c.m.Accept(c.v.g, id); err != nil {
			// Cannot happen for a masked sample; keep going.
			return id
		}
		return id
	case segText:
		if c.isEOS(id) {
			c.next()
			return c.substitute()
		}
		c.pos++
		return id
	case segChoice:
		if sg.eosOK && len(c.buf) == 0 && c.isEOS(id) {
			c.done = true
			return id
		}
		c.buf = append(c.buf, c.v.bytes[id]...)
		for _, a := range sg.alts {
			if string(c.buf) != a {
				continue
			}
			// Complete unless a longer alternative still extends it.
			longer := false
			for _, b := range sg.alts {
				if len(b) > len(a) && b[:len(a)] == a {
					longer = true
				}
			}
			if !longer {
				var then []segment
				if sg.then != nil {
					then = sg.then(a)
				}
				rest := append(then, c.segs[c.i+1:]...)
				c.segs = append(c.segs[:c.i+1:c.i+1], rest...)
				c.next()
			}
			break
		}
		return id
	}
	return id
}

// replay advances the constraint over a token generated before a failover
// exactly as prepare + accept did when it was generated: subst says the
// token replaced a sampled EOS (reported as substituted(id)), so the EOS is
// what is accepted again.
func (c *constraint) replay(id int, subst bool) {
	// prepare's own state change: an XML text segment ends at its cap.
	for c.i < len(c.segs) && c.segs[c.i].kind == segText && c.pos >= c.segs[c.i].maxToks {
		c.next()
	}
	if subst {
		id = c.v.eos[0]
	}
	c.accept(id)
}

// substitute is the forced token of the segment just entered, consumed.
func (c *constraint) substitute() int {
	id := c.prepare(nil)
	if id < 0 {
		// The new segment is not forced: fall back to ending it at once.
		id = c.v.eos[0]
		c.done = true
		return id
	}
	return c.accept(id)
}

// vocab is the model's vocabulary prepared for constraints (built once).
type vocab struct {
	g     *grammar.Vocab
	bytes [][]byte // per id; nil for special / added / unknown ids
	noLT  []bool   // tokens allowed in XML parameter text (no '<')
	eos   []int
}

// argsSchema is a tool's parameter schema, or any object when it has none.
func argsSchema(params json.RawMessage) json.RawMessage {
	if len(params) == 0 || string(params) == "null" {
		return json.RawMessage(`{"type":"object"}`)
	}
	return params
}

// xmlParams lists the required parameters of a tool (in properties order
// where possible) with their schemas.
func xmlParams(params json.RawMessage) (names []string, schemas []json.RawMessage) {
	var s struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if json.Unmarshal(params, &s) != nil {
		return nil, nil
	}
	props := map[string]json.RawMessage{}
	_ = json.Unmarshal(s.Properties, &props)
	order := propertyOrder(s.Properties)
	req := map[string]bool{}
	for _, r := range s.Required {
		req[r] = true
	}
	for _, k := range order {
		if req[k] {
			names = append(names, k)
			schemas = append(schemas, props[k])
		}
	}
	return names, schemas
}

// propertyOrder returns the keys of a JSON object in document order.
func propertyOrder(raw json.RawMessage) []string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil
	}
	var keys []string
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return keys
		}
		k, _ := t.(string)
		keys = append(keys, k)
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return keys
		}
	}
	return keys
}

// isStringSchema reports whether a parameter schema is a plain string.
func isStringSchema(raw json.RawMessage) bool {
	var s struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return true
	}
	switch t := s.Type.(type) {
	case string:
		return t == "string"
	case nil:
		return true
	}
	return false
}
