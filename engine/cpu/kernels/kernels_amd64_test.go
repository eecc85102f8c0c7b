package kernels

type implCase struct {
	name         string
	set, restore func()
}

// testImpls lists the implementations this machine can run: each set()
// turns the faster paths off down to that level.
func testImpls() []implCase {
	vnni, avx2, f32, bf16, ax, a512, amx := useVNNI, useAVX2, hasDotF32, hasDotBF16, hasAxpy, useAVX512F, useAMX
	restore := func() {
		useVNNI, useAVX2, hasDotF32, hasDotBF16, hasAxpy, useAVX512F, useAMX = vnni, avx2, f32, bf16, ax, a512, amx
	}
	var out []implCase
	if amx {
		out = append(out, implCase{"amx", func() {}, restore})
	}
	if vnni {
		out = append(out, implCase{"avx512vnni", func() { useAMX = false }, restore})
	}
	if avx2 {
		out = append(out, implCase{"avx2", func() { useVNNI, useAVX512F = false, false }, restore})
	}
	return append(out, implCase{"go", func() {
		useVNNI, useAVX2, hasDotF32, hasDotBF16, hasAxpy, useAVX512F = false, false, false, false, false, false
	}, restore})
}
