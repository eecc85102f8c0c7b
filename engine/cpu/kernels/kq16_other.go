//go:build !amd64

package kernels

// kq16: the 16-row K-quant kernel is amd64's (VNNI) only.
func kq16(*Matrix) bool { return false }
