package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func mustCompile(t *testing.T, schema string) *Grammar {
	t.Helper()
	g, err := Compile(json.RawMessage(schema))
	if err != nil {
		t.Fatalf("Compile(%s): %v", schema, err)
	}
	return g
}

// accepts feeds doc byte by byte and says whether it is a complete match.
func accepts(g *Grammar, doc string) bool {
	m := g.NewMatcher()
	return m.AcceptBytes([]byte(doc)) == nil && m.Done()
}

const personSchema = `{
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "height": {"type": ["number", "null"]},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    "role": {"enum": ["admin", "user", 7]},
    "ok": {"type": "boolean"},
    "address": {"$ref": "#/$defs/address"}
  },
  "required": ["name", "age"],
  "additionalProperties": false,
  "$defs": {"address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
}`

func TestSchemaAcceptance(t *testing.T) {
	g := mustCompile(t, personSchema)
	for _, tc := range []struct {
		doc  string
		want bool
	}{
		{`{"name":"Ann","age":41}`, true},
		{`{"age":41,"name":"Ann"}`, false},      // schema order
		{`{ "name": "Ann", "age": 41 }`, false}, // compact
		{`{"name":"A\"nn \u00e9 日本","age":-3,"height":1.5e3,"tags":["x","y"],"role":"admin","ok":false,"address":{"city":"Paris"}}`, true},
		{`{"name":"Ann","age":41,"height":null,"role":7}`, true},
		{`{"name":"Ann"}`, false},                               // age required
		{`{"name":"Ann","age":4.5}`, false},                     // integer
		{`{"name":"Ann","age":41,"extra":1}`, false},            // additionalProperties false
		{`{"name":"Ann","age":41,"name":"B"}`, false},           // duplicate key
		{`{"name":"Ann","age":41,"tags":["a","b","c"]}`, false}, // maxItems
		{`{"name":"Ann","age":41,"role":"root"}`, false},        // enum
		{`{"name":"Ann","age":41,"address":{}}`, false},         // nested required
		{`{"name":"Ann","age":041}`, false},                     // leading zero
		{`{"name":"Ann","age":41,}`, false},                     // trailing comma
		{`{"name":"A` + "\x01" + `","age":1}`, false},           // control character
		{`{"name":"Ann","age":41}` + "\n", false},               // nothing after the document
		{`{"name":"Ann","age":41}x`, false},
	} {
		if got := accepts(g, tc.doc); got != tc.want {
			t.Errorf("accepts(%q) = %v, want %v", tc.doc, got, tc.want)
		}
	}
}

func TestJSONObject(t *testing.T) {
	g := JSONObject()
	for doc, want := range map[string]bool{
		`{}`: true,
		`{"a": [1, 2.5, -0.1e-3, true, null, "x", {"b": {}}], "c": []}`: true,
		"{\"a\":  1}":               false, // one whitespace byte per gap
		"{\"a\": 1}\n":              false,
		`[]`:                        false,
		`"x"`:                       false,
		`{"a": tru}`:                false,
		`{"a": 1`:                   false,
		`{"a" 1}`:                   false,
		`{"a": 01}`:                 false,
		`{"a": "\q"}`:               false,
		`{"a": "\u12G4"}`:           false,
		"{\"a\": \"\xff\"}":         false,
		"{\"a\": \"\xe6\x97\xa5\"}": true,
	} {
		if got := accepts(g, doc); got != want {
			t.Errorf("accepts(%q) = %v, want %v", doc, got, want)
		}
	}
}

func TestTopLevelScalars(t *testing.T) {
	g := mustCompile(t, `{"type": "number"}`)
	m := g.NewMatcher()
	if err := m.AcceptBytes([]byte("12")); err != nil || !m.Done() {
		t.Errorf("number 12: err %v, done %v; want accepted and done", err, m.Done())
	}
	if err := m.AcceptBytes([]byte(".")); err != nil || m.Done() {
		t.Errorf("12.: err %v, done %v; want accepted, not done", err, m.Done())
	}
	g = mustCompile(t, `{"enum": [1, 12, "a"]}`)
	for doc, want := range map[string]bool{"1": true, "12": true, "123": false, `"a"`: true, "2": false} {
		if got := accepts(g, doc); got != want {
			t.Errorf("enum: accepts(%q) = %v, want %v", doc, got, want)
		}
	}
	g = mustCompile(t, `{"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}, "minItems": 1}]}`)
	for doc, want := range map[string]bool{`"s"`: true, "[1,2]": true, "[]": false, "[1.5]": false} {
		if got := accepts(g, doc); got != want {
			t.Errorf("anyOf: accepts(%q) = %v, want %v", doc, got, want)
		}
	}
}

func TestRecursiveSchema(t *testing.T) {
	g := mustCompile(t, `{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["v","next"]}`)
	if !accepts(g, `{"v":1,"next":{"v":2,"next":null}}`) {
		t.Error("recursive list rejected")
	}
	if accepts(g, `{"v":1,"next":{"v":2}}`) {
		t.Error("missing nested required accepted")
	}
}

func TestRefusals(t *testing.T) {
	for schema, want := range map[string]string{
		`{"type":"string","pattern":"^(?=a)"}`:                          "pattern at #/pattern",
		`{"type":"string","pattern":"(a)\\1"}`:                          "backreference",
		`{"$ref":"http://x/y"}`:                                         `$ref "http://x/y" at #`,
		`{"type":"object","propertyNames":{"enum":["a"]}}`:              "propertyNames enum at #/propertyNames",
		`{"if":{"multipleOf":2},"then":{"maxLength":5}}`:                "if at #/if",
		`{"type":"object","properties":{"a":{"not":{"multipleOf":3}}}}`: "not at #/properties/a/not",
	} {
		_, err := Compile(json.RawMessage(schema))
		if err == nil || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile(%s): error %v, want ErrUnsupported containing %q", schema, err, want)
		}
		g, err := CompileOptions(json.RawMessage(schema), Options{Lenient: true})
		if err != nil {
			t.Errorf("lenient Compile(%s): %v", schema, err)
			continue
		}
		if u := strings.Join(g.Unenforced(), "; "); !strings.Contains(u, want) {
			t.Errorf("lenient Compile(%s): unenforced %q, want it to contain %q", schema, u, want)
		}
	}
	for schema, want := range map[string]string{
		`{"type":"wat"}`:                                   `unknown type "wat"`,
		`{"type":"string","pattern":"[a"}`:                 "pattern",
		`{"type":"number","multipleOf":0}`:                 "multipleOf: must be greater than 0",
		`{"type":"string","minLength":3,"maxLength":2}`:    "no JSON value",
		`{"allOf":[{"type":"string"},{"type":"integer"}]}`: "no JSON value",
		`not json`: "json schema",
	} {
		_, err := Compile(json.RawMessage(schema))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Compile(%s): error %v, want one containing %q", schema, err, want)
		}
	}
}

// testVocab builds a small vocabulary with overlapping tokens.
func testVocab() *Vocab {
	words := []string{"{", "}", ":", ": ", "{\"", "\"", "\":", "\": ", ",", ", ", " ", "\n", "name", "na", "me", "age", "\"name\"", "\"age\":",
		"1", "12", "0", "-", ".", "5", "e", "true", "tr", "ue", "null", "Ann", "A", "nn", "\"}", "}}", "[", "]", "x", "日", "\xe6", "\x97\xa5"}
	tokens := make([][]byte, len(words)+1)
	for i, w := range words {
		tokens[i] = []byte(w)
	}
	return NewVocab(tokens, []int{len(words)}) // last id: EOS
}

func TestMaskMatchesBruteForce(t *testing.T) {
	v := testVocab()
	g := mustCompile(t, personSchema)
	prefixes := []string{"", "{", "{\"", "{\"na", "{\"name\":", "{\"name\":\"A", "{\"name\":\"Ann\",\"age\":1", `{"name":"Ann","age":12}`}
	allowed := make([]bool, v.Size())
	for _, p := range prefixes {
		m := g.NewMatcher()
		if err := m.AcceptBytes([]byte(p)); err != nil {
			t.Fatalf("prefix %q: %v", p, err)
		}
		n := m.Mask(v, allowed)
		count := 0
		for id, tok := range v.tokens {
			want := len(tok) > 0 && m.Allows(tok)
			if id == len(v.tokens)-1 {
				want = m.Done()
			}
			if allowed[id] != want {
				t.Errorf("prefix %q, token %q: allowed %v, want %v", p, tok, allowed[id], want)
			}
			if want {
				count++
			}
		}
		if n != count {
			t.Errorf("prefix %q: Mask returned %d, counted %d", p, n, count)
		}
	}
}

// TestRandomWalk generates documents by picking allowed tokens and checks
// that each is valid JSON meeting the schema's requirements.
func TestRandomWalk(t *testing.T) {
	v := testVocab()
	g := mustCompile(t, `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},"required":["name","age"],"additionalProperties":false}`)
	allowed := make([]bool, v.Size())
	eos := v.Size() - 1
	for seed := uint64(1); seed <= 200; seed++ {
		m := g.NewMatcher()
		var out []byte
		r := seed
		for steps := 0; ; steps++ {
			if steps > 400 {
				t.Fatalf("seed %d: no end after 400 tokens: %q", seed, out)
			}
			if m.Mask(v, allowed) == 0 {
				t.Fatalf("seed %d: dead end after %q", seed, out)
			}
			var ids []int
			for id, ok := range allowed {
				if ok {
					ids = append(ids, id)
				}
			}
			r = r*6364136223846793005 + 1442695040888963407
			id := ids[(r>>33)%uint64(len(ids))]
			if m.Done() && steps > 60 {
				id = eos // cut long walks once possible
			}
			if err := m.Accept(v, id); err != nil {
				t.Fatalf("seed %d: Accept(%q) after %q: %v", seed, v.tokens[id], out, err)
			}
			if id == eos {
				break
			}
			out = append(out, v.tokens[id]...)
		}
		var doc map[string]any
		d := json.NewDecoder(bytes.NewReader(out))
		d.UseNumber()
		if err := d.Decode(&doc); err != nil {
			t.Fatalf("seed %d: %q is not JSON: %v", seed, out, err)
		}
		if _, ok := doc["name"].(string); !ok {
			t.Errorf("seed %d: %q lacks string name", seed, out)
		}
		if a, ok := doc["age"].(json.Number); !ok || strings.ContainsAny(a.String(), ".eE") {
			t.Errorf("seed %d: %q lacks integer age", seed, out)
		}
	}
}

// qwenVocab loads the real Qwen2/2.5/3 vocabulary (151,669 ids) from the
// repository's testdata and returns it with the id of <|im_end|>.
func qwenVocab(t testing.TB) (*Vocab, [][]byte, int) {
	t.Helper()
	raw, err := os.ReadFile("../../../testdata/tokenizers/qwen3/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	var tj struct {
		Model struct {
			Vocab map[string]int `json:"vocab"`
		} `json:"model"`
		Added []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(raw, &tj); err != nil {
		t.Fatal(err)
	}
	size := 0
	for _, id := range tj.Model.Vocab {
		size = max(size, id+1)
	}
	for _, a := range tj.Added {
		size = max(size, a.ID+1)
	}
	tokens := make([][]byte, size)
	for s, id := range tj.Model.Vocab {
		tokens[id] = ByteLevelBytes(s)
	}
	eos := -1
	for _, a := range tj.Added {
		if a.Content == "<|im_end|>" {
			eos = a.ID
		}
	}
	if eos < 0 {
		t.Fatal("no <|im_end|> in the vocabulary")
	}
	return NewVocab(tokens, []int{eos}), tokens, eos
}

func TestQwenVocabulary(t *testing.T) {
	v, tokens, eos := qwenVocab(t)
	g := mustCompile(t, personSchema)
	m := g.NewMatcher()
	allowed := make([]bool, v.Size())
	for _, p := range []string{"", `{"name":"Ann`, "{\"name\":\"\xe6", `{"name":"a\`, `{"name":"Ann","age":4`, `{"name":"Ann","age":4}`} {
		m = g.NewMatcher()
		if err := m.AcceptBytes([]byte(p)); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		n := m.Mask(v, allowed)
		el := time.Since(t0)
		t.Logf("prefix %q: %d of %d tokens allowed, mask in %v", p, n, v.Size(), el)
		for id := 0; id < v.Size(); id++ {
			want := len(tokens[id]) > 0 && m.Allows(tokens[id]) || id == eos && m.Done()
			if allowed[id] != want {
				t.Errorf("prefix %q token %d %q: allowed %v, want %v", p, id, tokens[id], allowed[id], want)
			}
		}
		if allowed[eos] != m.Done() {
			t.Errorf("prefix %q: EOS allowed %v, document complete %v", p, allowed[eos], m.Done())
		}
	}
	if ByteLevelBytes("Ġworld") == nil || string(ByteLevelBytes("Ġworld")) != " world" {
		t.Errorf("ByteLevelBytes(Ġworld) = %q", ByteLevelBytes("Ġworld"))
	}
}

func FuzzMatcher(f *testing.F) {
	f.Add(`{"name":"Ann","age":41}`)
	f.Add(`{"a":[1,{"b":null}]}`)
	f.Fuzz(func(t *testing.T, doc string) {
		g := JSONObject()
		m := g.NewMatcher()
		err := m.AcceptBytes([]byte(doc))
		if err == nil && m.Done() {
			var v map[string]any
			if json.Unmarshal([]byte(doc), &v) != nil {
				t.Fatalf("grammar accepted invalid JSON object %q", doc)
			}
		}
		_ = mustCompileNoT(personSchema).NewMatcher().AcceptBytes([]byte(doc))
	})
}

func mustCompileNoT(s string) *Grammar {
	g, err := Compile(json.RawMessage(s))
	if err != nil {
		panic(err)
	}
	return g
}

func TestFromResponseFormat(t *testing.T) {
	for rf, want := range map[string]string{
		``:                       "nil",
		`{"type":"text"}`:        "nil",
		`{"type":"json_object"}`: "ok",
		`{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}}}`: "ok",
		`{"type":"json_schema"}`: "json_schema.schema is required",
		`{"type":"json_schema","json_schema":{"strict":true,"schema":{"type":"string","pattern":"(?=x)"}}}`: "lookahead",
		`{"type":"json_schema","json_schema":{"schema":{"type":"string","pattern":"(?=x)"}}}`:               "ok",
		`{"type":"yaml"}`: `unknown type "yaml"`,
	} {
		g, err := FromResponseFormat(json.RawMessage(rf))
		switch want {
		case "nil":
			if g != nil || err != nil {
				t.Errorf("%s: got %v, %v; want nil, nil", rf, g, err)
			}
		case "ok":
			if g == nil || err != nil {
				t.Errorf("%s: got %v, %v; want a grammar", rf, g, err)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: error %v, want one containing %q", rf, err, want)
			}
		}
	}
}

// TestSDKSchemas: what the openai SDK's zodResponseFormat and the Vercel AI
// SDK's generateObject send for z.object({age: z.number().int(), ...}).
func TestSDKSchemas(t *testing.T) {
	for _, tc := range []struct {
		schema string
		good   []string
		bad    []string
	}{
		{`{"type":"object","properties":{"age":{"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991}},"required":["age"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}`,
			[]string{`{"age":41}`, `{"age":-9007199254740991}`}, []string{`{"age":9007199254740992}`, `{"age":4.5}`, `{}`}},
		{`{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":5},"email":{"type":"string","format":"email"},"when":{"type":"string","format":"date-time"},"tags":{"type":"array","items":{"type":"string"},"minItems":1}},"required":["name","email","when","tags"],"additionalProperties":false,"$schema":"http://json-schema.org/draft-07/schema#"}`,
			[]string{`{"name":"Ann","email":"a@b.co","when":"2024-02-29T10:00:00Z","tags":["x"]}`},
			[]string{`{"name":"","email":"a@b.co","when":"2024-02-29T10:00:00Z","tags":["x"]}`, `{"name":"Ann","email":"ab.co","when":"2024-02-29T10:00:00Z","tags":["x"]}`, `{"name":"Ann","email":"a@b.co","when":"2023-02-29T10:00:00Z","tags":["x"]}`, `{"name":"Ann","email":"a@b.co","when":"2024-02-29T10:00:00Z","tags":[]}`}},
	} {
		g := mustCompile(t, tc.schema)
		for _, d := range tc.good {
			if !accepts(g, d) {
				t.Errorf("%s: %s refused", tc.schema, d)
			}
		}
		for _, d := range tc.bad {
			if accepts(g, d) {
				t.Errorf("%s: %s accepted", tc.schema, d)
			}
		}
	}
}

// TestBudgetExact: with exactly MinCloseBytes tokens of budget, random
// byte-level generations still end in a complete document.
func TestBudgetExact(t *testing.T) {
	v := byteVocab()
	eos := v.Size() - 1
	for _, schema := range []string{
		personSchema,
		`{"type":"object","properties":{"a":{"type":"array","items":{"type":"string","pattern":"^[a-z]{3}$"},"minItems":2},"b":{"type":"integer","minimum":100}},"required":["a","b"]}`,
		`{"type":"string","format":"date-time"}`,
	} {
		g := mustCompile(t, schema)
		for seed := uint64(1); seed <= 20; seed++ {
			m := g.NewMatcher()
			budget := m.MinCloseBytes()
			r := rng(seed)
			doc, n, err := generate(m, v, eos, budget, &r, 0)
			if err != nil {
				t.Fatalf("%s seed %d: %v", schema, seed, err)
			}
			if n > budget+1 {
				t.Errorf("%s seed %d: %d tokens for a budget of %d", schema, seed, n, budget)
			}
			if !accepts(g, string(doc)) {
				t.Errorf("%s seed %d: %q is not a complete document", schema, seed, doc)
			}
		}
	}
}

// FuzzCompile: schemas from outside (request bodies) compile to a grammar
// or an error, never a panic, and a compiled grammar's matcher handles any
// text.
func FuzzCompile(f *testing.F) {
	f.Add(`{"type":"object","properties":{"a":{"type":"string","pattern":"^[a-z]+$"}},"required":["a"]}`, `{"a":"x"}`)
	f.Add(`{"anyOf":[{"$ref":"#/$defs/n"},{"type":"null"}],"$defs":{"n":{"type":"integer","minimum":3,"multipleOf":2}}}`, `4`)
	f.Add(`{"allOf":[{"minLength":2},{"format":"date"}],"not":{"const":"x"}}`, `"2024-01-01"`)
	f.Fuzz(func(t *testing.T, schema, doc string) {
		g, err := CompileOptions(json.RawMessage(schema), Options{Lenient: true})
		if err != nil {
			return
		}
		m := g.NewMatcher()
		_ = m.AcceptBytes([]byte(doc))
		_ = m.Done()
		_ = m.MinCloseBytes()
	})
}
