package kernels

// WeightedRows sets dst to the weighted sum of rows of y, whose rows have
// len(dst) values: dst[i] = Σ_j w[j]·y[rows[j]·len(dst)+i], adding from 0
// in the order of j, each product and sum rounded to float32 (the sum of a
// token's expert outputs in a MoE block). The AVX-512 loop keeps the sum
// in registers over all the rows and uses the same IEEE operations as the
// Go loop, so every element has its bits.
func WeightedRows(dst, y []float32, rows []int, w []float32) {
	n := len(dst)
	w = w[:len(rows)]
	for _, r := range rows {
		_ = y[r*n : (r+1)*n] // bounds, before the vector loop reads them
	}
	c := weightedRowsFast(dst, y, rows, w)
	if c == n {
		return
	}
	d := dst[c:]
	clear(d)
	for j, r := range rows {
		weightedRowGo(d, w[j], y[r*n+c:(r+1)*n])
	}
}

// weightedRowGo adds a·x to dst: the expression of moe.Accumulate, so that
// a compiler that fuses it (arm64) fuses both alike.
func weightedRowGo(dst []float32, a float32, x []float32) {
	x = x[:len(dst)]
	for i := range dst {
		dst[i] += a * x[i]
	}
}
