package grammar

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

// speedSample is every step-th schema of the JSONSchemaBench sample.
const speedStep = 24

// qwenWalks drives the matchers of a sample of schemas through random
// generations with the Qwen vocabulary and returns a snapshot of the
// matcher before each token (states are immutable, so a copy of the
// Matcher value is a snapshot).
func qwenWalks(t testing.TB, v *Vocab, eos int) ([]Matcher, []time.Duration) {
	snaps, masks, _, _ := qwenWalksDocs(t, v, eos)
	return snaps, masks
}

func qwenWalksDocs(t testing.TB, v *Vocab, eos int) ([]Matcher, []time.Duration, []benchSchema, [][]byte) {
	t.Helper()
	var snaps []Matcher
	var schemas []benchSchema
	var docs [][]byte
	var masks []time.Duration
	allowed := make([]bool, v.Size())
	for i, s := range loadBench(t) {
		if i%speedStep != 0 {
			continue
		}
		g, err := CompileOptions(s.raw, Options{Lenient: true})
		if err != nil {
			continue
		}
		m := g.NewMatcher()
		r := rng(i + 1)
		var doc []byte
		budget := max(48, m.MinCloseBytes()+16)
		for step := 0; step <= budget; step++ {
			snaps = append(snaps, Matcher{g: m.g, states: m.states})
			t0 := time.Now()
			n := m.MaskBudget(v, allowed, budget-step)
			masks = append(masks, time.Since(t0))
			if n == 0 {
				t.Fatalf("%s/%s: dead end at step %d", s.category, s.name, step)
			}
			if allowed[eos] {
				break
			}
			var ids []int
			for id, ok := range allowed {
				if ok {
					ids = append(ids, id)
				}
			}
			id := ids[r.next()%uint64(len(ids))]
			if err := m.Accept(v, id); err != nil {
				t.Fatal(err)
			}
			doc = append(doc, v.tokens[id]...)
		}
		if !m.Done() {
			t.Errorf("%s/%s: walk with the Qwen vocabulary did not complete the document", s.category, s.name)
		}
		schemas = append(schemas, s)
		docs = append(docs, doc)
	}
	return snaps, masks, schemas, docs
}

// TestQwenMaskTiming generates with the real Qwen vocabulary under a tight
// token budget for a sample of schemas (each walk must complete its
// document, which a real validator must accept) and reports the mask time
// per token.
func TestQwenMaskTiming(t *testing.T) {
	v, _, eos := qwenVocab(t)
	_, masks, schemas, docs := qwenWalksDocs(t, v, eos)
	checked := 0
	for i, s := range schemas {
		sch, err := validator(s.raw)
		if err != nil {
			continue // the validator cannot load it (remote refs)
		}
		checked++
		if err := validate(sch, docs[i]); err != nil {
			t.Errorf("%s/%s: invalid document %q: %v", s.category, s.name, docs[i], err)
		}
	}
	t.Logf("%d documents generated with the Qwen vocabulary, %d checked by the validator", len(docs), checked)
	sort.Slice(masks, func(i, j int) bool { return masks[i] < masks[j] })
	var sum time.Duration
	for _, d := range masks {
		sum += d
	}
	t.Logf("%d masks over the %d-token vocabulary: mean %v p50 %v p99 %v max %v", len(masks), v.Size(),
		sum/time.Duration(len(masks)), masks[len(masks)/2], masks[len(masks)*99/100], masks[len(masks)-1])
}

// BenchmarkMaskQwen measures one mask over the 151,669-token Qwen
// vocabulary, cycling through states recorded on random generations.
func BenchmarkMaskQwen(b *testing.B) {
	v, _, eos := qwenVocab(b)
	snaps, _ := qwenWalks(b, v, eos)
	allowed := make([]bool, v.Size())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := snaps[i%len(snaps)]
		m.Mask(v, allowed)
	}
}

// BenchmarkCompileBench measures compile time over the schema sample.
func BenchmarkCompileBench(b *testing.B) {
	schemas := loadBench(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s := schemas[i%len(schemas)]
		_, _ = CompileOptions(s.raw, Options{Lenient: true})
	}
}

// TestQwenMaskShortcuts checks the mask shortcuts (strings with length
// bounds, pattern strings with cached token lists, keys) against stepping
// every token, on the real vocabulary.
func TestQwenMaskShortcuts(t *testing.T) {
	v, tokens, eos := qwenVocab(t)
	g := mustCompile(t, `{"type":"object","properties":{"s":{"type":"string","maxLength":3},"p":{"type":"string","pattern":"^[a-c]+$"},"d":{"type":"string","format":"date"},"m":{"type":"object","additionalProperties":{"type":"integer"}}},"required":["s","p","d","m"]}`)
	allowed := make([]bool, v.Size())
	for round := 0; round < 2; round++ { // the second round hits the caches
		for _, p := range []string{`{"s":"`, `{"s":"ab`, `{"s":"abc`, `{"s":"\u00e9`, `{"s":"ab","p":"`, `{"s":"ab","p":"ab`,
			`{"s":"ab","p":"a","d":"20`, `{"s":"ab","p":"a","d":"2024-02-2`, `{"s":"ab","p":"a","d":"2024-02-29","m":{"`, `{"s":"ab","p":"a","d":"2024-02-29","m":{"x`} {
			m := g.NewMatcher()
			if err := m.AcceptBytes([]byte(p)); err != nil {
				t.Fatalf("prefix %q: %v", p, err)
			}
			n := m.Mask(v, allowed)
			count := 0
			for id := range tokens {
				want := len(tokens[id]) > 0 && m.Allows(tokens[id]) || id == eos && m.Done()
				if allowed[id] != want {
					t.Errorf("prefix %q token %q: allowed %v, want %v", p, tokens[id], allowed[id], want)
				}
				if want {
					count++
				}
			}
			if n != count {
				t.Errorf("prefix %q: Mask counted %d, want %d", p, n, count)
			}
		}
	}
}

// TestFastStringsMatchWalk checks the cached in-string path (instring.go)
// against the ordinary walk of every token, with and without budgets, on
// the states of pattern and format strings met on random generations.
func TestFastStringsMatchWalk(t *testing.T) {
	v, _, eos := qwenVocab(t)
	g := mustCompile(t, `{"type":"object","properties":{"p":{"type":"string","pattern":"^[a-z]{2,}-[0-9]+$"},"d":{"type":"string","format":"date-time","minLength":22},
		"u":{"type":"string","pattern":"é|日本","minLength":6},"e":{"type":"string","format":"email"},"x":{"type":"string","pattern":"^[a-z]+[0-9]*$","maxLength":6}},"required":["p","d","u","e"]}`)
	snaps := []Matcher{}
	for _, prefix := range []string{`{"p":"`, `{"p":"ab`, `{"p":"abc-`, `{"p":"abc-1`, `{"p":"ab-1","d":"`, `{"p":"ab-1","d":"2024-0`,
		`{"p":"ab-1","d":"2024-02-29T1`, `{"p":"ab-1","d":"2024-02-29T12:00:00`, `{"p":"ab-1","d":"2024-02-29T12:00:00.5Z","u":"`,
		`{"p":"ab-1","d":"2024-02-29T12:00:00.5Z","u":"x\u00e9`, `{"p":"ab-1","d":"2024-02-29T12:00:00.5Z","u":"日`, `{"p":"ab-1","d":"2024-02-29T12:00:00.5Z","u":"é`,
		`{"p":"ab-1","d":"2024-02-29T12:00:00.5Z","u":"éabcde","e":"a.b@`,
		`{"p":"ab-1","d":"2024-02-29T12:00:00.5Z","u":"éabcde","e":"a@b","x":"`, `{"p":"ab-1","d":"2024-02-29T12:00:00.5Z","u":"éabcde","e":"a@b","x":"abc`,
		`{"p":"ab-1","d":"2024-02-29T12:00:00.5Z","u":"éabcde","e":"a@b","x":"abcde`, `{"p":"ab-1","d":"2024-02-29T12:00:00.5Z","u":"éabcde","e":"a@b","x":"ab12`} {
		m := g.NewMatcher()
		if err := m.AcceptBytes([]byte(prefix)); err != nil {
			t.Fatalf("prefix %q: %v", prefix, err)
		}
		if !fastString(m) {
			t.Fatalf("prefix %q: not a cached string state", prefix)
		}
		snaps = append(snaps, *m)
	}
	// Keys of an object that takes other keys too, and plain strings.
	kg := mustCompile(t, `{"type":"object","properties":{"alpha":{"type":"integer"},"alpine":{"type":"string"},"beta":{"type":"boolean"}},"additionalProperties":{"type":"string","minLength":20}}`)
	for _, prefix := range []string{`{"`, `{"al`, `{"alp`, `{"alpha":1,"`, `{"x`, `{"x":"`, `{"x":"abcdefghijklmnopqrstuvwxyz`} {
		m := kg.NewMatcher()
		if err := m.AcceptBytes([]byte(prefix)); err != nil {
			t.Fatalf("prefix %q: %v", prefix, err)
		}
		snaps = append(snaps, *m)
	}
	// Strings with length bounds only, under budgets.
	lg := mustCompile(t, `{"type":"object","properties":{"s":{"type":"string","minLength":3,"maxLength":9}},"required":["s"]}`)
	for _, prefix := range []string{`{"s":"`, `{"s":"a`, `{"s":"abc`, `{"s":"abcdefgh`} {
		m := lg.NewMatcher()
		if err := m.AcceptBytes([]byte(prefix)); err != nil {
			t.Fatalf("prefix %q: %v", prefix, err)
		}
		snaps = append(snaps, *m)
	}
	fast, slow := make([]bool, v.Size()), make([]bool, v.Size())
	defer func() { fastStrings = true }()
	for _, m := range snaps {
		c := m.MinCloseBytes()
		for _, left := range []int{-1, c, c + 1, c + 3, c + 8, c + 40} {
			fastStrings = true
			var nf, ns int
			if left < 0 {
				nf = m.Mask(v, fast)
			} else {
				nf = m.mask(v, fast, left)
			}
			fastStrings = false
			if left < 0 {
				ns = m.Mask(v, slow)
			} else {
				ns = m.mask(v, slow, left)
			}
			if nf != ns {
				t.Errorf("state %s budget %d: fast path allows %d tokens, the walk %d", describe(&m), left, nf, ns)
			}
			for id := range fast {
				if fast[id] != slow[id] && id != eos {
					t.Errorf("state %s budget %d: token %q fast %v walk %v", describe(&m), left, v.tokens[id], fast[id], slow[id])
					break
				}
			}
		}
	}
}

func describe(m *Matcher) string {
	f := m.states[0]
	if f.key {
		return fmt.Sprintf("key %q", f.lit)
	}
	if len(f.n.res) > 0 {
		return fmt.Sprintf("%q after %d characters", f.n.res[0].String(), f.cnt)
	}
	return fmt.Sprintf("length %d..%d after %d characters", f.n.minLen, f.n.maxLen, f.cnt)
}
