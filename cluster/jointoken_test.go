package cluster

import (
	"errors"
	"slices"
	"testing"
)

func TestJoinTokenRoundTrip(t *testing.T) {
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	addrs := []string{"192.168.1.20:7946", "mac-b.local:7946"}
	tok := JoinToken(s, addrs)
	if !IsJoinToken(tok) || IsJoinToken("mac-a.local:7946") {
		t.Fatal("IsJoinToken is wrong")
	}
	gotAddrs, got, err := ParseJoinToken(tok)
	if err != nil || !slices.Equal(gotAddrs, addrs) || !got.Equal(s) {
		t.Fatalf("got %v %v %v, want %v and the secret", gotAddrs, got, err, addrs)
	}
	for _, bad := range []string{"mpj1.", "mpj1.!!!", "mpj1.e30", "host:7946"} {
		if _, _, err := ParseJoinToken(bad); !errors.Is(err, ErrJoinToken) {
			t.Errorf("ParseJoinToken(%q): got %v, want ErrJoinToken", bad, err)
		}
	}
}
