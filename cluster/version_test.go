package cluster

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	tests := []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build info", nil, "dev"},
		{"released module", &debug.BuildInfo{Main: debug.Module{Version: "v1.4.0"}}, "v1.4.0"},
		{"source build without vcs", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"git checkout", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", "0123456789abcdef0123", "vcs.modified", "false")}, "dev+0123456789ab"},
		{"dirty checkout", &debug.BuildInfo{Settings: settings("vcs.revision", "abc", "vcs.modified", "true")}, "dev+abc-dirty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionOf(tt.bi); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
