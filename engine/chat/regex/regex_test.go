package regex

import (
	"errors"
	"testing"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		full    bool
		in      string
		want    bool
	}{
		{"^a+$", false, "aaa", true},
		{"^a+$", false, "aab", false},
		{"a+", false, "xxaxx", true},
		{"a+", false, "xxx", false},
		{"^[0-9]{3}-\\d{4}$", false, "555-1234", true},
		{"^[0-9]{3}-\\d{4}$", false, "555-12345", false},
		{"\\u00e9", false, "caf\u00e9", true},
		{"^\\w+$", false, "ab_9", true},
		{"^\\w+$", false, "a-b", false},
		{"^[^]$", false, "\n", true},
		{"^.$", false, "\n", false},
		{"^a{2}b{,}$", false, "aab{,}", true},
		{"^(?:ab|cd)*$", false, "abcdab", true},
		{"[a-z]+", true, "abc", true},
		{"[a-z]+", true, "abc1", false},
		{"^\\s$", false, "\u00a0", true},
		{"^[\\S]$", false, " ", false},
		{"^[\\S]$", false, "x", true},
		{"^\\p{L}+$", false, "été", true},
		{"^\\/x$", false, "/x", true},
		{"", false, "anything", true},
	} {
		var r *Regex
		var err error
		if tc.full {
			r, err = CompileFull(tc.pattern)
		} else {
			r, err = Compile(tc.pattern)
		}
		if err != nil {
			t.Fatalf("Compile(%q): %v", tc.pattern, err)
		}
		if got := r.MatchString(tc.in); got != tc.want {
			t.Errorf("%q on %q: got %v, want %v", tc.pattern, tc.in, got, tc.want)
		}
	}
}

func TestRefused(t *testing.T) {
	for p, want := range map[string]string{
		`(a)\1`:        "backreference",
		`a(?=b)`:       "lookahead",
		`a(?!b)`:       "negative lookahead",
		`(?<=a)b`:      "lookbehind",
		`(?<!a)b`:      "negative lookbehind",
		`\bfoo\b`:      "word boundary",
		`(?<n>a)\k<n>`: "named backreference",
	} {
		_, err := Compile(p)
		if err == nil || !errors.Is(err, ErrUnsupported) || !contains(err.Error(), want) {
			t.Errorf("Compile(%q): error %v, want ErrUnsupported naming %q", p, err, want)
		}
	}
	if _, err := Compile(`[a`); err == nil {
		t.Error("Compile([a): no error")
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestMinChars checks the distance to a match against the shortest path
// found by stepping CheapestNext.
func TestMinChars(t *testing.T) {
	for p, want := range map[string]int{
		"^abc$":          3,
		"^[a-z]{2,5}@x$": 4,
		"^(ab|c)+$":      1,
		"x":              1,
		"^$":             0,
		"^\"{2}$":        2,
	} {
		r, err := Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		s := r.Start()
		got, gotB := r.MinChars(s)
		if got != want {
			t.Errorf("%q: MinChars %d, want %d", p, got, want)
		}
		// Walking the cheapest characters reaches a match in gotB bytes.
		bytes := 0
		for !r.Accepting(s) {
			c, ok := r.CheapestNext(s)
			if !ok {
				t.Fatalf("%q: no cheapest next from a non-accepting state", p)
			}
			bytes += EncLen(c)
			s = r.Step(s, c)
		}
		if bytes != gotB {
			t.Errorf("%q: cheapest walk took %d bytes, MinChars said %d", p, bytes, gotB)
		}
	}
}

// FuzzCompile: any pattern compiles or fails with an error, and a compiled
// automaton steps through any text.
func FuzzCompile(f *testing.F) {
	f.Add(`^[a-z]{2,5}@(x|y)\d*$`, "ab@x12")
	f.Add(`\u00e9+[^\s]`, "éé.")
	f.Fuzz(func(t *testing.T, pattern, text string) {
		r, err := Compile(pattern)
		if err != nil {
			return
		}
		s := r.Start()
		for _, c := range text {
			s = r.Step(s, c)
			r.MinChars(s)
			r.AcceptsRange(s, c, c+64)
		}
		r.Accepting(s)
	})
}

func TestDisjoint(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{`^https?://.+$`, `^\./.+$`, true},
		{`^Displace$`, `^Abs$`, true},
		{`customer`, `maker`, false}, // "customer maker"
		{`^[a-z]+$`, `^[0-9]+$`, true},
		{`^[a-z]+$`, `^[a-m]x`, false},
		{`^a{3}$`, `^a{2,5}$`, false},
		{`^\d{4}$`, `^\d{5}$`, true},
		{`^é$`, `^e$`, true},
	} {
		a, err := Compile(tc.a)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Compile(tc.b)
		if err != nil {
			t.Fatal(err)
		}
		got, known := Disjoint(a, b)
		if !known || got != tc.want {
			t.Errorf("Disjoint(%s, %s) = %v, %v; want %v, true", tc.a, tc.b, got, known, tc.want)
		}
	}
}

func TestComplement(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		full    bool
		in      string
		want    bool
	}{
		{"maker", false, "a maker", false},
		{"maker", false, "make", true},
		{"^[0-9]+$", false, "123", false},
		{"^[0-9]+$", false, "12a", true},
		{"^[0-9]+$", false, "", true},
		{"[0-9.]+", true, "1.2", false},
		{"[0-9.]+", true, "1.x", true},
		{".*", true, "anything", false},
	} {
		var r *Regex
		var err error
		if tc.full {
			r, err = CompileFull(tc.pattern)
		} else {
			r, err = Compile(tc.pattern)
		}
		if err != nil {
			t.Fatal(err)
		}
		n := Complement(r)
		if got := n.MatchString(tc.in); got != tc.want {
			t.Errorf("not %s: MatchString(%q) = %v, want %v", tc.pattern, tc.in, got, tc.want)
		}
		// A state the complement can still leave needs a finite number of
		// characters; one it cannot is dead.
		s := n.Start()
		for _, c := range tc.in {
			s = n.Step(s, c)
		}
		if chars, _ := n.MinChars(s); s != Dead && chars >= 1<<29 {
			t.Errorf("not %s after %q: live state with no way to match", tc.pattern, tc.in)
		}
	}
	a, _ := Compile("^[a-z]+$")
	b, _ := CompileFull("[a-z0-9]+")
	if empty, known := Empty(a, Complement(b)); !empty || !known {
		t.Errorf("Empty(^[a-z]+$, not [a-z0-9]+) = %v, %v; want true, true", empty, known)
	}
	if empty, known := Empty(b, Complement(a)); empty || !known {
		t.Errorf("Empty([a-z0-9]+, not ^[a-z]+$) = %v, %v; want false, true", empty, known)
	}
}
