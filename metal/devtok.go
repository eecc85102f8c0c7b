package metal

import (
	"encoding/binary"
	"fmt"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/metal/gpu"
)

var _ engine.DeviceTokenOps = (*Backend)(nil)

// tokSlots is the ring of device token slots: two decode steps in flight
// (engine.DecodeGreedy) and one being read, plus one spare.
const tokSlots = 4

// tokSlot is one device token slot: greedy ids written by argmax and read
// by the next step's embed_ref, and by the host after seq has completed.
type tokSlot struct {
	buf  gpu.Buffer
	rows int // ids the last ArgmaxTokens wrote
	cols int // the logits' width (an id ≥ cols is the NaN marker)
	seq  int // the command buffer that writes them (waitThrough)
}

// TokenSlots implements engine.DeviceTokenOps.
func (b *Backend) TokenSlots() int { return tokSlots }

// ArgmaxTokens implements engine.DeviceTokenOps: the argmax kernel writes
// into the slot's buffer and everything encoded so far is committed
// without waiting (the step is in flight; WaitTokens waits for exactly
// that command buffer and those before it).
func (b *Backend) ArgmaxTokens(t engine.Tensor, slot int) {
	x := tt(t)
	if slot < 0 || slot >= tokSlots || x.cols == 0 || x.rows >= 1<<16 {
		panic(fmt.Sprintf("metal: argmax of [%d, %d] into token slot %d of %d", x.rows, x.cols, slot, tokSlots))
	}
	s := &b.tok[slot]
	// A slot is rewritten only after the step that read it was encoded
	// before (serial queue): the kernel's write follows those reads.
	out := b.scratchBuf(&s.buf, 4*max(x.rows, 1))
	if x.rows > 0 {
		b.dispatch("argmax", [3]int{x.rows, 1, 1}, [3]int{32, 1, 1}, buf(out), buf(x.buf), gpu32(x.cols))
	}
	b.commit()
	s.rows, s.cols, s.seq = x.rows, x.cols, b.seq
}

// WaitTokens implements engine.DeviceTokenOps: it waits for the command
// buffers up to the one that wrote the slot (later ones stay in flight)
// and reads the ids. The host reads the slot's buffer only after the
// command buffer writing it completed: on a Mac that is the rule for
// shared memory; the emulator runs a command buffer no earlier than a
// wait on it, so an early read would see stale ids (TestDecodeGreedyPipelined).
func (b *Backend) WaitTokens(slot int, dst []int) error {
	if slot < 0 || slot >= tokSlots {
		panic(fmt.Sprintf("metal: token slot %d of %d", slot, tokSlots))
	}
	s := &b.tok[slot]
	if len(dst) != s.rows {
		panic(fmt.Sprintf("metal: read %d ids of token slot %d holding %d", len(dst), slot, s.rows))
	}
	if err := b.waitThrough(s.seq); err != nil {
		return err
	}
	if s.rows == 0 {
		return nil
	}
	o := s.buf.Bytes()
	for i := range dst {
		dst[i] = int(int32(binary.LittleEndian.Uint32(o[4*i:])))
		if dst[i] < 0 || dst[i] >= s.cols {
			return fmt.Errorf("%w: row %d (argmax %d of %d columns)", ErrNaNLogits, i, dst[i], s.cols)
		}
	}
	return nil
}

// embedRef is Embed of ids some of which are engine.DeviceToken ids (all
// of one slot): embed_ref reads those from the slot's buffer on the device.
func (b *Backend) embedRef(d *Tensor, w *Weight, ids []int) {
	slot := -1
	refs := make([]int, len(ids))
	for i, id := range ids {
		sl, row, dev := engine.DeviceTokenSlot(id)
		switch {
		case !dev:
			if id >= w.rows {
				panic(fmt.Sprintf("metal: embed id %d out of range [0,%d)", id, w.rows))
			}
			refs[i] = id
			continue
		case sl >= tokSlots || slot >= 0 && sl != slot || row >= b.tok[sl].rows:
			panic(fmt.Sprintf("metal: embed device token (slot %d, row %d): slots %d, one per batch", sl, row, tokSlots))
		}
		slot, refs[i] = sl, -1-row
	}
	if w.cols%8 != 0 {
		panic(fmt.Sprintf("metal: embed rows of %d values (need a multiple of 8)", w.cols))
	}
	if b.pipes["embed_ref"] == nil {
		panic(fmt.Sprintf("metal: %v", b.missing["embed_ref"]))
	}
	args := append([]gpu.Arg{buf(d.buf)}, b.weightArgs(w)...)
	args = append(args, b.hostArg(ints32(refs)), buf(b.tok[slot].buf), gpu.Arg{Bytes: pack(len(ids), w.cols, w.rows)})
	b.dispatch("embed_ref", [3]int{ceil(w.cols/8, 64), len(ids), 1}, [3]int{64, 1, 1}, args...)
}
