// Package readyfile is the --ready-file of Apogee's commands (apogee-broker,
// apogee-namesrv, apogee-controller): once every listener of the process is
// open, one JSON object naming the address each listener actually bound, so
// that a test or a script that started the process with ports from :0 (or
// with defaults it does not want to guess) reads them instead of deriving
// them. docs/operations.md lists the keys.
//
// # Invariants
//
//   - The file appears whole or not at all: it is written to a temporary
//     file in the same directory, fsynced, and renamed over the path (then
//     the directory is fsynced). A reader never sees a partial object.
//   - The process removes a file left at the path by an earlier run before
//     it binds anything, so a file that exists describes the running
//     process (its pid says which one); the process removes it again when
//     it exits (a stop, or a listener that fails). Only a crashed or
//     killed process leaves its file behind, naming a pid that is gone.
//   - Keys are stable: a listener that is off is absent, never renamed;
//     new listeners get new keys.
package readyfile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// File is the ready file's content. Every address is the bound one
// ("127.0.0.1:40211", with the real port when the flag asked for 0; a
// wildcard host as given, "0.0.0.0:10911"); a listener that is not open is
// left empty and omitted from the JSON.
type File struct {
	// Command is the program ("apogee-broker", "apogee-namesrv",
	// "apogee-controller"); PID its process id.
	Command string `json:"command"`
	PID     int    `json:"pid"`
	// Listen is the remoting listener (--listen): the broker's, the name
	// server's or the controller's.
	Listen string `json:"listen"`
	// Advertise is the remoting address given to others: the broker's
	// address in routes, the controller's address named to brokers.
	Advertise string `json:"advertise,omitempty"`
	// HA is a broker's replication listener (--ha-listen; masters and
	// brokers in controller mode).
	HA string `json:"ha,omitempty"`
	// Namesrv is a broker's embedded name server's listener
	// (--namesrv-listen).
	Namesrv string `json:"namesrv,omitempty"`
	// GRPC is a broker's RocketMQ 5 gRPC listener (--grpc-listen).
	GRPC string `json:"grpc,omitempty"`
	// Metrics is a broker's Prometheus and dashboard listener
	// (--metrics-listen).
	Metrics string `json:"metrics,omitempty"`
	// Pprof is the net/http/pprof listener (--pprof).
	Pprof string `json:"pprof,omitempty"`
	// Raft is a controller's Raft listener (--raft-listen, or its --peers
	// address).
	Raft string `json:"raft,omitempty"`
}

// ErrNotReady is what Read returns while no ready file exists at the path
// (the process has not opened its listeners yet, or it stopped).
var ErrNotReady = errors.New("readyfile: no ready file yet")

// Attrs are f's addresses as slog attributes (key, value, ...), in the
// file's key names, for the log line that says the same as the file.
func (f File) Attrs() []any {
	out := []any{"pid", f.PID}
	for _, kv := range [][2]string{{"listen", f.Listen}, {"advertise", f.Advertise}, {"ha", f.HA}, {"namesrv", f.Namesrv},
		{"grpc", f.GRPC}, {"metrics", f.Metrics}, {"pprof", f.Pprof}, {"raft", f.Raft}} {
		if kv[1] != "" {
			out = append(out, kv[0], kv[1])
		}
	}
	return out
}

// Publish says that the process is ready: one INFO line "ready" with f's
// addresses, and, when path is not empty, the file written there.
func Publish(path string, f File, logger *slog.Logger) error {
	logger.Info("ready", f.Attrs()...)
	if path == "" {
		return nil
	}
	if err := Write(path, f); err != nil {
		return fmt.Errorf("--ready-file: %w", err)
	}
	return nil
}

// Write replaces the file at path with f, atomically (see the package
// invariants).
func Write(path string, f File) error {
	b, err := json.Marshal(f)
	if err != nil {
		return fmt.Errorf("readyfile: %w", err)
	}
	b = append(b, '\n')
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("readyfile: %w", err)
	}
	fail := func(err error) error {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("readyfile: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		return fail(err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("readyfile: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("readyfile: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("readyfile: sync %s: %w", dir, err)
	}
	return nil
}

// Read returns the file at path; ErrNotReady (wrapped) when there is none.
func Read(path string) (File, error) {
	var f File
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return f, fmt.Errorf("%w: %s", ErrNotReady, path)
	}
	if err != nil {
		return f, fmt.Errorf("readyfile: %w", err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("readyfile: %s: %w", path, err)
	}
	return f, nil
}

// Remove deletes the file at path; a path with no file is not an error.
// A process calls it at start (a stale file from an earlier run) and at a
// clean stop.
func Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("readyfile: %w", err)
	}
	return nil
}
