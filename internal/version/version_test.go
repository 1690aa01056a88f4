package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/apogeemq/apogee", Version: "(devel)"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	released := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.3.0"}}
	for _, tc := range []struct {
		name          string
		ver, rev      string
		bi            *debug.BuildInfo
		ok            bool
		want          Info
		short, String string
	}{
		{"ldflags win", "v1.2.3", "feedface", stamped, true,
			Info{"v1.2.3", "feedface", "go1.26.8"}, "v1.2.3 (commit feedface)", "apogee-x v1.2.3, commit feedface, go1.26.8"},
		{"vcs stamp of a modified checkout", "", "", stamped, true,
			Info{"devel", "0123456789abcdef0123456789abcdef01234567-dirty", "go1.26.8"},
			"devel (commit 0123456789ab-dirty)", "apogee-x devel, commit 0123456789abcdef0123456789abcdef01234567-dirty, go1.26.8"},
		{"go install module@version", "", "", released, true,
			Info{"v0.3.0", "unknown", "go1.26.8"}, "v0.3.0 (commit unknown)", "apogee-x v0.3.0, commit unknown, go1.26.8"},
		{"no build information", "", "", nil, false,
			Info{"devel", "unknown", ""}, "devel (commit unknown)", "apogee-x devel, commit unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fromBuildInfo(tc.ver, tc.rev, tc.bi, tc.ok)
			if got != tc.want {
				t.Fatalf("Info = %+v, want %+v", got, tc.want)
			}
			if s := got.Short(); s != tc.short {
				t.Fatalf("Short = %q, want %q", s, tc.short)
			}
			if s := got.String("apogee-x"); s != tc.String {
				t.Fatalf("String = %q, want %q", s, tc.String)
			}
		})
	}
}

// TestGetInATestBinary: a test binary has build information but no VCS
// stamp, so the fallbacks apply.
func TestGetInATestBinary(t *testing.T) {
	i := Get()
	if i.Version == "" || i.Commit == "" || i.GoVersion == "" {
		t.Fatalf("Get() = %+v: every field must be set", i)
	}
}
