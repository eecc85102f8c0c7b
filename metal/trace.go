package metal

import (
	"encoding/binary"

	"github.com/macpool/macpool/metal/gpu"
)

// DispatchRecord is one dispatch of a traced forward pass: the kernel, its
// grid, and the device memory it must read or write (an estimate from its
// arguments, see dispatchBytes).
type DispatchRecord struct {
	Kernel  string
	Groups  [3]int
	Threads [3]int
	Bytes   int64
	// CommandBuffer is the index, within the trace, of the command buffer
	// the dispatch went into.
	CommandBuffer int
}

// StartTrace records every dispatch from now on (StopTrace returns them).
func (b *Backend) StartTrace() {
	b.trace, b.tracing, b.traceCB = nil, true, 0
}

// StopTrace ends recording and returns the dispatches since StartTrace.
func (b *Backend) StopTrace() []DispatchRecord {
	b.flush() // ops held back for fusion are encoded now, so they count
	t := b.trace
	b.trace, b.tracing = nil, false
	return t
}

func (b *Backend) record(name string, groups, threads [3]int, args []gpu.Arg) {
	b.trace = append(b.trace, DispatchRecord{Kernel: name, Groups: groups, Threads: threads,
		Bytes: dispatchBytes(name, groups, threads, args), CommandBuffer: b.traceCB})
}

// u32 reads field i of an inline argument (0 if absent).
func u32(a gpu.Arg, i int) int64 {
	if len(a.Bytes) < 4*(i+1) {
		return 0
	}
	return int64(binary.LittleEndian.Uint32(a.Bytes[4*i:]))
}

// weightBytes is what a matrix of WeightParams w (pack(fmt, rows, cols,
// rowBytes, bits, group, sfmt, bfmt)) occupies, rows n of it.
func weightBytes(w gpu.Arg, n int64) int64 {
	bytes := n * u32(w, 3)
	if u32(w, 0) == fmtMLX && u32(w, 5) > 0 {
		scalar := func(f int64) int64 {
			if f == fmtF32 {
				return 4
			}
			return 2
		}
		groups := n * u32(w, 2) / u32(w, 5)
		bytes += groups * (scalar(u32(w, 6)) + scalar(u32(w, 7)))
	}
	return bytes
}

// rowPositions sums position+1 over the rows [r0, r0+n) of a row table
// (pairs of int32: position, block-table start; position < 0: skipped),
// inline or in a buffer.
func rowPositions(a gpu.Arg, r0, n int) int64 {
	b := a.Bytes
	if b == nil && a.Buf != nil {
		b = a.Buf.Bytes()[a.Off:]
	}
	var s int64
	for r := r0; r < r0+n && 8*r+4 <= len(b); r++ {
		if p := int32(binary.LittleEndian.Uint32(b[8*r:])); p >= 0 {
			s += int64(p) + 1
		}
	}
	return s
}

// dispatchBytes estimates the device memory a dispatch reads and writes:
// the weights a matrix kernel streams (for the gathered MoE matmul: every
// row's expert, distinct in a decode step), the K/V rows attention reads,
// the recurrent state DeltaNet reads and writes, and for other kernels
// their buffer arguments up to 32 bytes per thread (activations; kernels
// touch a few values per thread).
func dispatchBytes(name string, g, t [3]int, args []gpu.Arg) int64 {
	arg := func(i int) gpu.Arg {
		if i < len(args) {
			return args[i]
		}
		return gpu.Arg{}
	}
	switch name {
	case "matmul": // y, x, W, S, B, WeightParams, bias, (M, N, K, bias)
		m, n, k := u32(arg(7), 0), u32(arg(7), 1), u32(arg(7), 2)
		return weightBytes(arg(5), n) + 4*m*(n+k)
	case "rmsnorm_matmul": // matmul's arguments, h, norm weight, (rows, cols, dim, eps, offset): + the norm's weight and h
		m, n, k := u32(arg(7), 0), u32(arg(7), 1), u32(arg(7), 2)
		return weightBytes(arg(5), n) + 4*m*(n+k) + 4*k + 4*m*k
	case "matmul_multi": // d0-3, x, (W, S, B)×4, WP×4, bias×4, (M, K, count, norm, N×4, bias×4), h, nw, np
		m, k, count, norm := u32(arg(25), 0), u32(arg(25), 1), u32(arg(25), 2), u32(arg(25), 3)
		bytes := 4 * m * k
		for j := range int(min(count, 4)) {
			n := u32(arg(25), 4+j)
			bytes += weightBytes(arg(17+j), n) + 4*m*n
		}
		if norm != 0 {
			bytes += 4*k + 4*m*k
		}
		return bytes
	case "matmul_add": // matmul's arguments, res, a, b: + the residual add's three rows
		m, n, k := u32(arg(7), 0), u32(arg(7), 1), u32(arg(7), 2)
		return weightBytes(arg(5), n) + 4*m*(n+k) + 12*m*n
	case "embed_ref": // out, W, S, B, WeightParams, ids, tok, (n, cols, vocab)
		n, cols := u32(arg(7), 0), u32(arg(7), 1)
		return weightBytes(arg(4), n) + 4*n*cols + 4*n
	case "matmul_gate_up": // y, x, GW, GS, GB, UW, US, UB, WeightParams, (M, N, K, 0)
		m, n, k := u32(arg(9), 0), u32(arg(9), 1), u32(arg(9), 2)
		return 2*weightBytes(arg(8), n) + 4*m*(n+k)
	case "embed": // out, W, S, B, WeightParams, ids, (n, cols)
		n, cols := u32(arg(6), 0), u32(arg(6), 1)
		return weightBytes(arg(4), n) + 4*n*cols
	case "moe_matmul": // y, x, table, WeightParams, idx, (R, N, Kd, K, perRow)
		r, n, kd := u32(arg(5), 0), u32(arg(5), 1), u32(arg(5), 2)
		return r*weightBytes(arg(3), n) + 4*r*(n+kd)
	case "moe_gate_up": // y, x, gate table, up table, WeightParams, idx, (R, N, Kd, K, perRow)
		r, n, kd := u32(arg(6), 0), u32(arg(6), 1), u32(arg(6), 2)
		return 2*r*weightBytes(arg(4), n) + 4*r*(n+kd)
	case "moe_route_gate_up": // moe_gate_up's, wts, logits, (T, E, K, normalize), sy, shared gate, up, WeightParams, (si, shared)
		r, n, kd := u32(arg(6), 0), u32(arg(6), 1), u32(arg(6), 2)
		t, e, k := u32(arg(9), 0), u32(arg(9), 1), u32(arg(9), 2)
		bytes := 2*r*weightBytes(arg(4), n) + 4*r*(n+kd) + 4*t*e + 8*t*k
		if si := u32(arg(18), 0); u32(arg(18), 1) != 0 { // + the shared expert's gate/up
			bytes += 2*weightBytes(arg(17), si) + 4*t*(si+kd)
		}
		return bytes
	case "moe_down_combine": // dst, h, table, WeightParams, idx, wts, hs, SW, SS, SB, sWP, x, GW, GS, GB, gWP, (T, H, K, inter, shared, si)
		t, h, k, inter, shared, si := u32(arg(16), 0), u32(arg(16), 1), u32(arg(16), 2), u32(arg(16), 3), u32(arg(16), 4), u32(arg(16), 5)
		bytes := t*k*weightBytes(arg(3), h) + 4*t*(k*inter+h)
		if shared != 0 {
			bytes += weightBytes(arg(10), h) + weightBytes(arg(15), 1) + 4*t*(si+h)
		}
		if u32(arg(16), 6) != 0 { // the residual add as epilogue
			bytes += 12 * t * h
		}
		return bytes
	case "attention_paged_part": // part, q, k, v, ri, tab, (heads, kvh, hd, bs, scale, chunk, splits, row0)
		kvh, hd := u32(arg(6), 1), u32(arg(6), 2)
		return 8 * kvh * hd * rowPositions(arg(4), int(u32(arg(6), 7)), g[1])
	case "attention_paged": // dst, q, k, v, ri, tab, (heads, kvh, hd, bs, scale)
		kvh, hd := u32(arg(6), 1), u32(arg(6), 2)
		return 8 * kvh * hd * rowPositions(arg(4), 0, g[1])
	case "attention": // dst, q, k, v, (row, N, pos, heads, kvh, hd, scale)
		n, pos, kvh, hd := u32(arg(4), 1), u32(arg(4), 2), u32(arg(4), 4), u32(arg(4), 5)
		return 8 * kvh * hd * (n*pos + n*(n+1)/2)
	case "attention_gated": // attention's, gate: + sigmoid_mul's read of the gate
		n, pos, heads, kvh, hd := u32(arg(4), 1), u32(arg(4), 2), u32(arg(4), 3), u32(arg(4), 4), u32(arg(4), 5)
		return 8*kvh*hd*(n*pos+n*(n+1)/2) + 4*n*heads*hd
	case "dn_step": // ..., (row, N, C, K, fresh, nk, nv, dk, dv, eps): both states read and written, conv weights, x, b, a, z in, o out
		p := arg(len(args) - 1)
		n, c, k, nv, kd, vd := u32(p, 1), u32(p, 2), u32(p, 3), u32(p, 6), u32(p, 7), u32(p, 8)
		return 2*4*nv*kd*vd + 2*4*(k-1)*c + 4*c*k + 4*n*(c+2*nv+2*nv*vd) + 4*vd + 8*nv
	case "dn_rule": // ..., (row, N, kh, nv, kd, vd, C, fresh)
		p := arg(len(args) - 1)
		n, nv, kd, vd, c := u32(p, 1), u32(p, 3), u32(p, 4), u32(p, 5), u32(p, 6)
		return 2*4*nv*kd*vd + 4*n*(c+2*nv+nv*vd)
	}
	threads := int64(g[0]*g[1]*g[2]) * int64(t[0]*t[1]*t[2])
	var s int64
	for _, a := range args {
		if a.Buf != nil && a.Bytes == nil {
			s += min(int64(a.Buf.Len()-a.Off+a.Buf.Offset()), 32*threads)
		}
	}
	return s
}
