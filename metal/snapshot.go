package metal

// Recurrent-state snapshots (engine.Snapshotter) of Gated DeltaNet states,
// for prefix caching of hybrid models on the GPU (see engine/paged.go).

import (
	"fmt"
	"runtime"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/metal/gpu"
)

var _ engine.Snapshotter = (*dnState)(nil)

// dnSnapshot is a device copy of a DeltaNet state (no buffers when the
// state was fresh: all zero). Its buffers are freed (after the next sync)
// once the engine drops the snapshot: engine.LayerSnapshot has no Free.
type dnSnapshot struct {
	conv, rule gpu.Buffer
	bytes      int64
	n          int
}

func (s *dnSnapshot) Len() int     { return s.n }
func (s *dnSnapshot) Bytes() int64 { return s.bytes }

// copyBuffer copies all of src to dst (same size) in command order.
func (b *Backend) copyBuffer(dst, src gpu.Buffer) {
	n := src.Len() / 4
	b.copy2d(dst, n, 0, 0, src, n, 0, 0, 1, n)
}

// Snapshot copies the current state on the GPU (engine.Snapshotter).
func (s *dnState) Snapshot() engine.LayerSnapshot {
	sn := &dnSnapshot{n: s.n}
	if s.fresh {
		return sn
	}
	b := s.b
	conv, err := b.dev.NewBuffer(s.conv[s.cur].Len())
	if err != nil {
		panic(fmt.Sprintf("metal: deltanet snapshot: %v", err))
	}
	rule, err := b.dev.NewBuffer(s.rule[s.cur].Len())
	if err != nil {
		conv.Release()
		panic(fmt.Sprintf("metal: deltanet snapshot: %v", err))
	}
	b.copyBuffer(conv, s.conv[s.cur])
	b.copyBuffer(rule, s.rule[s.cur])
	sn.conv, sn.rule, sn.bytes = conv, rule, int64(conv.Len()+rule.Len())
	runtime.AddCleanup(sn, func(bufs [2]gpu.Buffer) { b.retire(bufs[0], bufs[1]) }, [2]gpu.Buffer{conv, rule})
	return sn
}

// Restore replaces the state of an empty cache with a snapshot of a state
// of the same shape (engine.Snapshotter).
func (s *dnState) Restore(ls engine.LayerSnapshot) error {
	sn, ok := ls.(*dnSnapshot)
	if !ok || (sn.conv != nil && (sn.conv.Len() != s.conv[s.cur].Len() || sn.rule.Len() != s.rule[s.cur].Len())) {
		return fmt.Errorf("restore recurrent state: snapshot %T does not fit", ls)
	}
	if sn.conv == nil {
		s.fresh = true
	} else {
		s.b.copyBuffer(s.conv[s.cur], sn.conv)
		s.b.copyBuffer(s.rule[s.cur], sn.rule)
		s.fresh = false
	}
	s.n, s.prevN = sn.n, -1
	runtime.KeepAlive(sn) // its buffers are read by the copies above, before any cleanup's sync
	return nil
}
