package api

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test must leave no goroutine behind: streams, servers and clients
// are all stopped by their owners.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
