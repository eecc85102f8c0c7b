//go:build !amd64

package kernels

// matmulF16Fast: no F16 weight kernel here (row decode + DotF32).
func matmulF16Fast(m *Matrix, dst []float32, ldd int, in *Input, n0, n1 int) bool { return false }
