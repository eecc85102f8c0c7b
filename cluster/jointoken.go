package cluster

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// A join token is what a new machine needs to join a secured cluster, in
// one string: the gossip addresses of members and the cluster secret. The
// first coordinator prints it (`macpool worker --join TOKEN`), so joining
// another Mac is one command instead of copying the secret file. It holds
// the secret: whoever has it can join, like whoever has the file.

const joinTokenPrefix = "mpj1."

// ErrJoinToken: a string with the join token prefix that does not parse.
var ErrJoinToken = errors.New("bad join token")

type joinToken struct {
	Addrs  []string `json:"a"`
	Secret []byte   `json:"s"`
}

// JoinToken encodes addrs and s.
func JoinToken(s *Secret, addrs []string) string {
	b, _ := json.Marshal(joinToken{Addrs: addrs, Secret: s.key[:]})
	return joinTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// IsJoinToken reports whether v is meant as a join token (not addresses).
func IsJoinToken(v string) bool { return strings.HasPrefix(strings.TrimSpace(v), joinTokenPrefix) }

// ParseJoinToken decodes a join token into its addresses and secret.
func ParseJoinToken(v string) ([]string, *Secret, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(v), joinTokenPrefix)
	if !ok {
		return nil, nil, fmt.Errorf("%w: want the prefix %q", ErrJoinToken, joinTokenPrefix)
	}
	b, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrJoinToken, err)
	}
	var t joinToken
	if err := json.Unmarshal(b, &t); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrJoinToken, err)
	}
	if len(t.Addrs) == 0 {
		return nil, nil, fmt.Errorf("%w: no addresses", ErrJoinToken)
	}
	s, err := SecretFromBytes(t.Secret)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrJoinToken, err)
	}
	return t.Addrs, s, nil
}
