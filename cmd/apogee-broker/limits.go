package main

import (
	"log/slog"

	"github.com/apogeemq/apogee/remoting"
)

// reserveFDs bounds the process's connections by its file descriptors
// (remoting.ConnLimit.ReserveFDs on the shared limit every listener
// counts against): the soft RLIMIT_NOFILE, raised to the hard one first,
// less the descriptors the store and the rest of the process hold, less
// --fd-headroom (default remoting.DefaultFDHeadroom: what the store may
// open between two counts), so that a flood of connections is refused
// before the store's next open fails with "too many open files".
func reserveFDs(c *config, logger *slog.Logger) {
	if err := remoting.SharedConnLimit().ReserveFDs(c.fdHeadroom, logger); err != nil {
		logger.Warn("connections are not bounded by the file descriptors left: cannot read RLIMIT_NOFILE; keep --max-connections below it", "err", err)
	}
}
