package main

import (
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/remoting"
)

// limitConfig are the connection limits of every listener of the process
// (the remoting listener and pprof), as the broker's: in all, per source,
// and below RLIMIT_NOFILE.
type limitConfig struct {
	maxConns, perSource, fdHeadroom int // 0: the defaults
}

type limitFlags struct{ maxConns, perSource, fdHeadroom *int }

func addLimitFlags(fs *pflag.FlagSet) *limitFlags {
	return &limitFlags{
		maxConns:   fs.Int("max-connections", 0, fmt.Sprintf("connections the process accepts in all (default %d, and fewer than RLIMIT_NOFILE allows)", remoting.DefaultMaxConns)),
		perSource:  fs.Int("max-connections-per-source", 0, fmt.Sprintf("connections the process accepts from one source address (default %d)", remoting.DefaultMaxConnsPerSource)),
		fdHeadroom: fs.Int("fd-headroom", 0, "file descriptors kept free beyond those the process holds: connections are refused before they would take them (default: a quarter of RLIMIT_NOFILE, 64 to 1024)"),
	}
}

func (f *limitFlags) config() (limitConfig, error) {
	c := limitConfig{maxConns: *f.maxConns, perSource: *f.perSource, fdHeadroom: *f.fdHeadroom}
	if c.maxConns < 0 || c.perSource < 0 || c.fdHeadroom < 0 {
		return c, fmt.Errorf("--max-connections, --max-connections-per-source, --fd-headroom: want 0 (the default) or more")
	}
	return c, nil
}

// apply sets the process-wide connection limit every listener counts
// against, and bounds it by the file descriptors left.
func (c limitConfig) apply(logger *slog.Logger) {
	remoting.ApplyProcessLimits(c.maxConns, c.perSource, c.fdHeadroom, logger)
}
