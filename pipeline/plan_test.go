package pipeline

import (
	"strings"
	"testing"
)

func TestPlanValidate(t *testing.T) {
	st := func(w string, a, b int) StageAddr {
		return StageAddr{Worker: w, Addr: "127.0.0.1:1", First: a, Last: b}
	}
	tests := []struct {
		name string
		plan Plan
		err  string
	}{
		{"ok", Plan{Model: "m", Stages: []StageAddr{st("a", 0, 3), st("b", 3, 8)}}, ""},
		{"no model", Plan{Stages: []StageAddr{st("a", 0, 8)}}, "model name is empty"},
		{"no stages", Plan{Model: "m"}, "no stages"},
		{"gap", Plan{Model: "m", Stages: []StageAddr{st("a", 0, 3), st("b", 4, 8)}}, "stage 1 covers layers [4, 8)"},
		{"empty stage", Plan{Model: "m", Stages: []StageAddr{st("a", 0, 0), st("b", 0, 8)}}, "stage 0 covers"},
		{"short", Plan{Model: "m", Stages: []StageAddr{st("a", 0, 3), st("b", 3, 7)}}, "end at layer 7"},
		{"twice", Plan{Model: "m", Stages: []StageAddr{st("a", 0, 3), st("a", 3, 8)}}, "runs two stages"},
		{"nameless", Plan{Model: "m", Stages: []StageAddr{st("", 0, 8)}}, "has no worker"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.plan.Validate(8)
			if tt.err == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("got %v, want an error containing %q", err, tt.err)
			}
		})
	}
	p := Plan{Model: "m", Stages: []StageAddr{st("a", 0, 3), st("b", 3, 8)}}
	if p.Index("b") != 1 || p.Index("z") != -1 {
		t.Fatalf("Index: got %d %d, want 1 -1", p.Index("b"), p.Index("z"))
	}
}
