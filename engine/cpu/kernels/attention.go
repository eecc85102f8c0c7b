package kernels

// AttentionScratch is the scratch AttentionRows needs (floats).
func AttentionScratch(rows, group, hd, n int) int {
	m := rows * group
	return 2*m*hd + m*n
}

// AttentionRows is causal attention for `rows` consecutive query rows of
// the `group` query heads that share one KV head, as two GEMMs over a
// dimension-major cache (scores S = Q·K, then O = P·Vᵀ) so that every key
// and value is loaded once per block of rows·group queries:
//
//	q:      row r, head g at q[r*ldq+g*hd : r*ldq+(g+1)*hd]
//	kt, vt: kt[x*ldkv+j] = K[j][x] for dimension x < hd, position j < pos+rows
//	        (likewise vt); row r is at position pos+r and sees keys [0, pos+r]
//	out:    row r, head g at out[r*ldo+g*hd : ...]
//
// Softmax subtracts the row maximum and exponentiates with ExpSubF32. scratch has at least
// AttentionScratch(rows, group, hd, pos+rows) floats.
func AttentionRows(out []float32, ldo int, q []float32, ldq int, rows, group, hd int, kt, vt []float32, ldkv, pos int, scale float32, scratch []float32) {
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
	GemmF32NN(s, n, a, hd, kt, ldkv, m, n, hd)
	for r := range rows {
		valid := pos + r + 1
		for g := range group {
			row := s[(r*group+g)*n : (r*group+g+1)*n]
			sum := ExpSubF32(row[:valid], MaxF32(row[:valid]))
			a[(r*group+g)*hd] = 1 / sum // a is free again: keep 1/sum there
			clear(row[valid:])
		}
	}
	GemmF32NT(o, hd, s, n, vt, ldkv, m, hd, n)
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
