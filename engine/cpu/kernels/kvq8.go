package kernels

// Decode attention over an 8-bit KV cache (llama.cpp's -ctk/-ctv q8_0):
// every cached head vector is int8 in blocks of 32 values along the head
// dimension with one float32 scale per block. These read the cache in
// place, two query heads per pass (the group heads of one kv head share
// each load), instead of widening it to float32 first: the cache is
// 1.125 bytes a value, so a decode step reads 56% of an f16 cache's bytes.
// The query and the probabilities stay float32 (no second quantization);
// the sums' order differs from the float32 kernels', so results agree with
// attention over the widened cache to rounding, not bit for bit.

// KVQ8Block is the number of values per scale of an 8-bit cache vector.
const KVQ8Block = 32

// DotsQ8x2 sets s0[p] = q0·K[p] and s1[p] = q1·K[p] for the n keys p < n:
// key p's values are k[p*stride : p*stride+hd] (hd = len(q0), a multiple of
// KVQ8Block) times their block's scale ks[p*sstride+x/KVQ8Block]. With s1
// and q1 nil only s0 is computed (an odd last head).
func DotsQ8x2(s0, s1, q0, q1 []float32, k []int8, ks []float32, stride, sstride, n int) {
	hd := len(q0)
	nb := hd / KVQ8Block
	if n <= 0 {
		return
	}
	if s1 == nil && q1 == nil {
		s1, q1 = s0, q0 // the kernels write the same sums twice
	}
	if hd%KVQ8Block != 0 || len(q1) != hd || len(s0) < n || len(s1) < n {
		panic("kernels: DotsQ8x2 shapes")
	}
	_ = k[(n-1)*stride+hd-1]
	_ = ks[(n-1)*sstride+nb-1]
	if dotsQ8x2Fast(s0, s1, q0, q1, k, ks, stride, sstride, n, nb) {
		return
	}
	for p := range n {
		var a0, a1 float32
		for b := range nb {
			var t0, t1 float32
			kb := k[p*stride+b*KVQ8Block:][:KVQ8Block]
			x0, x1 := q0[b*KVQ8Block:][:KVQ8Block], q1[b*KVQ8Block:][:KVQ8Block]
			for i, v := range kb {
				t0 += x0[i] * float32(v)
				t1 += x1[i] * float32(v)
			}
			d := ks[p*sstride+b]
			a0 += d * t0
			a1 += d * t1
		}
		s0[p], s1[p] = a0, a1
	}
}

// AxpysQ8x2 adds Σ_p p0[p]·V[p] to o0 and Σ_p p1[p]·V[p] to o1 over the n
// values p < n, laid out as DotsQ8x2's keys (v, vs, stride, sstride; hd =
// len(o0)). With o1 and p1 nil only o0 is updated (an odd last head).
func AxpysQ8x2(o0, o1, p0, p1 []float32, v []int8, vs []float32, stride, sstride, n int) {
	hd := len(o0)
	nb := hd / KVQ8Block
	if n <= 0 {
		return
	}
	if o1 == nil && p1 == nil {
		// The kernels add to two rows: the second goes to scratch (on
		// the stack for heads up to 256 values) and is dropped.
		var spare [256]float32
		o1, p1 = spare[:min(hd, len(spare))], p0
		if hd > len(spare) {
			o1 = make([]float32, hd)
		}
	}
	if hd%KVQ8Block != 0 || len(o1) != hd || len(p0) < n || len(p1) < n {
		panic("kernels: AxpysQ8x2 shapes")
	}
	_ = v[(n-1)*stride+hd-1]
	_ = vs[(n-1)*sstride+nb-1]
	if axpysQ8x2Fast(o0, o1, p0, p1, v, vs, stride, sstride, n, nb) {
		return
	}
	for b := range nb {
		a0, a1 := o0[b*KVQ8Block:][:KVQ8Block], o1[b*KVQ8Block:][:KVQ8Block]
		for p := range n {
			d := vs[p*sstride+b]
			c0, c1 := d*p0[p], d*p1[p]
			for i, x := range v[p*stride+b*KVQ8Block:][:KVQ8Block] {
				a0[i] += c0 * float32(x)
				a1[i] += c1 * float32(x)
			}
		}
	}
}
