package grammar

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dlclark/regexp2/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// benchDir is the JSONSchemaBench sample (third-party data, read from the
// shared fixtures next to the repository).
const benchDir = "../../../../shared/fixtures/jsonschemabench"

type benchSchema struct {
	category, name string
	raw            []byte
}

func loadBench(t testing.TB) []benchSchema {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(benchDir, "*", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no schemas under %s (the shared fixtures must be present): %v", benchDir, err)
	}
	sort.Strings(files)
	var out []benchSchema
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, benchSchema{category: filepath.Base(filepath.Dir(f)), name: filepath.Base(f), raw: raw})
	}
	return out
}

// byteVocab is every single byte plus some multi-byte tokens, so random
// walks exercise token boundaries inside and across JSON tokens.
func byteVocab() *Vocab {
	var toks [][]byte
	for b := 0; b < 256; b++ {
		toks = append(toks, []byte{byte(b)})
	}
	for _, w := range []string{`{"`, `":`, `","`, `"}`, `true`, `false`, `null`, `":"`, `},{"`, `[{"`, `"]`, `12`, `.5`, `-1`, `é`, `日本`, `\u00e9`, `\n`, `ab`, `http`, `://`, `com`, `2024-`} {
		toks = append(toks, []byte(w))
	}
	toks = append(toks, nil) // EOS
	return NewVocab(toks, []int{len(toks) - 1})
}

type rng uint64

func (r *rng) next() uint64 {
	*r = *r*6364136223846793005 + 1442695040888963407
	return uint64(*r >> 33)
}

// generate drives m with random allowed tokens under a budget of budget
// tokens (the end of sequence not counted) and returns the document. Ending is preferred once possible with
// probability pEnd/16.
func generate(m *Matcher, v *Vocab, eos, budget int, r *rng, pEnd uint64) ([]byte, int, error) {
	allowed := make([]bool, v.Size())
	var out []byte
	var ids []int
	for step := 0; ; step++ {
		left := budget - step
		if m.MaskBudget(v, allowed, left) == 0 {
			return out, step, fmt.Errorf("dead end after %d tokens (%d left): %q", step, left, out)
		}
		if allowed[eos] && r.next()%16 < pEnd {
			return out, step + 1, nil
		}
		ids = ids[:0]
		for id, ok := range allowed {
			if ok && id != eos {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			if allowed[eos] {
				return out, step + 1, nil
			}
			return out, step, fmt.Errorf("nothing allowed: %q", out)
		}
		id := ids[r.next()%uint64(len(ids))]
		if err := m.Accept(v, id); err != nil {
			return out, step, fmt.Errorf("accept %q after %q: %w", v.tokens[id], out, err)
		}
		out = append(out, v.tokens[id]...)
	}
}

// validator compiles schema with a real JSON Schema implementation
// (formats asserted).
func validator(raw []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	// pattern is ECMA-262 (\s includes Unicode spaces); Go's regexp is not.
	c.UseRegexpEngine(ecmaRegexp)
	c.UseLoader(noRemote{})
	if err := c.AddResource("urn:bench:schema.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("urn:bench:schema.json")
}

type ecmaRE struct{ *regexp2.Regexp }

func (r ecmaRE) MatchString(s string) bool {
	ok, err := r.Regexp.MatchString(s)
	return ok && err == nil
}

func ecmaRegexp(s string) (jsonschema.Regexp, error) {
	re, err := regexp2.Compile(s, regexp2.ECMAScript)
	if err != nil {
		return nil, err
	}
	return ecmaRE{re}, nil
}

type noRemote struct{}

func (noRemote) Load(url string) (any, error) {
	return nil, errors.New("remote schemas are not fetched")
}

func validate(sch *jsonschema.Schema, doc []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return sch.Validate(v)
}

// benchThresholds: TestJSONSchemaBench fails below these shares of the
// sample (each over all schemas in it).
const (
	benchMinCompiled = 0.95 // compiled strictly
	benchMinValid    = 0.95 // a generated document the validator accepts
)

// TestJSONSchemaBench compiles every schema of the sample, generates a
// document per schema by random token choices under a token budget (so
// the budget-close rule is exercised: every walk must end in a complete
// document) and validates it with santhosh-tekuri/jsonschema. A strictly
// compiled schema must never yield an invalid document, nor may a
// leniently compiled one here (none of their unenforced keywords bites).
func TestJSONSchemaBench(t *testing.T) {
	schemas := loadBench(t)
	v := byteVocab()
	eos := v.Size() - 1
	type catStats struct{ n, strict, lenient, approx, valid, invalid, noValidator, deadEnds int }
	cats := map[string]*catStats{}
	var times []time.Duration
	var problems []string
	for i, s := range schemas {
		cs := cats[s.category]
		if cs == nil {
			cs = &catStats{}
			cats[s.category] = cs
		}
		if only := os.Getenv("BENCH_ONLY"); only != "" && only != s.category+"/"+s.name {
			continue
		}
		cs.n++
		t0 := time.Now()
		g, err := compileSafe(s.raw, Options{})
		times = append(times, time.Since(t0))
		strict := err == nil
		if err != nil {
			if !errors.Is(err, ErrUnsupported) {
				problems = append(problems, fmt.Sprintf("%s/%s: compile: %v", s.category, s.name, err))
			}
			if g, err = compileSafe(s.raw, Options{Lenient: true}); err != nil {
				problems = append(problems, fmt.Sprintf("%s/%s: lenient compile: %v", s.category, s.name, err))
				continue
			}
		} else {
			cs.strict++
			if len(g.Approximated()) > 0 {
				cs.approx++
			}
		}
		cs.lenient++
		sch, verr := validator(s.raw)
		if verr != nil {
			cs.noValidator++
			continue
		}
		r := rng(i*7919 + 1)
		// The budget leaves room for the shortest document.
		m := g.NewMatcher()
		doc, _, err := generate(m, v, eos, max(400, m.MinCloseBytes()+100), &r, 4)
		if err != nil {
			if os.Getenv("BENCH_ONLY") != "" {
				os.WriteFile(filepath.Join(t.TempDir(), "x"), doc, 0o644)
				_ = os.WriteFile("/tmp/prefix.txt", doc, 0o644)
			}
			cs.deadEnds++
			problems = append(problems, fmt.Sprintf("%s/%s: generate: %v", s.category, s.name, err))
			continue
		}
		if err := validate(sch, doc); err != nil {
			cs.invalid++
			msg := strings.ReplaceAll(err.Error(), "\n", " ")
			if len(msg) > 300 {
				msg = msg[:300]
			}
			// Subset approximations (Grammar.Approximated) must stay sound:
			// every document, strict or lenient, validates.
			how := "strict"
			if !strict {
				how = "lenient: " + strings.Join(g.Unenforced(), "; ")
			}
			t.Errorf("%s/%s (%s): generated an invalid document %q: %s", s.category, s.name, how, doc, msg)
			continue
		}
		cs.valid++
	}
	var names []string
	for k := range cats {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	var tot catStats
	fmt.Fprintf(&b, "%-16s %5s %7s %7s %6s %7s %6s %6s %5s\n", "category", "n", "strict", "lenient", "approx", "valid", "invalid", "noval", "dead")
	for _, k := range names {
		c := cats[k]
		fmt.Fprintf(&b, "%-16s %5d %7d %7d %6d %7d %6d %6d %5d\n", k, c.n, c.strict, c.lenient, c.approx, c.valid, c.invalid, c.noValidator, c.deadEnds)
		tot.approx += c.approx
		tot.n += c.n
		tot.strict += c.strict
		tot.lenient += c.lenient
		tot.valid += c.valid
		tot.invalid += c.invalid
		tot.noValidator += c.noValidator
		tot.deadEnds += c.deadEnds
	}
	fmt.Fprintf(&b, "%-16s %5d %7d %7d %6d %7d %6d %6d %5d\n", "TOTAL", tot.n, tot.strict, tot.lenient, tot.approx, tot.valid, tot.invalid, tot.noValidator, tot.deadEnds)
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	p50, p99 := times[len(times)/2], times[len(times)*99/100]
	fmt.Fprintf(&b, "compile time p50 %v p99 %v max %v\n", p50, p99, times[len(times)-1])
	t.Logf("JSONSchemaBench sample\n%s", b.String())
	if os.Getenv("BENCH_PROBLEMS") != "" {
		for _, p := range problems {
			t.Log(p)
		}
	}
	// Schemas the validator cannot compile (remote refs, RE2-only regexes)
	// cannot be checked; they count against the valid share.
	if r := float64(tot.strict) / float64(tot.n); r < benchMinCompiled {
		t.Errorf("%.1f%% of schemas compile strictly, want at least %.0f%%", 100*r, 100*benchMinCompiled)
	}
	if r := float64(tot.valid) / float64(tot.n); r < benchMinValid {
		t.Errorf("%.1f%% of schemas gave a valid document, want at least %.0f%%", 100*r, 100*benchMinValid)
	}
	if tot.invalid > 0 {
		t.Errorf("%d generated documents are invalid, want none", tot.invalid)
	}
	if tot.deadEnds > 0 {
		t.Errorf("%d generations hit a dead end", tot.deadEnds)
	}
}
