// Package version reports which build of Apogee is running: a version and
// the commit it was built from, for every command's --version and the
// broker's start line.
//
// The build script sets both at link time:
//
//	go build -ldflags "-X github.com/apogeemq/apogee/internal/version.version=v0.3.0 \
//	    -X github.com/apogeemq/apogee/internal/version.commit=$(git rev-parse HEAD)" ./cmd/...
//
// (scripts/build.sh does this). Without them, both come from the build
// information the Go toolchain embeds: the main module's version (set by
// `go install module@version`; "(devel)" in a checkout) and the VCS stamp
// (vcs.revision and vcs.modified, present when `go build` ran in a git
// checkout). `go run` and `go test` embed no VCS stamp, so a binary built by
// them reports the commit as "unknown".
package version

import (
	"fmt"
	"runtime/debug"
)

// Set with -ldflags -X; empty means "take it from the build information".
var (
	version string
	commit  string
)

// Info is what a binary knows about its own build.
type Info struct {
	// Version is a release version such as "v0.3.0", or "devel" for a
	// build from a checkout without one.
	Version string
	// Commit is the full revision hash, with "-dirty" appended when the work
	// tree had uncommitted changes, or "unknown".
	Commit string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Get returns the build's Info: the link-time values where set, else the
// embedded build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	return fromBuildInfo(version, commit, bi, ok)
}

func fromBuildInfo(ver, rev string, bi *debug.BuildInfo, ok bool) Info {
	info := Info{Version: ver, Commit: rev}
	var modified bool
	if ok && bi != nil {
		info.GoVersion = bi.GoVersion
		if info.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			info.Version = bi.Main.Version
		}
		if info.Commit == "" {
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					info.Commit = s.Value
				case "vcs.modified":
					modified = s.Value == "true"
				}
			}
			if info.Commit != "" && modified {
				info.Commit += "-dirty"
			}
		}
	}
	if info.Version == "" {
		info.Version = "devel"
	}
	if info.Commit == "" {
		info.Commit = "unknown"
	}
	return info
}

// Short is the version with an abbreviated commit, for start lines:
// "devel (commit 29d4c7b4b1c2-dirty)".
func (i Info) Short() string {
	c := i.Commit
	dirty := ""
	if n := len(c) - len("-dirty"); n > 0 && c[n:] == "-dirty" {
		c, dirty = c[:n], "-dirty"
	}
	if len(c) > 12 && c != "unknown" {
		c = c[:12]
	}
	return fmt.Sprintf("%s (commit %s%s)", i.Version, c, dirty)
}

// String is the --version line of the named command:
// "apogee-broker devel, commit 29d4c7b4…, go1.26.8".
func (i Info) String(command string) string {
	s := fmt.Sprintf("%s %s, commit %s", command, i.Version, i.Commit)
	if i.GoVersion != "" {
		s += ", " + i.GoVersion
	}
	return s
}
