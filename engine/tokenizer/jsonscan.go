package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// A small reader for the two big parts of tokenizer.json (model.vocab, an
// object of ~150K string: int pairs, and model.merges), about ten times
// faster than encoding/json's reflection. The input has already been
// checked to be valid JSON by encoding/json; errors here are still reported,
// never panics.

type jsonScan struct {
	b []byte
	i int
}

var errJSON = errors.New("malformed JSON")

func (s *jsonScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, 0 at the end.
func (s *jsonScan) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *jsonScan) expect(c byte) error {
	if s.peek() != c {
		return fmt.Errorf("%w: want %q at offset %d", errJSON, c, s.i)
	}
	s.i++
	return nil
}

// str reads a string; escapes are rare in tokenizer.json and are left to
// encoding/json.
func (s *jsonScan) str() (string, error) {
	if err := s.expect('"'); err != nil {
		return "", err
	}
	start, escaped := s.i, false
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			escaped = true
			s.i += 2
			continue
		case '"':
			lit := s.b[start-1 : s.i+1]
			s.i++
			if !escaped {
				return string(lit[1 : len(lit)-1]), nil
			}
			var out string
			if err := json.Unmarshal(lit, &out); err != nil {
				return "", err
			}
			return out, nil
		}
		s.i++
	}
	return "", fmt.Errorf("%w: unterminated string", errJSON)
}

func (s *jsonScan) int() (int, error) {
	s.ws()
	start := s.i
	for s.i < len(s.b) && (s.b[s.i] == '-' || (s.b[s.i] >= '0' && s.b[s.i] <= '9')) {
		s.i++
	}
	return strconv.Atoi(string(s.b[start:s.i]))
}

// list reads a JSON array, calling item for each element.
func (s *jsonScan) list(item func() error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for {
		if err := item(); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return fmt.Errorf("%w: want , or ] at offset %d", errJSON, s.i)
		}
	}
}

type vocabEntry struct {
	tok string
	id  int
}

// parseVocab reads model.vocab ({"token": id, ...}) in file order.
func parseVocab(raw []byte) ([]vocabEntry, error) {
	s := &jsonScan{b: raw}
	vocab := make([]vocabEntry, 0, len(raw)/16)
	if err := s.expect('{'); err != nil {
		return nil, err
	}
	if s.peek() == '}' {
		return vocab, nil
	}
	for {
		tok, err := s.str()
		if err != nil {
			return nil, err
		}
		if err := s.expect(':'); err != nil {
			return nil, err
		}
		id, err := s.int()
		if err != nil {
			return nil, fmt.Errorf("vocab %q: %w", tok, err)
		}
		vocab = append(vocab, vocabEntry{tok, id})
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			return vocab, nil
		default:
			return nil, fmt.Errorf("%w: want , or } at offset %d", errJSON, s.i)
		}
	}
}

// parseMerges reads model.merges, written ["a b", ...] (older files) or
// [["a", "b"], ...], as "a b" strings.
func parseMerges(raw []byte) ([]string, error) {
	s := &jsonScan{b: raw}
	if s.peek() == 'n' { // null
		return nil, nil
	}
	merges := make([]string, 0, len(raw)/12)
	err := s.list(func() error {
		if s.peek() == '"' {
			m, err := s.str()
			merges = append(merges, m)
			return err
		}
		var pair []string
		err := s.list(func() error {
			p, err := s.str()
			pair = append(pair, p)
			return err
		})
		if err != nil {
			return err
		}
		if len(pair) != 2 || containsSpace(pair[0]) || containsSpace(pair[1]) {
			return fmt.Errorf("merge %d %q is not a pair of tokens without spaces", len(merges), pair)
		}
		merges = append(merges, pair[0]+" "+pair[1])
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("model.merges: %w", err)
	}
	return merges, nil
}

func containsSpace(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == ' ' {
			return true
		}
	}
	return false
}
