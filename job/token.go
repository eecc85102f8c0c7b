package job

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
)

// StreamToken identifies a resumable stream. Its text form,
// "REQUEST.CREATED.SECRET", is the prefix of the stream's SSE event ids
// (EventID): the request id and the created time let any coordinator render
// the resumed stream exactly as the first one did; the secret (128 random
// bits, checked against the stored stream) makes the id unguessable from
// what a stream shows (its request id is in its chunks).
type StreamToken struct {
	RequestID string
	Created   int64
	Secret    string
}

// NewSecret returns a new random StreamToken.Secret.
func NewSecret() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on supported platforms
	}
	return hex.EncodeToString(b[:])
}

func (t StreamToken) String() string {
	return t.RequestID + "." + strconv.FormatInt(t.Created, 10) + "." + t.Secret
}

// EventID is the SSE id of event n of the stream with token.
func EventID(token string, n int) string { return token + ":" + strconv.Itoa(n) }

// ErrBadEventID is returned by ParseEventID for anything EventID did not
// make.
var ErrBadEventID = errors.New("not an event id of this service")

// ParseEventID splits an SSE event id into the stream's token and the
// event's position. Request ids and secrets are plain letters and digits
// (they become NATS subject tokens); anything else is refused.
func ParseEventID(id string) (StreamToken, int, error) {
	tok, pos, ok := strings.Cut(strings.TrimSpace(id), ":")
	if !ok {
		return StreamToken{}, 0, ErrBadEventID
	}
	n, err := strconv.Atoi(pos)
	if err != nil || n < 0 || pos != strconv.Itoa(n) {
		return StreamToken{}, 0, ErrBadEventID
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || !plainToken(parts[0]) || !plainToken(parts[2]) {
		return StreamToken{}, 0, ErrBadEventID
	}
	created, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || created < 0 || parts[1] != strconv.FormatInt(created, 10) {
		return StreamToken{}, 0, ErrBadEventID
	}
	return StreamToken{RequestID: parts[0], Created: created, Secret: parts[2]}, n, nil
}

// plainToken reports whether s is 1–64 ASCII letters and digits.
func plainToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return false
		}
	}
	return true
}
