//go:build !amd64

package kernels

// No AMX off amd64.
const useAMX = false

func amxOn() bool { return false }

type amxScratch struct{}

func amxTiles(m *Matrix, dst []float32, ldd int, in *Input, m16, c0, c1, full int, tmp []float32, s *amxScratch) {
	panic("kernels: AMX kernel without AMX")
}
