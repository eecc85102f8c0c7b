package cluster

import "runtime/debug"

// BuildVersion is the version a node gossips (Meta.Version, shown by the
// status and the dashboard): the module version of a released build, else
// "dev+REVISION" (12 hex digits, "-dirty" with uncommitted changes) of a
// build from a git checkout, else "dev".
func BuildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(bi)
}

func versionOf(bi *debug.BuildInfo) string {
	if bi == nil {
		return "dev"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	v := "dev+" + rev[:min(12, len(rev))]
	if dirty {
		v += "-dirty"
	}
	return v
}
