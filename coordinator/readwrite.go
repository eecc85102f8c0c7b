package coordinator

import (
	"context"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
	"github.com/nats-io/nats.go"
)

// Read-your-writes. A write on a follower is forwarded to the leader, which
// answers once its own FSM applied the entry; the follower applies it only
// after it learns the new commit index from a later AppendEntries. A read
// on the follower right after its write (`macpool keys create` then `keys
// list`) missed it for up to a heartbeat round, ~2 s with LAN timings. So
// the leader answers with the entry's log index (header raftIndexHeader;
// older followers ignore it) and the follower's write returns only once its
// FSM applied that index.

// raftIndexHeader carries the log index of a forwarded write in the leader's
// answer on cluster.SubjectRaftApply.
const raftIndexHeader = "Macpool-Raft-Index"

// maxApplyWait bounds how long a forwarded write waits for the local FSM;
// past it the write has still succeeded (on the leader) and returns.
const maxApplyWait = 5 * time.Second

// applyIndexed applies data on the leader and returns its log index.
func (c *Coordinator) applyIndexed(data []byte) (uint64, error) {
	f := c.raft.Apply(data, 5*time.Second)
	if err := f.Error(); err != nil {
		return 0, err
	}
	if err, ok := f.Response().(error); ok && err != nil {
		return 0, err
	}
	return f.Index(), nil
}

// answerApply serves one forwarded write (leader only).
func (c *Coordinator) answerApply(m *nats.Msg) {
	idx, err := c.applyIndexed(m.Data)
	resp := nats.NewMsg(m.Reply)
	if err != nil {
		resp.Data = []byte(err.Error())
	} else {
		resp.Header.Set(raftIndexHeader, strconv.FormatUint(idx, 10))
	}
	m.RespondMsg(resp)
}

// awaitApplied waits until the local FSM applied the index in a leader's
// answer (if it carries one), bounded by ctx and maxApplyWait.
func (c *Coordinator) awaitApplied(ctx context.Context, resp *nats.Msg) {
	idx, err := strconv.ParseUint(resp.Header.Get(raftIndexHeader), 10, 64)
	if err != nil || idx == 0 {
		return
	}
	deadline := time.Now().Add(maxApplyWait)
	// The FSM's own index: raft's AppliedIndex runs ahead of it. After a
	// snapshot restore the FSM index lags until the next entry; the wait
	// then ends at maxApplyWait at worst.
	for c.fsm.applied.Load() < idx && c.raft.State() != raft.Shutdown {
		if ctx.Err() != nil || time.Now().After(deadline) {
			c.log.Debug("write applied on the leader, not yet here", "index", idx, "applied", c.fsm.applied.Load())
			return
		}
		time.Sleep(2 * time.Millisecond) // raft offers no apply notification for followers
	}
}
