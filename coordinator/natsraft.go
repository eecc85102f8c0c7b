package coordinator

import (
	"sync"
	"time"
	_ "unsafe" // go:linkname
)

// nats-server elects a new stream/consumer leader only after a follower has
// missed the leader's heartbeats (1 s apart) for a random 4–9 s, and offers
// no option to change that. When a coordinator dies, every queue whose
// stream leader it held is unwritable until then, so the whole API stalls
// for up to 9 s (longer under load, when the first election splits). These
// package variables are the ones nats-server's own tests lower; a LAN
// cluster of a few Macs can afford much shorter timeouts than the WAN
// superclusters the defaults are for. If a nats-server release renames
// them, the link fails at build time rather than silently.

//go:linkname natsMinElectionTimeout github.com/nats-io/nats-server/v2/server.minElectionTimeout
var natsMinElectionTimeout time.Duration

//go:linkname natsMaxElectionTimeout github.com/nats-io/nats-server/v2/server.maxElectionTimeout
var natsMaxElectionTimeout time.Duration

// JetStream Raft election timeouts used by embedded clustered servers:
// still 2.5 missed heartbeats at the least, so a loaded Mac does not
// trigger spurious elections.
const (
	jsMinElectionTimeout = 2500 * time.Millisecond
	jsMaxElectionTimeout = 5 * time.Second
)

var tuneRaftOnce sync.Once

// tuneJetStreamRaft shortens nats-server's election timeouts. It must run
// before the first server starts: the variables are read unsynchronised
// by running servers, and they are process-wide.
func tuneJetStreamRaft() {
	tuneRaftOnce.Do(func() {
		natsMinElectionTimeout = jsMinElectionTimeout
		natsMaxElectionTimeout = jsMaxElectionTimeout
	})
}
