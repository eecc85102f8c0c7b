package kernels

func dotsQ8x2Fast(s0, s1, q0, q1 []float32, k []int8, ks []float32, stride, sstride, n, nb int) bool {
	dotsQ8x2NEON(&s0[0], &s1[0], &q0[0], &q1[0], &k[0], &ks[0], stride, 4*sstride, n, nb)
	return true
}

func axpysQ8x2Fast(o0, o1, p0, p1 []float32, v []int8, vs []float32, stride, sstride, n, nb int) bool {
	axpysQ8x2NEON(&o0[0], &o1[0], &p0[0], &p1[0], &v[0], &vs[0], stride, 4*sstride, n, nb)
	return true
}

//go:noescape
func dotsQ8x2NEON(s0, s1, q0, q1 *float32, k *int8, ks *float32, strideBytes, sstrideBytes, n, nb int)

//go:noescape
func axpysQ8x2NEON(o0, o1, p0, p1 *float32, v *int8, vs *float32, strideBytes, sstrideBytes, n, nb int)
