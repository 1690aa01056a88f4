package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// runDriver runs another system's driver, a binary of its own (so that its
// client library is not among Apogee's dependencies), with the same
// arguments: it is looked for next to this binary, then on PATH.
func runDriver(name string, args []string) error {
	path := ""
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), name); fileExists(p) {
			path = p
		}
	}
	if path == "" {
		p, err := exec.LookPath(name)
		if err != nil {
			return fmt.Errorf("--driver: %s is not installed next to apogee-bench or on PATH (cd benchmark/natsdriver && go install ./cmd/apogee-bench-nats): %w", name, err)
		}
		path = p
	}
	cmd := exec.Command(path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
		return fmt.Errorf("--driver: %s: %w", name, err)
	}
	return nil
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}
