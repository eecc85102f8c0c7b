package cpu

import (
	"fmt"
	"math"
	"slices"

	"github.com/macpool/macpool/engine"
	"github.com/macpool/macpool/engine/cpu/kernels"
)

// elemGrain is the smallest number of rows worth a parallel split for
// row-wise element ops, given the row length.
func elemGrain(cols int) int { return max(1, 16384/max(cols, 1)) }

func sameShape(op string, ts ...*Tensor) {
	for _, t := range ts[1:] {
		if t.rows != ts[0].rows || t.cols != ts[0].cols {
			panic(fmt.Sprintf("cpu: %s: shape [%d, %d] vs [%d, %d]", op, t.rows, t.cols, ts[0].rows, ts[0].cols))
		}
	}
}

// Embed copies (decoding) rows of the table.
func (b *Backend) Embed(dst engine.Tensor, table engine.Weight, ids []int) {
	d, w := tt(dst), ww(table)
	if d.rows != len(ids) || d.cols != w.cols {
		panic(fmt.Sprintf("cpu: embed %d ids of width %d into [%d, %d]", len(ids), w.cols, d.rows, d.cols))
	}
	for _, id := range ids {
		if id < 0 || id >= w.rows {
			panic(fmt.Sprintf("cpu: embed id %d out of range [0,%d)", id, w.rows))
		}
	}
	b.parallel(len(ids), elemGrain(d.cols), func(lo, hi, _ int) {
		for r := lo; r < hi; r++ {
			out := d.row(r)
			src := w.rowF32(ids[r], out)
			if &src[0] != &out[0] {
				copy(out, src)
			}
		}
	})
}

// RMSNorm normalises chunks of p.Dim values (sum of squares in float64).
func (b *Backend) RMSNorm(dst, x engine.Tensor, w engine.Weight, p engine.NormParams) {
	d, s, wt := tt(dst), tt(x), ww(w)
	sameShape("rmsnorm", d, s)
	if p.Dim <= 0 || s.cols%p.Dim != 0 || wt.rows*wt.cols != p.Dim || wt.f32 == nil {
		panic(fmt.Sprintf("cpu: rmsnorm dim %d over %d columns with weight [%d, %d]", p.Dim, s.cols, wt.rows, wt.cols))
	}
	wv := wt.f32
	b.parallel(s.rows, elemGrain(s.cols), func(lo, hi, _ int) {
		for r := lo; r < hi; r++ {
			in, out := s.row(r), d.row(r)
			for c := 0; c < len(in); c += p.Dim {
				kernels.RMSNorm(out[c:c+p.Dim], in[c:c+p.Dim], wv, p.Eps, p.Offset)
			}
		}
	})
}

// AddRMSNorm sets x = x + h and then dst = RMSNorm(x) (every chunk of
// p.Dim values), row by row: the residual add and the norm that follows it
// in a transformer layer, with the bits of Add then RMSNorm. Separately
// the norm re-read every row of x from memory after the add had written it
// (a 512-token prefill's rows were spread over both cores' caches by the
// add's split); here each row is normed while it is in the core's L1.
// dst may be h.
func (b *Backend) AddRMSNorm(dst, x, h engine.Tensor, w engine.Weight, p engine.NormParams) {
	d, s, a, wt := tt(dst), tt(x), tt(h), ww(w)
	sameShape("addrmsnorm", d, s, a)
	if p.Dim <= 0 || s.cols%p.Dim != 0 || wt.rows*wt.cols != p.Dim || wt.f32 == nil || d == s {
		panic(fmt.Sprintf("cpu: addrmsnorm dim %d over %d columns with weight [%d, %d]", p.Dim, s.cols, wt.rows, wt.cols))
	}
	wv := wt.f32
	b.parallel(s.rows, elemGrain(s.cols), func(lo, hi, _ int) {
		for r := lo; r < hi; r++ {
			in, add, out := s.row(r), a.row(r), d.row(r)
			for i := range in {
				in[i] += add[i]
			}
			for c := 0; c < len(in); c += p.Dim {
				kernels.RMSNorm(out[c:c+p.Dim], in[c:c+p.Dim], wv, p.Eps, p.Offset)
			}
		}
	})
}

// Rope rotates the first RotaryDim values of every head, in the
// rotate_half layout. Angles are computed the way HF does (float32 inverse
// frequencies from p.Tables, float32 position×frequency product; cos and
// sin rounded to float32, then times the attention factor in float32) so
// long positions round the same way as the reference.
func (b *Backend) Rope(x engine.Tensor, pos []int, p engine.RopeParams) {
	t := tt(x)
	if len(pos) != t.rows || p.Heads*p.HeadDim != t.cols || p.RotaryDim <= 0 || p.RotaryDim > p.HeadDim || p.RotaryDim%2 != 0 {
		panic(fmt.Sprintf("cpu: rope %d heads × %d (rotary %d) over [%d, %d] with %d positions", p.Heads, p.HeadDim, p.RotaryDim, t.rows, t.cols, len(pos)))
	}
	invFreq, af := p.Tables()
	cos, sin := b.ropeTables(pos, invFreq, af)
	b.parallel(t.rows, elemGrain(t.cols), func(lo, hi, w int) {
		for r := lo; r < hi; r++ {
			ropeRow(t.row(r), cos, sin, r, p)
		}
	})
}

// ropeRow rotates row r's heads with the angles of ropeTables.
func ropeRow(row, cos, sin []float32, r int, p engine.RopeParams) {
	half := p.RotaryDim / 2
	cos, sin = cos[r*half:(r+1)*half], sin[r*half:(r+1)*half]
	for h := 0; h < p.Heads; h++ {
		v := row[h*p.HeadDim : h*p.HeadDim+p.RotaryDim]
		x1, x2 := v[:half], v[half:]
		for i := range half {
			a, c := x1[i], x2[i]
			x1[i] = a*cos[i] - c*sin[i]
			x2[i] = c*cos[i] + a*sin[i]
		}
	}
}

// RMSNormRope is RMSNorm(x, x, w, np) then Rope(x, pos, rp) (a Qwen3
// layer's q and k norms), row by row with the bits of the two ops: each
// row is rotated while it is in cache instead of in a second pass over
// the tensor.
func (b *Backend) RMSNormRope(x engine.Tensor, w engine.Weight, np engine.NormParams, pos []int, rp engine.RopeParams) {
	t, wt := tt(x), ww(w)
	if np.Dim <= 0 || t.cols%np.Dim != 0 || wt.rows*wt.cols != np.Dim || wt.f32 == nil {
		panic(fmt.Sprintf("cpu: rmsnorm dim %d over %d columns with weight [%d, %d]", np.Dim, t.cols, wt.rows, wt.cols))
	}
	if len(pos) != t.rows || rp.Heads*rp.HeadDim != t.cols || rp.RotaryDim <= 0 || rp.RotaryDim > rp.HeadDim || rp.RotaryDim%2 != 0 {
		panic(fmt.Sprintf("cpu: rope %d heads × %d (rotary %d) over [%d, %d] with %d positions", rp.Heads, rp.HeadDim, rp.RotaryDim, t.rows, t.cols, len(pos)))
	}
	invFreq, af := rp.Tables()
	cos, sin := b.ropeTables(pos, invFreq, af)
	wv := wt.f32
	b.parallel(t.rows, elemGrain(t.cols), func(lo, hi, _ int) {
		for r := lo; r < hi; r++ {
			row := t.row(r)
			for c := 0; c < len(row); c += np.Dim {
				kernels.RMSNorm(row[c:c+np.Dim], row[c:c+np.Dim], wv, np.Eps, np.Offset)
			}
			ropeRow(row, cos, sin, r, rp)
		}
	})
}

// ropeCache holds the cos and sin of the last Rope call's positions: a
// forward pass rotates q and k of every layer at the same positions, and
// computing the angles (math.Cos/Sin per position and frequency) for each
// of those calls was ~3% of a 512-token prefill. The key is the values
// (positions, inverse frequencies, attention factor), not the slices,
// which callers reuse and rebuild.
type ropeCache struct {
	pos      []int
	invFreq  []float32
	af       float32
	cos, sin []float32 // [len(pos), len(invFreq)]
}

// ropeTables returns cos and sin (times af) of pos[r]·invFreq[i] at
// r·len(invFreq)+i, rounded as HF does (see Rope).
func (b *Backend) ropeTables(pos []int, invFreq []float32, af float32) (cos, sin []float32) {
	c := &b.rope
	if c.af == af && slices.Equal(c.pos, pos) && slices.Equal(c.invFreq, invFreq) {
		return c.cos, c.sin
	}
	half := len(invFreq)
	c.pos, c.invFreq, c.af = append(c.pos[:0], pos...), append(c.invFreq[:0], invFreq...), af
	c.cos, c.sin = slices.Grow(c.cos[:0], len(pos)*half)[:len(pos)*half], slices.Grow(c.sin[:0], len(pos)*half)[:len(pos)*half]
	b.parallel(len(pos), max(1, 2048/max(half, 1)), func(lo, hi, _ int) {
		for r := lo; r < hi; r++ {
			fp := float32(pos[r])
			cos, sin := c.cos[r*half:(r+1)*half], c.sin[r*half:(r+1)*half]
			for i, f := range invFreq {
				a := float64(fp * f)
				cos[i] = float32(math.Cos(a)) * af
				sin[i] = float32(math.Sin(a)) * af
			}
		}
	})
	return c.cos, c.sin
}

// negExp sets dst[i] = exp(-x[i]) with the vectorised exp of
// engine/cpu/kernels (within 2 ulp of math.Exp) and returns dst.
func negExp(dst, x []float32) []float32 {
	kernels.Neg(dst, x)
	kernels.ExpSubF32(dst, 0)
	return dst
}

// SwiGLU sets dst = silu(gate) * up.
func (b *Backend) SwiGLU(dst, gate, up engine.Tensor) {
	d, g, u := tt(dst), tt(gate), tt(up)
	sameShape("swiglu", d, g, u)
	b.parallel(len(d.data), 16384, func(lo, hi, w int) {
		dd, gg, uu := d.data[lo:hi], g.data[lo:hi], u.data[lo:hi]
		// silu(x)·u = x/(1+exp(−x))·u, the division vectorised
		// (kernels.SiLUMul: the bits of the scalar loop).
		kernels.SiLUMul(dd, gg, uu, negExp(b.scratchBuf(w, hi-lo)[:hi-lo], gg))
	})
}

// SigmoidMul sets dst = x * sigmoid(gate).
func (b *Backend) SigmoidMul(dst, x, gate engine.Tensor) {
	d, s, g := tt(dst), tt(x), tt(gate)
	sameShape("sigmoidmul", d, s, g)
	b.parallel(len(d.data), 16384, func(lo, hi, w int) {
		dd, ss, gg := d.data[lo:hi], s.data[lo:hi], g.data[lo:hi]
		e := negExp(b.scratchBuf(w, hi-lo)[:hi-lo], gg)
		for i, v := range ss {
			dd[i] = v / (1 + e[i])
		}
	})
}

// Add sets dst = a + b.
func (b *Backend) Add(dst, a, c engine.Tensor) {
	d, x, y := tt(dst), tt(a), tt(c)
	sameShape("add", d, x, y)
	b.parallel(len(d.data), 65536, func(lo, hi, _ int) {
		dd, xx, yy := d.data[lo:hi], x.data[lo:hi], y.data[lo:hi]
		for i := range dd {
			dd[i] = xx[i] + yy[i]
		}
	})
}

// Copy copies a block of rows and columns.
func (b *Backend) Copy(dst engine.Tensor, dstRow, dstCol int, src engine.Tensor, srcRow, srcCol, rows, cols int) {
	d, s := tt(dst), tt(src)
	if rows < 0 || cols < 0 || dstRow < 0 || dstCol < 0 || srcRow < 0 || srcCol < 0 ||
		dstRow+rows > d.rows || dstCol+cols > d.cols || srcRow+rows > s.rows || srcCol+cols > s.cols {
		panic(fmt.Sprintf("cpu: copy [%d:+%d, %d:+%d] of [%d, %d] to (%d, %d) of [%d, %d]",
			srcRow, rows, srcCol, cols, s.rows, s.cols, dstRow, dstCol, d.rows, d.cols))
	}
	for r := 0; r < rows; r++ {
		copy(d.data[(dstRow+r)*d.cols+dstCol:][:cols], s.data[(srcRow+r)*s.cols+srcCol:][:cols])
	}
}

// Deinterleave splits src's rows [a_0 | b_0 | a_1 | b_1 | ...] into a and b.
func (b *Backend) Deinterleave(a, c, src engine.Tensor, chunk int) {
	da, db, s := tt(a), tt(c), tt(src)
	if chunk <= 0 || da.rows != s.rows || db.rows != s.rows || da.cols != db.cols || da.cols%chunk != 0 || s.cols != 2*da.cols || da == s || db == s || da == db {
		panic(fmt.Sprintf("cpu: deinterleave [%d, %d] in chunks of %d into [%d, %d] and [%d, %d]", s.rows, s.cols, chunk, da.rows, da.cols, db.rows, db.cols))
	}
	n := da.cols / chunk
	// On the workers: serially, a 512-token prefill's gated q (Qwen3.5) idled the
	// other core for ~2% of the pass.
	b.parallel(s.rows, elemGrain(s.cols), func(lo, hi, _ int) {
		for r := lo; r < hi; r++ {
			sr, ar, br := s.row(r), da.row(r), db.row(r)
			for h := 0; h < n; h++ {
				copy(ar[h*chunk:][:chunk], sr[2*h*chunk:][:chunk])
				copy(br[h*chunk:][:chunk], sr[(2*h+1)*chunk:][:chunk])
			}
		}
	})
}

// Gather sets dst row i to src row rows[i].
func (b *Backend) Gather(dst, src engine.Tensor, rows []int) {
	d, s := tt(dst), tt(src)
	if d.rows != len(rows) || d.cols != s.cols {
		panic(fmt.Sprintf("cpu: gather %d rows of [%d, %d] into [%d, %d]", len(rows), s.rows, s.cols, d.rows, d.cols))
	}
	for i, r := range rows {
		if r < 0 || r >= s.rows {
			panic(fmt.Sprintf("cpu: gather row %d of %d", r, s.rows))
		}
		copy(d.row(i), s.row(r))
	}
}
