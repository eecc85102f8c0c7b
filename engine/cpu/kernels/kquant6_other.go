//go:build !amd64

package kernels

func kqKernel(m *Matrix, cols, g, ngroups int, in *Input, x8 []uint32, i int, dst []float32, ldd int) {
	panic("kernels: packed K-quants without VNNI")
}

func halfSums(q []int8, s6 []int32) { halfSumsGo(q, s6) }

func kqPacked() bool { return false }

func kqMultiRow() bool { return false }
