// Package limitflags holds the connection-limit flags of the standalone
// name server and the controller: the limits every listener of the process
// counts against (remoting.ApplyProcessLimits), as the broker's are: in
// all, per source address, and below RLIMIT_NOFILE less a headroom.
package limitflags

import (
	"fmt"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/remoting"
)

// Config are the limits; 0 means the default.
type Config struct {
	MaxConns, PerSource, FDHeadroom int
}

// Flags are the limits' flags on a FlagSet, read by Config after parsing.
type Flags struct{ maxConns, perSource, fdHeadroom *int }

// Add defines --max-connections, --max-connections-per-source and
// --fd-headroom on fs.
func Add(fs *pflag.FlagSet) *Flags {
	return &Flags{
		maxConns:   fs.Int("max-connections", 0, fmt.Sprintf("connections the process accepts in all (default %d, and fewer than RLIMIT_NOFILE allows)", remoting.DefaultMaxConns)),
		perSource:  fs.Int("max-connections-per-source", 0, fmt.Sprintf("connections the process accepts from one source address (default %d)", remoting.DefaultMaxConnsPerSource)),
		fdHeadroom: fs.Int("fd-headroom", 0, "file descriptors kept free beyond those the process holds: connections are refused before they would take them (default: a quarter of RLIMIT_NOFILE, 64 to 1024)"),
	}
}

// Config returns the parsed limits, or an error for a negative one.
func (f *Flags) Config() (Config, error) {
	c := Config{MaxConns: *f.maxConns, PerSource: *f.perSource, FDHeadroom: *f.fdHeadroom}
	if c.MaxConns < 0 || c.PerSource < 0 || c.FDHeadroom < 0 {
		return c, fmt.Errorf("--max-connections, --max-connections-per-source, --fd-headroom: want 0 (the default) or more")
	}
	return c, nil
}

// Apply sets the process-wide connection limits every listener counts
// against, bounded by the file descriptors left.
func (c Config) Apply(logger *slog.Logger) {
	remoting.ApplyProcessLimits(c.MaxConns, c.PerSource, c.FDHeadroom, logger)
}
