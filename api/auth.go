package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"

	"github.com/macpool/macpool/api/openai"
)

// StaticKeys is a KeyChecker over a fixed set of keys: key → key id.
// Comparison is constant-time in the key.
type StaticKeys struct {
	keys []staticKey
}

type staticKey struct {
	hash [sha256.Size]byte
	id   string
}

// NewStaticKeys builds a StaticKeys from key → id.
func NewStaticKeys(keys map[string]string) *StaticKeys {
	s := &StaticKeys{}
	for k, id := range keys {
		s.keys = append(s.keys, staticKey{hash: sha256.Sum256([]byte(k)), id: id})
	}
	return s
}

// Check implements KeyChecker.
func (s *StaticKeys) Check(_ context.Context, key string) (string, error) {
	h := sha256.Sum256([]byte(key))
	found := ""
	ok := 0
	for _, k := range s.keys {
		if subtle.ConstantTimeCompare(h[:], k.hash[:]) == 1 {
			found, ok = k.id, 1
		}
	}
	if ok == 0 {
		return "", openai.Unauthorized("Incorrect API key provided.")
	}
	return found, nil
}
