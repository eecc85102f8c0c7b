package tokenizer

import (
	"slices"
	"testing"
)

func TestParseIDs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		err  bool
	}{
		{"1,2,3", []int{1, 2, 3}, false},
		{" 1 2\t3\n", []int{1, 2, 3}, false},
		{"[9707,11]", []int{9707, 11}, false},
		{"", []int{}, false},
		{"1,x", nil, true},
		{"[1,", nil, true},
	} {
		got, err := ParseIDs(tc.in)
		if (err != nil) != tc.err || (!tc.err && !slices.Equal(got, tc.want)) {
			t.Errorf("ParseIDs(%q) = %v, %v; want %v (error: %v)", tc.in, got, err, tc.want, tc.err)
		}
	}
}
