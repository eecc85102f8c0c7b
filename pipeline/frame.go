// Package pipeline runs a model too big for one worker as a chain of stages
// (engine.Model.ForwardStage). It carries the batches from one stage's worker
// to the next: length-prefixed frames of a batch's sequences and hidden
// states over TCP with mutual TLS against the cluster CA
// (cluster.Secret.NodeTLS), one long-lived connection per stage boundary,
// the last stage's leading back to the first; it places the stages (Place,
// place.go): workers' free memory → contiguous layer ranges; and it runs
// them (server.go, member.go, head.go): a worker's Server takes its
// neighbours' connections, a Member is its stage of a Plan, and stage 0's
// Head serves the model's jobs with a runner whose forward passes go round
// the stages (docs/engine.md, "Pipeline execution").
//
// Why not NATS, which carries everything else: a hidden-state frame is large
// (a 512-token prefill chunk of a 4096-wide model is 8 MiB, past NATS' 1 MiB
// default payload and near its 64 MiB ceiling) and goes to exactly one peer,
// so the broker adds a second hop, a copy through the server and its
// payload limit for nothing; bench_test.go measures both (the figures are in
// docs/engine.md, "Pipeline stages").
//
// Hidden states travel as float32 by default: the activations' own
// precision, so a pipeline computes the single-process logits bit for bit.
// F16 halves the bytes at the price of that guarantee (it rounds the
// residual stream at every boundary).
package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"

	"github.com/macpool/macpool/engine/tensor"
)

// Encoding is how a frame stores its hidden values.
type Encoding uint8

const (
	// F32 is exact: IEEE float32, little endian.
	F32 Encoding = 0
	// F16 is IEEE half precision, little endian (rounded to nearest even;
	// not bit-exact with the single-process model).
	F16 Encoding = 1
)

func (e Encoding) String() string {
	switch e {
	case F32:
		return "f32"
	case F16:
		return "f16"
	}
	return fmt.Sprintf("encoding(%d)", uint8(e))
}

func (e Encoding) size() int {
	if e == F16 {
		return 2
	}
	return 4
}

// Seq is one sequence of a frame's batch, as engine.Seq needs it on the
// receiving stage: its tokens are rows [Row, Row+len(Tokens)) of Hidden, in
// order.
type Seq struct {
	// ID names the sequence on both ends of the connection (the receiver
	// finds its cache by it).
	ID uint64
	// Pos is the position of the first token: the length the receiver's
	// cache must have, which catches a stage out of step.
	Pos       int
	PromptEnd int
	AllLogits bool
	Greedy    bool
	// Sample (a data frame): the last stage draws the sequence's next
	// token with its sampler (the frame's Payload carries the parameters)
	// and returns only the id.
	Sample bool
	// Snapshot (a data frame): after this pass every stage saves the
	// sequence's recurrent state (engine.Cache.SaveSnapshot), as the head
	// does, so that the prefix cache can resume there on every stage.
	Snapshot bool
	// Logits (a result frame): the sequence's row of Hidden holds its
	// logits (an Embed sequence: its embedding, the first HiddenSize
	// values of the row); otherwise Tokens[0] is its next token.
	Logits bool
	// Embed (a data frame): the last stage returns the final-normed hidden
	// state of the sequence's last token instead of logits (an embedding
	// request on a pipelined model; engine.Model.EmbedStage).
	Embed  bool
	Tokens []int
}

// Frame is one batch crossing a stage boundary: the sequences and the
// hidden states of all their tokens, [Rows × Cols] row-major with Rows the
// sum of len(Tokens). A frame with Cols 0 carries tokens only (the last
// stage's sampled tokens going back to the first).
type Frame struct {
	// Kind says what the frame is: a batch's hidden states (Data, the
	// zero value) or one of the pipeline's control messages (member.go).
	Kind Kind
	// Batch identifies the pass (the sender numbers them); a reply or an
	// error names it.
	Batch    uint64
	Seqs     []Seq
	Rows     int
	Cols     int
	Encoding Encoding
	Hidden   []float32
	// Payload is opaque bytes for control messages (a hello's JSON, an
	// error's text, a data frame's sampler parameters).
	Payload []byte
}

// Kind is the type of a frame.
type Kind uint16

const (
	// Data is a batch going down the chain: sequences and the hidden
	// states of all their tokens (Rows = the sum of len(Tokens)).
	Data Kind = iota
	// Hello is a connection's first frame: Payload names the pipeline and
	// the stages it links (JSON).
	Hello
	// Result goes from the last stage to the head: per sequence its next
	// token, or (Seq.Logits) its logits as a row of Hidden.
	Result
	// Attach asks every stage to attach the longest cached prefix of one
	// sequence's tokens, at most Seqs[0].Pos positions (each stage lowers
	// Pos to what it attached); the last stage answers with an Attached.
	Attach
	// Attached is the answer to an Attach: Seqs[0].Pos positions, what
	// every stage now holds at least.
	Attached
	// Forget tells every stage that the sequences ended: their caches are
	// freed.
	Forget
	// Failed is a stage's error for batch Batch (Payload: the message),
	// passed on to the head.
	Failed
	// Ping is a connection's heartbeat (no content): Conn.Ping sends it
	// while the link is idle and Conn.Recv skips it, so that a silent
	// peer is told from an idle one (Config.PeerTimeout).
	Ping
	numKinds
)

func (k Kind) String() string {
	if k < numKinds {
		return [...]string{"data", "hello", "result", "attach", "attached", "forget", "failed", "ping"}[k]
	}
	return fmt.Sprintf("kind(%d)", uint16(k))
}

// rowsOf is the rows a frame of kind k with seqs has: a result's logits
// rows, every other kind's tokens.
func rowsOf(k Kind, seqs []Seq) int {
	n := 0
	for _, s := range seqs {
		switch {
		case k != Result:
			n += len(s.Tokens)
		case s.Logits:
			n++
		}
	}
	return n
}

// Wire format (little endian), after a u32 length of everything that
// follows:
//
//	u8 version (3) | u8 encoding | u16 kind | u64 batch | u32 seqs | u32 rows | u32 cols | u32 meta bytes | u32 payload bytes
//	per sequence: u64 id | u32 pos | u32 prompt end | u8 flags (1 all logits, 2 greedy, 4 sample, 8 logits, 16 snapshot, 32 embed) | u32 n | n × u32 token
//	payload
//	rows × cols values (4 or 2 bytes each)
//
// meta bytes is the size of the sequence records and the payload, so a
// reader can take them in one read and the values in another, straight
// into the float32 slice.
const (
	// version 3 added the Ping kind and the embed flag (32); a peer of
	// another version fails its first frame with ErrBadFrame.
	version      = 3
	headerSize   = 32
	seqHead      = 21
	flagAll      = 1
	flagGreedy   = 2
	flagSample   = 4
	flagLogits   = 8
	flagSnapshot = 16
	flagEmbed    = 32
	// maxCount bounds each count field before anything is allocated.
	maxCount = 1 << 28
)

// Errors of malformed frames (wrapped with details).
var (
	ErrFrameTooLarge = errors.New("pipeline: frame too large")
	ErrBadFrame      = errors.New("pipeline: malformed frame")
)

// check validates the frame's shape before it is sent.
func (f *Frame) check() error {
	for i, s := range f.Seqs {
		if len(s.Tokens) == 0 && f.Kind == Data {
			return fmt.Errorf("%w: sequence %d has no tokens", ErrBadFrame, i)
		}
		if s.Pos < 0 || s.PromptEnd < 0 || s.Pos > math.MaxUint32 || s.PromptEnd > math.MaxUint32 {
			return fmt.Errorf("%w: sequence %d: pos %d, prompt end %d out of range", ErrBadFrame, i, s.Pos, s.PromptEnd)
		}
		for _, t := range s.Tokens {
			if t < 0 || t > math.MaxUint32 {
				return fmt.Errorf("%w: sequence %d: token %d out of range", ErrBadFrame, i, t)
			}
		}
	}
	n := rowsOf(f.Kind, f.Seqs)
	switch {
	case f.Kind >= numKinds:
		return fmt.Errorf("%w: unknown %v", ErrBadFrame, f.Kind)
	case f.Encoding != F32 && f.Encoding != F16:
		return fmt.Errorf("%w: unknown %v", ErrBadFrame, f.Encoding)
	case f.Rows != n:
		return fmt.Errorf("%w: %d rows, the %v frame's sequences make %d", ErrBadFrame, f.Rows, f.Kind, n)
	case len(f.Payload) > maxCount:
		return fmt.Errorf("%w: payload of %d bytes", ErrBadFrame, len(f.Payload))
	case f.Cols < 0 || f.Rows > maxCount || f.Cols > maxCount:
		return fmt.Errorf("%w: shape [%d, %d] out of range", ErrBadFrame, f.Rows, f.Cols)
	case len(f.Hidden) != f.Rows*f.Cols:
		return fmt.Errorf("%w: %d hidden values, want %d × %d", ErrBadFrame, len(f.Hidden), f.Rows, f.Cols)
	}
	return nil
}

func (f *Frame) metaBytes() int {
	n := 0
	for _, s := range f.Seqs {
		n += seqHead + 4*len(s.Tokens)
	}
	return n + len(f.Payload)
}

// appendMeta appends the length prefix, header and sequence records.
func (f *Frame) appendMeta(b []byte) []byte {
	meta := f.metaBytes()
	total := headerSize + meta + f.Rows*f.Cols*f.Encoding.size()
	le := binary.LittleEndian
	b = le.AppendUint32(b, uint32(total))
	b = append(b, version, byte(f.Encoding))
	b = le.AppendUint16(b, uint16(f.Kind))
	b = le.AppendUint64(b, f.Batch)
	b = le.AppendUint32(b, uint32(len(f.Seqs)))
	b = le.AppendUint32(b, uint32(f.Rows))
	b = le.AppendUint32(b, uint32(f.Cols))
	b = le.AppendUint32(b, uint32(meta))
	b = le.AppendUint32(b, uint32(len(f.Payload)))
	for _, s := range f.Seqs {
		b = le.AppendUint64(b, s.ID)
		b = le.AppendUint32(b, uint32(s.Pos))
		b = le.AppendUint32(b, uint32(s.PromptEnd))
		var fl byte
		if s.AllLogits {
			fl |= flagAll
		}
		if s.Greedy {
			fl |= flagGreedy
		}
		if s.Sample {
			fl |= flagSample
		}
		if s.Logits {
			fl |= flagLogits
		}
		if s.Snapshot {
			fl |= flagSnapshot
		}
		if s.Embed {
			fl |= flagEmbed
		}
		b = append(b, fl)
		b = le.AppendUint32(b, uint32(len(s.Tokens)))
		for _, t := range s.Tokens {
			b = le.AppendUint32(b, uint32(t))
		}
	}
	return append(b, f.Payload...)
}

// nativeLE says whether float32 slices can be sent as their memory.
var nativeLE = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// f32Bytes views v's memory as bytes (little-endian hosts only).
func f32Bytes(v []float32) []byte {
	if len(v) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))
}

// writeFrame writes f to w, using buf (returned, possibly grown) for the
// header and, where the host cannot send its float32 memory as is, the
// values.
func writeFrame(w io.Writer, f *Frame, buf []byte) ([]byte, error) {
	if err := f.check(); err != nil {
		return buf, err
	}
	buf = f.appendMeta(buf[:0])
	if f.Encoding == F32 && nativeLE {
		if _, err := w.Write(buf); err != nil {
			return buf, err
		}
		_, err := w.Write(f32Bytes(f.Hidden))
		return buf, err
	}
	le := binary.LittleEndian
	for _, v := range f.Hidden {
		if f.Encoding == F16 {
			buf = le.AppendUint16(buf, tensor.F32ToF16(v))
		} else {
			buf = le.AppendUint32(buf, math.Float32bits(v))
		}
	}
	_, err := w.Write(buf)
	return buf, err
}

// readFrame reads one frame from r into f, reusing f's slices; buf is
// scratch (returned, possibly grown). max bounds the frame's length.
func readFrame(r io.Reader, f *Frame, buf []byte, max int) ([]byte, error) {
	var pre [4 + headerSize]byte
	if _, err := io.ReadFull(r, pre[:4]); err != nil {
		return buf, err // io.EOF: the peer closed between frames
	}
	le := binary.LittleEndian
	total := int(le.Uint32(pre[:4]))
	if total > max {
		return buf, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, total, max)
	}
	if total < headerSize {
		return buf, fmt.Errorf("%w: %d bytes, shorter than the header", ErrBadFrame, total)
	}
	if _, err := io.ReadFull(r, pre[4:]); err != nil {
		return buf, unexpected(err)
	}
	h := pre[4:]
	if h[0] != version {
		return buf, fmt.Errorf("%w: version %d, want %d", ErrBadFrame, h[0], version)
	}
	enc := Encoding(h[1])
	if enc != F32 && enc != F16 {
		return buf, fmt.Errorf("%w: unknown %v", ErrBadFrame, enc)
	}
	kind := Kind(le.Uint16(h[2:]))
	if kind >= numKinds {
		return buf, fmt.Errorf("%w: unknown %v", ErrBadFrame, kind)
	}
	nseq, rows, cols, meta, pay := int(le.Uint32(h[12:])), int(le.Uint32(h[16:])), int(le.Uint32(h[20:])), int(le.Uint32(h[24:])), int(le.Uint32(h[28:]))
	if nseq > maxCount || rows > maxCount || cols > maxCount || pay > maxCount || meta > total-headerSize ||
		meta < nseq*seqHead+pay || headerSize+meta+rows*cols*enc.size() != total {
		return buf, fmt.Errorf("%w: %d sequences, shape [%d, %d], %d meta bytes do not make %d bytes", ErrBadFrame, nseq, rows, cols, meta, total)
	}
	if cap(buf) < meta {
		buf = make([]byte, meta)
	}
	buf = buf[:meta]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf, unexpected(err)
	}
	f.Kind, f.Batch, f.Encoding, f.Rows, f.Cols = kind, le.Uint64(h[4:]), enc, rows, cols
	f.Seqs = f.Seqs[:0]
	recs := meta - pay // the sequence records; the payload follows
	// One token slice for the whole frame, cut per sequence.
	toks := make([]int, 0, (recs-nseq*seqHead)/4)
	off := 0
	for range nseq {
		if off+seqHead > recs {
			return buf, fmt.Errorf("%w: sequence records overrun %d bytes", ErrBadFrame, recs)
		}
		rec := buf[off:]
		s := Seq{ID: le.Uint64(rec), Pos: int(le.Uint32(rec[8:])), PromptEnd: int(le.Uint32(rec[12:]))}
		fl := rec[16]
		s.AllLogits, s.Greedy, s.Sample = fl&flagAll != 0, fl&flagGreedy != 0, fl&flagSample != 0
		s.Logits, s.Snapshot, s.Embed = fl&flagLogits != 0, fl&flagSnapshot != 0, fl&flagEmbed != 0
		nt := int(le.Uint32(rec[17:]))
		off += seqHead
		if (nt == 0 && kind == Data) || nt > (recs-off)/4 {
			return buf, fmt.Errorf("%w: sequence of %d tokens in %d record bytes left", ErrBadFrame, nt, recs-off)
		}
		start := len(toks)
		for j := range nt {
			toks = append(toks, int(le.Uint32(buf[off+4*j:])))
		}
		off += 4 * nt
		s.Tokens = toks[start:len(toks):len(toks)]
		f.Seqs = append(f.Seqs, s)
	}
	if n := rowsOf(kind, f.Seqs); off != recs || n != rows {
		return buf, fmt.Errorf("%w: sequences make %d rows in %d of %d record bytes, frame has %d rows", ErrBadFrame, n, off, recs, rows)
	}
	f.Payload = append(f.Payload[:0], buf[recs:meta]...)
	nv := rows * cols
	if cap(f.Hidden) < nv {
		f.Hidden = make([]float32, nv)
	}
	f.Hidden = f.Hidden[:nv]
	if enc == F32 && nativeLE {
		_, err := io.ReadFull(r, f32Bytes(f.Hidden))
		return buf, unexpected(err)
	}
	size := enc.size()
	if cap(buf) < nv*size {
		buf = make([]byte, nv*size)
	}
	buf = buf[:nv*size]
	if _, err := io.ReadFull(r, buf); err != nil {
		return buf, unexpected(err)
	}
	for i := range f.Hidden {
		if enc == F16 {
			f.Hidden[i] = tensor.F16ToF32(le.Uint16(buf[2*i:]))
		} else {
			f.Hidden[i] = math.Float32frombits(le.Uint32(buf[4*i:]))
		}
	}
	return buf, nil
}

// unexpected turns an EOF inside a frame into io.ErrUnexpectedEOF.
func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
