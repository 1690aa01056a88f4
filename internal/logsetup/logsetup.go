// Package logsetup makes the structured logger of the three server
// commands (apogee-broker, apogee-namesrv, apogee-controller) from their
// --log-level and --log-format flags, so that all three log alike.
package logsetup

import (
	"fmt"
	"io"
	"log/slog"
)

// New returns a logger writing to w at level and above (debug, info, warn
// or error; "" is info), as text (logfmt key=value lines; format "" or
// "text") or json (one object per line). The errors name the flag at
// fault.
func New(w io.Writer, level, format string) (*slog.Logger, error) {
	l := slog.LevelInfo
	if level != "" {
		if err := l.UnmarshalText([]byte(level)); err != nil {
			return nil, fmt.Errorf("--log-level: %w", err)
		}
	}
	o := &slog.HandlerOptions{Level: l}
	switch format {
	case "", "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, fmt.Errorf("--log-format %q: text or json", format)
}
