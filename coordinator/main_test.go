package coordinator_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Process-wide singletons of the libraries, not per-node goroutines.
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine.func1"),
		goleak.IgnoreAnyFunction("github.com/hashicorp/raft.(*NetworkTransport).listen"),
	)
}
