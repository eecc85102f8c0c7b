// Package reasoning splits generated text into reasoning_content (inside
// <think>…</think>) and content, incrementally, for Qwen's thinking models.
//
// The split is streaming-safe: text that may be the start of a tag, split
// across tokens, is held back until it is resolved, so feeding the text in
// any chunking gives the same concatenated result as Split.
//
// Newlines are tidied the way Qwen's own templates do when they replay a
// turn: leading and trailing newlines of the reasoning and the newlines right
// after </think> are dropped.
package reasoning

import "strings"

const (
	openTag  = "<think>"
	closeTag = "</think>"
)

// Delta is the text one Add produced, by destination.
type Delta struct {
	Reasoning string
	Content   string
}

type state int

const (
	stStart   state = iota // before any output: a <think> may open
	stThink                // inside reasoning
	stContent              // after </think>, or no reasoning at all
)

// Parser is an incremental reasoning/content splitter for one generation.
type Parser struct {
	st          state
	pending     string // unresolved text, not yet emitted
	thinkBegun  bool   // some reasoning text emitted (leading newlines are dropped before)
	contentBody bool   // some content emitted after </think> (leading newlines are dropped before)
	afterClose  bool
}

// New returns a Parser. promptOpen says the prompt already opened a <think>
// block (see PromptOpensThink): the output starts inside the reasoning.
func New(promptOpen bool) *Parser {
	if promptOpen {
		return &Parser{st: stThink}
	}
	return &Parser{st: stStart}
}

// PromptOpensThink reports whether a rendered prompt ends inside an open
// <think> block (Qwen3.5's generation prompt ends with "<think>\n"; Qwen3's
// with enable_thinking=false closes it again).
func PromptOpensThink(prompt string) bool {
	i := strings.LastIndex(prompt, openTag)
	if i < 0 {
		return false
	}
	rest := prompt[i+len(openTag):]
	return !strings.Contains(rest, closeTag) && strings.TrimSpace(rest) == ""
}

// Split is the one-shot form of Parser.
func Split(text string, promptOpen bool) (reasoning, content string) {
	p := New(promptOpen)
	d := p.Add(text)
	f := p.Flush()
	return d.Reasoning + f.Reasoning, d.Content + f.Content
}

// Add consumes the next piece of generated text.
func (p *Parser) Add(text string) Delta {
	p.pending += text
	return p.step(false)
}

// Flush emits what was held back; call it at the end of the generation.
func (p *Parser) Flush() Delta {
	return p.step(true)
}

func (p *Parser) step(final bool) Delta {
	var d Delta
	for {
		switch p.st {
		case stStart:
			s := strings.TrimLeft(p.pending, " \t\r\n")
			if strings.HasPrefix(s, openTag) {
				p.pending = s[len(openTag):]
				p.st = stThink
				continue
			}
			if !final && strings.HasPrefix(openTag, s) {
				return d // could still become <think>
			}
			p.st = stContent
			continue

		case stThink:
			if i := strings.Index(p.pending, closeTag); i >= 0 {
				d.Reasoning += p.reasoning(p.pending[:i], true)
				p.pending = p.pending[i+len(closeTag):]
				p.st = stContent
				p.afterClose = true
				continue
			}
			if final {
				d.Reasoning += p.reasoning(p.pending, true)
				p.pending = ""
				return d
			}
			// Hold back a possible partial </think> and trailing newlines
			// (dropped if </think> follows).
			keep := partialSuffix(p.pending, closeTag)
			body := p.pending[:len(p.pending)-keep]
			trimmed := strings.TrimRight(body, "\n")
			d.Reasoning += p.reasoning(trimmed, false)
			p.pending = p.pending[len(trimmed):]
			return d

		case stContent:
			s := p.pending
			if p.afterClose && !p.contentBody {
				s = strings.TrimLeft(s, "\n")
			}
			if s != "" {
				p.contentBody = true
			}
			d.Content += s
			p.pending = ""
			return d
		}
	}
}

// reasoning returns s as reasoning text, dropping leading newlines before the
// first reasoning text and, when atEnd, trailing newlines.
func (p *Parser) reasoning(s string, atEnd bool) string {
	if !p.thinkBegun {
		s = strings.TrimLeft(s, "\n")
	}
	if atEnd {
		s = strings.TrimRight(s, "\n")
	}
	if s != "" {
		p.thinkBegun = true
	}
	return s
}

// partialSuffix returns the length of the longest proper suffix of s that is
// a prefix of tag.
func partialSuffix(s, tag string) int {
	for n := min(len(s), len(tag)-1); n > 0; n-- {
		if strings.HasSuffix(s, tag[:n]) {
			return n
		}
	}
	return 0
}
