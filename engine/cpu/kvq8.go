package cpu

// 8-bit KV caches (Config.KVQ8), as llama.cpp's `-ctk q8_0 -ctv q8_0`: every
// cached K and V vector of one head is stored as int8 in blocks of 32
// values along the head dimension, one float32 scale per block (amax/127,
// values rounded to nearest: ggml's quantize_row_q8_0 with a float32 instead
// of an f16 scale). 1.125 bytes per value: 56% of an f16 cache, 28% of a
// float32 one. Both K and V are position-major per head (a position's head
// vector is one run of blocks). Decode rows read it in place
// (kernels.DotsQ8x2, AxpysQ8x2: fewer bytes per step than f16; pagedTask
// for paged blocks); prompt rows widen one head's K (to the dimension-major
// layout the float32 kernels take) and V into scratch and run the float32
// kernels.

import (
	"fmt"
	"math"

	"github.com/macpool/macpool/engine/cpu/kernels"
)

// q8Block is the number of values per scale.
const q8Block = 32

// quantizeQ8 stores src (a multiple of q8Block values) as int8 in dst with
// one scale per block in scales.
func quantizeQ8(dst []int8, scales []float32, src []float32) {
	for b := 0; b < len(src)/q8Block; b++ {
		x := src[b*q8Block : (b+1)*q8Block]
		var amax float32
		for _, v := range x {
			amax = max(amax, float32(math.Abs(float64(v))))
		}
		d := amax / 127
		var id float32
		if d != 0 {
			id = 1 / d
		}
		scales[b] = d
		q := dst[b*q8Block : (b+1)*q8Block]
		for i, v := range x {
			q[i] = int8(math.Round(float64(v * id)))
		}
	}
}

// widenQ8 is quantizeQ8's inverse for n values.
func widenQ8(dst []float32, src []int8, scales []float32, n int) {
	for b := 0; b < n/q8Block; b++ {
		d := scales[b]
		q := src[b*q8Block : (b+1)*q8Block]
		out := dst[b*q8Block : (b+1)*q8Block]
		for i, v := range q {
			out[i] = float32(v) * d
		}
	}
}

// checkQ8Head reports a head size the 8-bit cache cannot store.
func checkQ8Head(headDim int) error {
	if headDim%q8Block != 0 {
		return fmt.Errorf("cpu: 8-bit kv cache needs heads of a multiple of %d values, not %d", q8Block, headDim)
	}
	return nil
}

// kvQ8 is the 8-bit store of a contiguous kvCache: value x of head h at
// position p is k8[(h*cap+p)*headDim+x], its scale ks[((h*cap+p)*headDim+x)/32].
type kvQ8 struct {
	k8, v8 []int8
	ks, vs []float32
}

// regrowQ8 re-lays the first n positions of a store of capacity oc out for
// capacity nc.
func (q *kvQ8) regrow(heads, hd, oc, nc, n int) {
	grow := func(old []int8, per int) []int8 {
		out := make([]int8, heads*nc*per)
		for h := 0; h < heads; h++ {
			copy(out[h*nc*per:(h*nc+n)*per], old[h*oc*per:min(len(old), (h*oc+n)*per)])
		}
		return out
	}
	growF := func(old []float32, per int) []float32 {
		out := make([]float32, heads*nc*per)
		for h := 0; h < heads; h++ {
			copy(out[h*nc*per:(h*nc+n)*per], old[h*oc*per:min(len(old), (h*oc+n)*per)])
		}
		return out
	}
	q.k8, q.v8 = grow(q.k8, hd), grow(q.v8, hd)
	q.ks, q.vs = growF(q.ks, hd/q8Block), growF(q.vs, hd/q8Block)
}

// storeKVQ8 is StoreKV's work on kv heads [lo, hi) of an 8-bit cache.
func storeKVQ8(c *kvCache, kt, vt *Tensor, row, pos, n, lo, hi int) {
	hd, nb := c.headDim, c.headDim/q8Block
	for i := 0; i < n; i++ {
		for h := lo; h < hi; h++ {
			at := h*c.cap + pos + i
			src := (row+i)*c.dim + h*hd
			quantizeQ8(c.q8.k8[at*hd:(at+1)*hd], c.q8.ks[at*nb:(at+1)*nb], kt.data[src:src+hd])
			quantizeQ8(c.q8.v8[at*hd:(at+1)*hd], c.q8.vs[at*nb:(at+1)*nb], vt.data[src:src+hd])
		}
	}
}

// attentionQ8 is one attention task (all rows of one sequence for one kv
// head) over an 8-bit contiguous cache: a decode row through
// attentionRowQ8; prompt rows with K widened dimension-major and V
// position-major into scratch up to the task's last position, then the
// float32 kernels on blocks of attnRows rows. buf: AttentionScratch for
// attnRows rows + 2·hd·(pos+rows) floats.
func attentionQ8(c *kvCache, d, qt *Tensor, kvHead, group, hd, row, pos, rows int, scale float32, buf []float32, attn attnRowsFunc) {
	out, q := d.data[row*d.cols+kvHead*group*hd:], qt.data[row*qt.cols+kvHead*group*hd:]
	n := pos + rows
	nb := hd / q8Block
	base := kvHead * c.cap
	if rows == 1 {
		attentionRowQ8(out, q, group, hd, c.q8.k8[base*hd:(base+n)*hd], c.q8.ks[base*nb:(base+n)*nb],
			c.q8.v8[base*hd:(base+n)*hd], c.q8.vs[base*nb:(base+n)*nb], n, scale, buf)
		return
	}
	wk, wv := buf[:hd*n], buf[hd*n:2*hd*n]
	widenQ8(wv, c.q8.v8[base*hd:(base+n)*hd], c.q8.vs[base*nb:(base+n)*nb], n*hd)
	var tmp [256]float32
	for p := 0; p < n; p++ {
		k := tmp[:hd]
		if hd > len(tmp) {
			k = make([]float32, hd)
		}
		widenQ8(k, c.q8.k8[(base+p)*hd:(base+p+1)*hd], c.q8.ks[(base+p)*nb:(base+p+1)*nb], hd)
		for x, v := range k {
			wk[x*n+p] = v
		}
	}
	for r := 0; r < rows; r += attnRows {
		rr := min(rows-r, attnRows)
		attn(out[r*d.cols:], d.cols, q[r*qt.cols:], qt.cols, rr, group, hd, wk, n, wv, pos+r, scale, buf[2*hd*n:])
	}
}

// attentionRowQ8 is one decode row of the group query heads q (group·hd
// floats) over n positions of one kv head's 8-bit K and V (position-major,
// scales per 32 values), into out: scores two heads at a time, softmax
// (row maximum subtracted), then the probability-weighted values. buf:
// 2·group·hd + group·n floats.
func attentionRowQ8(out, q []float32, group, hd int, k8 []int8, ks []float32, v8 []int8, vs []float32, n int, scale float32, buf []float32) {
	nb := hd / q8Block
	a := buf[:group*hd]
	s := buf[group*hd : group*hd+group*n]
	o := buf[group*hd+group*n : 2*group*hd+group*n]
	for x, v := range q[:group*hd] {
		a[x] = v * scale
	}
	head := func(g int) []float32 { return a[g*hd : (g+1)*hd] }
	for g := 0; g < group; g += 2 {
		var s1, q1 []float32 // nil for an odd last head
		if g+1 < group {
			s1, q1 = s[(g+1)*n:(g+2)*n], head(g+1)
		}
		kernels.DotsQ8x2(s[g*n:(g+1)*n], s1, head(g), q1, k8, ks, hd, nb, n)
	}
	for g := range group {
		row := s[g*n : (g+1)*n]
		a[g*hd] = 1 / kernels.ExpSubF32(row, kernels.MaxF32(row)) // a is free again: keep 1/sum there
	}
	clear(o)
	for g := 0; g < group; g += 2 {
		var o1, p1 []float32 // nil for an odd last head
		if g+1 < group {
			o1, p1 = o[(g+1)*hd:(g+2)*hd], s[(g+1)*n:(g+2)*n]
		}
		kernels.AxpysQ8x2(o[g*hd:(g+1)*hd], o1, s[g*n:(g+1)*n], p1, v8, vs, hd, nb, n)
	}
	for g := range group {
		for x, v := range o[g*hd : (g+1)*hd] {
			out[g*hd+x] = v * a[g*hd]
		}
	}
}

// attnRowsFunc is kernels.AttentionRows' signature.
type attnRowsFunc func(out []float32, ldo int, q []float32, ldq, rows, group, hd int, kt []float32, ldk int, v []float32, pos int, scale float32, scratch []float32)

// storeQ8Paged writes rows [row, row+m) of kt/vt at offset o of block blk
// of an 8-bit block store (both K and V position-major within the block:
// value index ((blk*bs+o)*dim + h*headDim + x), a scale per 32).
func storeQ8Paged(st *kvBlocks, kt, vt *Tensor, row, blk, o, m int) {
	dim := st.dim
	for j := 0; j < m; j++ {
		at := blk*st.bs + o + j
		src := (row + j) * dim
		quantizeQ8(st.k8[at*dim:(at+1)*dim], st.ks[at*dim/q8Block:(at+1)*dim/q8Block], kt.data[src:src+dim])
		quantizeQ8(st.v8[at*dim:(at+1)*dim], st.vs[at*dim/q8Block:(at+1)*dim/q8Block], vt.data[src:src+dim])
	}
}

// widenQ8Block widens the first l positions of kv head h in block blk: K
// dimension-major into k ([headDim][bs], the float32 block layout) and V
// position-major into v ([l][headDim], stride headDim).
func widenQ8Block(st *kvBlocks, blk, h, l int, k, v []float32) {
	hd, nb := st.headDim, st.headDim/q8Block
	var tmp [256]float32
	row := tmp[:hd]
	if hd > len(tmp) {
		row = make([]float32, hd)
	}
	for o := 0; o < l; o++ {
		at := (blk*st.bs+o)*st.dim + h*hd
		widenQ8(v[o*hd:(o+1)*hd], st.v8[at:at+hd], st.vs[at/q8Block:at/q8Block+nb], hd)
		widenQ8(row, st.k8[at:at+hd], st.ks[at/q8Block:at/q8Block+nb], hd)
		for x, val := range row {
			k[x*st.bs+o] = val
		}
	}
}
