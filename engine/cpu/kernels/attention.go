package kernels

// AttentionScratch is the scratch AttentionRows needs (floats).
func AttentionScratch(rows, group, hd, n int) int {
	m := rows * group
	return 2*m*hd + m*n
}

// AttentionRows is causal attention for `rows` consecutive query rows of
// the `group` query heads that share one KV head, as two GEMMs over the
// cache (scores S = Q·K, then O = P·V) so that every key and value is
// loaded once per block of rows·group queries:
//
//	q:  row r, head g at q[r*ldq+g*hd : r*ldq+(g+1)*hd]
//	kt: dimension-major keys, kt[x*ldk+j] = K[j][x] for x < hd, j < pos+rows
//	v:  position-major values, v[j*hd+x] = V[j][x]
//	    row r is at position pos+r and sees keys [0, pos+r]
//	out: row r, head g at out[r*ldo+g*hd : ...]
//
// One row (a decode step) takes the per-row path: the scores are
// AxpysF32x2 over the key rows and the output AxpysF32x2 over the value
// rows, each K and V value loaded once for two query heads and the
// accumulators kept in registers (the GEMM tails for fewer than 8 query
// rows re-read the cache once per head and store the accumulators each
// step). Softmax subtracts the row maximum and exponentiates with
// ExpSubF32. scratch has at least AttentionScratch(rows, group, hd,
// pos+rows) floats.
func AttentionRows(out []float32, ldo int, q []float32, ldq int, rows, group, hd int, kt []float32, ldk int, v []float32, pos int, scale float32, scratch []float32) {
	m, n := rows*group, pos+rows
	a := scratch[:m*hd]
	s := scratch[m*hd : m*hd+m*n]
	o := scratch[m*hd+m*n : 2*m*hd+m*n]
	for r := range rows {
		for g := range group {
			src := q[r*ldq+g*hd : r*ldq+(g+1)*hd]
			dst := a[(r*group+g)*hd : (r*group+g+1)*hd]
			for x, v := range src {
				dst[x] = v * scale
			}
		}
	}
	if rows == 1 {
		attentionRow(a, s, o, group, hd, kt, ldk, v, n)
	} else {
		GemmF32NN(s, n, a, hd, kt, ldk, m, n, hd)
	}
	for r := range rows {
		valid := pos + r + 1
		for g := range group {
			row := s[(r*group+g)*n : (r*group+g+1)*n]
			sum := ExpSubF32(row[:valid], MaxF32(row[:valid]))
			a[(r*group+g)*hd] = 1 / sum // a is free again: keep 1/sum there
			clear(row[valid:])
		}
	}
	if rows == 1 {
		attentionRowOut(s, o, group, hd, v, n)
	} else {
		GemmF32NN(o, hd, s, n, v, hd, m, hd, n)
	}
	for r := range rows {
		for g := range group {
			inv := a[(r*group+g)*hd]
			src := o[(r*group+g)*hd : (r*group+g+1)*hd]
			dst := out[r*ldo+g*hd : r*ldo+(g+1)*hd]
			for x, v := range src {
				dst[x] = v * inv
			}
		}
	}
}

// attentionRow sets the scores s (group rows of n) of one query row's
// group heads a (group rows of hd, already scaled), two heads per pass.
func attentionRow(a, s, o []float32, group, hd int, kt []float32, ldk int, v []float32, n int) {
	clear(s[:group*n])
	g := 0
	for ; g+1 < group; g += 2 {
		AxpysF32x2(s[g*n:(g+1)*n], s[(g+1)*n:(g+2)*n], a[g*hd:(g+1)*hd], a[(g+1)*hd:(g+2)*hd], kt, ldk, hd)
	}
	if g < group {
		AxpysF32(s[g*n:(g+1)*n], a[g*hd:(g+1)*hd], kt, ldk, hd)
	}
}

// attentionRowOut sets o (group rows of hd) = P·V for one query row's
// probabilities s (group rows of n), two heads per pass.
func attentionRowOut(s, o []float32, group, hd int, v []float32, n int) {
	clear(o[:group*hd])
	g := 0
	for ; g+1 < group; g += 2 {
		AxpysF32x2(o[g*hd:(g+1)*hd], o[(g+1)*hd:(g+2)*hd], s[g*n:(g+1)*n], s[(g+1)*n:(g+2)*n], v, hd, n)
	}
	if g < group {
		AxpysF32(o[g*hd:(g+1)*hd], s[g*n:(g+1)*n], v, hd, n)
	}
}

// AttnKeyBlock is how many positions AttentionRowF16 scores at a time: its
// K may come in blocks of this many positions anywhere in memory.
const AttnKeyBlock = 128

// AttentionRowF16 is AttentionRows for one query row (rows = 1) over an f16
// cache (IEEE halves, v[j*hd+x]), widened in registers by the f16
// axpy-sum kernels. K comes in blocks of AttnKeyBlock positions: key j's
// value x is kt[(j/AttnKeyBlock)*kblock + x*ldk + j%AttnKeyBlock]
// (AttentionRows' dimension-major layout is kblock = AttnKeyBlock, ldk the
// row length; a position-blocked cache has each block's hd rows contiguous,
// ldk = AttnKeyBlock). scratch has at least AttentionScratch(1, group, hd,
// pos+1) floats.
func AttentionRowF16(out, q []float32, group, hd int, kt []uint16, ldk, kblock int, v []uint16, pos int, scale float32, scratch []float32) {
	const B = AttnKeyBlock
	m, n := group, pos+1
	a := scratch[:m*hd]
	s := scratch[m*hd : m*hd+m*n]
	o := scratch[m*hd+m*n : 2*m*hd+m*n]
	for x, v := range q[:m*hd] {
		a[x] = v * scale
	}
	clear(s)
	// The first key block and the start of the value rows are asked for
	// before any is needed (the chunks below prefetch one block ahead).
	PrefetchF16(kt, hd, ldk, min(n, B))
	PrefetchF16(v, 1, 0, min(n, 64)*hd)
	g := 0
	for ; g+1 < group; g += 2 {
		// One key block at a time, asking for the next block's rows
		// meanwhile (the rows of a dimension-major block are ldk apart,
		// too short a run each for the hardware prefetchers). Splitting at
		// multiples of 128 keeps every column's bits (the kernel's column
		// blocks are 128 wide).
		for c := 0; c < n; c += B {
			e := min(n, c+B)
			var next []uint16
			if e < n && g == 0 {
				next = kt[(c/B+1)*kblock:]
			}
			AxpysF16x2Next(s[g*n+c:g*n+e], s[(g+1)*n+c:(g+1)*n+e], a[g*hd:(g+1)*hd], a[(g+1)*hd:(g+2)*hd], kt[(c/B)*kblock:], next, ldk, hd)
		}
	}
	if g < group {
		for c := 0; c < n; c += B {
			e := min(n, c+B)
			AxpysF16(s[g*n+c:g*n+e], a[g*hd:(g+1)*hd], kt[(c/B)*kblock:], ldk, hd)
		}
	}
	for g := range group {
		row := s[g*n : (g+1)*n]
		sum := ExpSubF32(row, MaxF32(row))
		a[g*hd] = 1 / sum
	}
	clear(o)
	g = 0
	for ; g+1 < group; g += 2 {
		AxpysF16x2(o[g*hd:(g+1)*hd], o[(g+1)*hd:(g+2)*hd], s[g*n:(g+1)*n], s[(g+1)*n:(g+2)*n], v, hd, n)
	}
	if g < group {
		AxpysF16(o[g*hd:(g+1)*hd], s[g*n:(g+1)*n], v, hd, n)
	}
	for g := range group {
		inv := a[g*hd]
		for x, v := range o[g*hd : (g+1)*hd] {
			out[g*hd+x] = v * inv
		}
	}
}
