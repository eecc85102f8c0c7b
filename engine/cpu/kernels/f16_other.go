//go:build !amd64 && !arm64

package kernels

func f16Fast() bool { return false }

func f32ToF16Fast(dst []uint16, src []float32) int { return 0 }
func f16ToF32Fast(dst []float32, src []uint16) int { return 0 }

func axpysF16Fast(acc, p []float32, v []uint16, stride, n int) int { return 0 }
