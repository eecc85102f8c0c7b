package grammar

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// creditCard is JSONSchemaBench Github_trivial/o51159 (shortened): two
// closed branches that both hold for non-objects and overlap nowhere else.
const creditCard = `{"properties":{"c":{"oneOf":[
  {"additionalProperties":false,"properties":{"provider":{"enum":["mastercard"]}},"required":["provider"]},
  {"additionalProperties":false,"properties":{"provider":{"enum":["visa"]},"code":{"type":"integer"}},"required":["provider","code"]}]}}}`

// dataRow is Github_trivial/o9817 (shortened): open objects whose
// pattern properties overlap the other branch's properties.
const dataRow = `{"oneOf":[
  {"type":"object","properties":{"id":{"type":"string"}},"patternProperties":{"^[a-z]+$":{"type":["string","number"]}}},
  {"type":"object","properties":{"count":{"type":"number"},"rows":{"type":"array","items":{"type":"string"}}}}]}`

// TestOneOfExclusive: documents that match two branches are rejected;
// documents the exclusion keeps match exactly one.
func TestOneOfExclusive(t *testing.T) {
	for _, tc := range []struct {
		name, schema, doc string
		want              bool
	}{
		{"both branches hold for a number", creditCard, `{"c":5}`, false},
		{"both branches hold for a string", creditCard, `{"c":"x"}`, false},
		{"mastercard", creditCard, `{"c":{"provider":"mastercard"}}`, true},
		{"visa", creditCard, `{"c":{"provider":"visa","code":1}}`, true},
		{"mastercard with a code is neither", creditCard, `{"c":{"provider":"mastercard","code":1}}`, false},
		{"an empty object matches the second branch", dataRow, `{}`, false},
		{"pattern property kept out of the second branch", dataRow, `{"rows":["a"]}`, true},
		{"row with an id only", dataRow, `{"id":"x"}`, false}, // the second branch holds too
		{"count alone matches both", dataRow, `{"count":1}`, false},
		{"required against a number: 5 matches both",
			`{"oneOf":[{"required":["a"]},{"type":"number"}]}`, `5`, false},
		{"required against a number: object with a",
			`{"oneOf":[{"required":["a"]},{"type":"number"}]}`, `{"a":1}`, true},
		{"disjoint patterns need no exclusion",
			`{"oneOf":[{"type":"string","pattern":"^https?://.+$"},{"type":"string","pattern":"^\\./.+$"}]}`, `"./x"`, true},
		{"const discriminator",
			`{"oneOf":[{"type":"object","properties":{"k":{"const":"a"},"x":{}},"required":["k"]},{"type":"object","properties":{"k":{"const":"b"},"x":{}},"required":["k"]}]}`, `{"k":"b","x":1}`, true},
		{"anyOf and oneOf together keep oneOf exclusive",
			`{"anyOf":[{"type":"integer"}],"oneOf":[{"minimum":0},{"maximum":10}]}`, `5`, false},
		{"anyOf and oneOf together: one branch",
			`{"anyOf":[{"type":"integer"}],"oneOf":[{"minimum":0},{"maximum":10}]}`, `11`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := mustCompile(t, tc.schema)
			if got := g.acceptsAnyOrder(tc.doc); got != tc.want {
				t.Errorf("accepts(%s) = %v, want %v", tc.doc, got, tc.want)
			}
		})
	}
}

// TestOneOfRefusal: overlapping branches with no exclusive form are
// refused in strict mode naming oneOf and its location; lenient mode
// enforces anyOf and reports it.
func TestOneOfRefusal(t *testing.T) {
	// multipleOf has no schema form of its complement: 6 matches both.
	schema := `{"type":"object","properties":{"n":{"type":"integer","oneOf":[{"multipleOf":2},{"multipleOf":3}]}}}`
	_, err := Compile(json.RawMessage(schema))
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "oneOf at #/properties/n") {
		t.Fatalf("strict: got %v, want a refusal naming oneOf at #/properties/n", err)
	}
	g, err := CompileOptions(json.RawMessage(schema), Options{Lenient: true})
	if err != nil {
		t.Fatal(err)
	}
	if u := strings.Join(g.Unenforced(), "; "); !strings.Contains(u, "oneOf at #/properties/n") {
		t.Errorf("Unenforced() = %q, want oneOf at #/properties/n", u)
	}
	if !g.acceptsAnyOrder(`{"n":4}`) {
		t.Errorf("lenient: a document of one branch is refused")
	}
}

// TestOneOfStrings: patterns exclude each other through the complement
// automaton; formats through a superset of the other format.
func TestOneOfStrings(t *testing.T) {
	for _, tc := range []struct {
		schema, doc string
		want        bool
	}{
		{`{"type":"string","oneOf":[{"pattern":"customer"},{"pattern":"maker"}]}`, `"a customer"`, true},
		{`{"type":"string","oneOf":[{"pattern":"customer"},{"pattern":"maker"}]}`, `"maker"`, true},
		{`{"type":"string","oneOf":[{"pattern":"customer"},{"pattern":"maker"}]}`, `"customer maker"`, false},
		{`{"type":"string","oneOf":[{"format":"hostname"},{"format":"ipv4"}]}`, `"example.com"`, true},
		{`{"type":"string","oneOf":[{"format":"hostname"},{"format":"ipv4"}]}`, `"1.2.3.4"`, false}, // a hostname too
		{`{"type":"string","oneOf":[{"format":"hostname"},{"format":"ipv6"}]}`, `"::1"`, true},
		{`{"type":"string","oneOf":[{},{"format":"ipv4"}]}`, `"1.2.3.4"`, false},
		{`{"type":"string","oneOf":[{},{"format":"ipv4"}]}`, `"x"`, true},
	} {
		g := mustCompile(t, tc.schema)
		if got := g.acceptsAnyOrder(tc.doc); got != tc.want {
			t.Errorf("%s: accepts(%s) = %v, want %v", tc.schema, tc.doc, got, tc.want)
		}
	}
}

// TestOneOfSubsetReported: a subset approximation compiles strictly and
// says where.
func TestOneOfSubsetReported(t *testing.T) {
	g := mustCompile(t, dataRow)
	if a := strings.Join(g.Approximated(), "; "); !strings.Contains(a, "oneOf at # (enforced as a subset") {
		t.Errorf("Approximated() = %q, want the subset at #", a)
	}
	if g := mustCompile(t, creditCard); len(g.Approximated()) == 0 {
		t.Errorf("creditCard: the additionalProperties exclusion is a subset and must be reported")
	}
}

// TestComplementSemantics: not and if/then/else use the exact complement;
// the keywords of object schemas hold only for objects.
func TestComplementSemantics(t *testing.T) {
	for _, tc := range []struct {
		schema, doc string
		want        bool
	}{
		{`{"not":{"required":["a"]}}`, `5`, false}, // 5 satisfies required
		{`{"not":{"required":["a"]}}`, `{"b":1}`, true},
		{`{"not":{"required":["a"]}}`, `{"a":1}`, false},
		{`{"not":{"properties":{"a":{"type":"string"}}}}`, `{}`, false},
		{`{"not":{"properties":{"a":{"type":"string"}}}}`, `{"a":1}`, true},
		{`{"not":{"items":{"type":"string"}}}`, `[1]`, true},
		{`{"not":{"items":{"type":"string"}}}`, `["x"]`, false},
		{`{"not":{"dependentRequired":{"a":["b"]}}}`, `{"a":1}`, true},
		{`{"not":{"dependentRequired":{"a":["b"]}}}`, `{"a":1,"b":2}`, false},
		{`{"if":{"required":["a"]},"then":{"required":["b"]},"else":{"type":"object"}}`, `3`, true},
		{`{"if":{"required":["a"]},"then":{"required":["b"]},"else":{"type":"object"}}`, `{"a":1}`, false},
		{`{"not":{"pattern":"x"}}`, `"abc"`, true},
		{`{"not":{"pattern":"x"}}`, `"axc"`, false},
		{`{"not":{"pattern":"x"}}`, `5`, false}, // 5 satisfies pattern
		{`{"if":{"pattern":"^a"},"then":{"maxLength":2}}`, `"abc"`, false},
		{`{"if":{"pattern":"^a"},"then":{"maxLength":2}}`, `"bcd"`, true},
	} {
		g, err := CompileOptions(json.RawMessage(tc.schema), Options{OpenObjects: true})
		if err != nil {
			t.Fatalf("%s: %v", tc.schema, err)
		}
		if got := g.acceptsAnyOrder(tc.doc); got != tc.want {
			t.Errorf("%s: accepts(%s) = %v, want %v", tc.schema, tc.doc, got, tc.want)
		}
	}
}

// TestMergeAdditionalProperties: in allOf, a member's
// additionalProperties applies to the properties another member adds.
func TestMergeAdditionalProperties(t *testing.T) {
	for _, tc := range []struct {
		schema, doc string
		want        bool
	}{
		{`{"allOf":[{"properties":{"a":{}},"additionalProperties":false},{"properties":{"b":{}},"required":["b"]}]}`, `{"b":1}`, false},
		{`{"allOf":[{"properties":{"a":{}},"additionalProperties":false},{"properties":{"b":{}}}]}`, `{"a":1}`, true},
		{`{"allOf":[{"properties":{"a":{}},"additionalProperties":{"type":"integer"}},{"properties":{"b":{}}}]}`, `{"b":"x"}`, false},
		{`{"allOf":[{"properties":{"a":{}},"additionalProperties":{"type":"integer"}},{"properties":{"b":{}}}]}`, `{"b":2}`, true},
		{`{"allOf":[{"properties":{"a":{}},"additionalProperties":false},{"properties":{"a":{"type":"integer"}}}]}`, `{"a":1}`, true},
	} {
		g := mustCompile(t, tc.schema)
		if got := g.acceptsAnyOrder(tc.doc); got != tc.want {
			t.Errorf("%s: accepts(%s) = %v, want %v", tc.schema, tc.doc, got, tc.want)
		}
	}
}

// TestRecursiveRefChain: a reference chain back into a schema being
// compiled (A → B → A) keeps A's constraints instead of "any value".
func TestRecursiveRefChain(t *testing.T) {
	g := mustCompile(t, `{"$defs":{"a":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/b"}}}},
		"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`)
	for doc, want := range map[string]bool{`{"kids":[{"kids":[]}]}`: true, `{"kids":["x"]}`: false, `{"kids":[5]}`: false} {
		if got := g.acceptsAnyOrder(doc); got != want {
			t.Errorf("accepts(%s) = %v, want %v", doc, got, want)
		}
	}
}
