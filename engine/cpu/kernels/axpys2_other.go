//go:build !amd64 && !arm64

package kernels

func axpysF32x2Fast(acc0, acc1, p0, p1, v []float32, stride, n int) int { return 0 }

func axpysF16x2Fast(acc0, acc1, p0, p1 []float32, v []uint16, stride, n, pf int) int { return 0 }

func axpysF16TailFast(acc, p []float32, v []uint16, stride, n int) bool { return false }
