package kernels

type implCase struct {
	name         string
	set, restore func()
}

func testImpls() []implCase {
	dp := useDotProd
	restore := func() { useDotProd = dp }
	out := []implCase{{impl(), func() {}, restore}}
	if dp {
		out = append(out, implCase{"go", func() { useDotProd = false }, restore})
	}
	return out
}
