package emu

import (
	"strings"
	"testing"

	"github.com/macpool/macpool/metal/kernels"
)

func TestTranslateKernels(t *testing.T) {
	src, err := kernels.Source()
	if err != nil {
		t.Fatal(err)
	}
	cpp, ks, err := Translate(src)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, k := range ks {
		names[k.Name] = true
	}
	for _, want := range []string{"embed", "matmul", "rmsnorm", "rope", "store_kv", "attention", "swiglu", "add", "copy2d", "gather"} {
		if !names[want] {
			t.Errorf("kernel %s not found (have %v)", want, names)
		}
	}
	if strings.Contains(cpp, "[[") {
		t.Errorf("attributes left in translated source")
	}
}

func TestTranslateErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"int x;", "no kernel functions"},
		{"kernel void f(device float *x) {}", "has no [[attribute]]"},
		{"kernel void f(device float *x [[buffer(0)]], threadgroup float *s [[threadgroup(0)]]) {}", "not supported"},
	} {
		_, _, err := Translate(tc.src)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Translate(%q) = %v, want error containing %q", tc.src, err, tc.want)
		}
	}
}
