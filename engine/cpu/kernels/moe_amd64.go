package kernels

// weightedRowsFast does the first len(dst)&^63 values of WeightedRows,
// returning how many.
func weightedRowsFast(dst, y []float32, rows []int, w []float32) int {
	n := len(dst) &^ 63
	if !useAVX512F || n == 0 || len(rows) == 0 {
		return 0
	}
	weightedRowsAVX512(&dst[0], n, 4*len(dst), &y[0], &rows[0], &w[0], len(rows))
	return n
}

//go:noescape
func weightedRowsAVX512(dst *float32, n, strideBytes int, y *float32, rows *int, w *float32, k int)
