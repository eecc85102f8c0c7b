package job

import (
	"strings"
	"testing"
)

func TestEventIDRoundTrip(t *testing.T) {
	tok := StreamToken{RequestID: "0123456789abcdef01234567", Created: 1764460800, Secret: NewSecret()}
	for _, n := range []int{0, 1, 7, 123456} {
		got, gn, err := ParseEventID(EventID(tok.String(), n))
		if err != nil || got != tok || gn != n {
			t.Errorf("ParseEventID(EventID(%v, %d)) = %v, %d, %v", tok, n, got, gn, err)
		}
	}
	if a, b := NewSecret(), NewSecret(); a == b || len(a) != 32 {
		t.Errorf("secrets %q, %q: want 32 random hex digits each", a, b)
	}
}

func TestParseEventIDRefuses(t *testing.T) {
	for _, id := range []string{
		"", "x", "a.1.b", "a.1.b:", "a.1.b:x", "a.1.b:-1", "a.1.b:01", "a.1.b:+1",
		"a.b.c:1", "a.-1.b:1", "a.01.b:1", ".1.b:1", "a.1.:1", "a.1.b.c:1", "a/x.1.b:1",
		"a.1.b:1:2", "a.1.b c:1", strings.Repeat("a", 65) + ".1.b:1", "a.1.b:99999999999999999999",
	} {
		if _, _, err := ParseEventID(id); err == nil {
			t.Errorf("ParseEventID(%q) accepted", id)
		}
	}
}

// Last-Event-ID comes from clients: any input is an id or ErrBadEventID,
// never a panic, and what parses prints back to itself.
func FuzzParseEventID(f *testing.F) {
	f.Add("0123456789abcdef01234567.1764460800.0123456789abcdef0123456789abcdef:12")
	f.Add("a.1.b:0")
	f.Add(":::")
	f.Fuzz(func(t *testing.T, id string) {
		tok, n, err := ParseEventID(id)
		if err != nil {
			return
		}
		if back := EventID(tok.String(), n); back != strings.TrimSpace(id) {
			t.Fatalf("%q parsed to %v:%d, prints %q", id, tok, n, back)
		}
	})
}
