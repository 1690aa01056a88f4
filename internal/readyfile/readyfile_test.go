package readyfile

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestWriteReadRemove(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ready.json")
	if _, err := Read(path); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Read before Write: %v, want ErrNotReady", err)
	}
	want := File{Command: "apogee-broker", PID: 42, Listen: "127.0.0.1:40211", Advertise: "127.0.0.1:40211",
		HA: "127.0.0.1:40212", GRPC: "127.0.0.1:40213"}
	if err := Write(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil || got != want {
		t.Fatalf("Read: %+v %v, want %+v", got, err, want)
	}
	// Listeners that are off are absent from the JSON, not empty strings.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const text = `{"command":"apogee-broker","pid":42,"listen":"127.0.0.1:40211","advertise":"127.0.0.1:40211","ha":"127.0.0.1:40212","grpc":"127.0.0.1:40213"}` + "\n"
	if string(b) != text {
		t.Fatalf("file:\n%s\nwant:\n%s", b, text)
	}
	// A second Write replaces the first whole and leaves no temporary file.
	second := File{Command: "apogee-namesrv", PID: 7, Listen: "127.0.0.1:9"}
	if err := Write(path, second); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(path); err != nil || got != second {
		t.Fatalf("Read after a second Write: %+v %v", got, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "ready.json" {
		t.Fatalf("directory holds %v, want ready.json alone", entries)
	}
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Read after Remove: %v", err)
	}
	if err := Remove(path); err != nil {
		t.Fatalf("Remove of a missing file: %v", err)
	}
}

func TestWriteFailsInAMissingDirectory(t *testing.T) {
	err := Write(filepath.Join(t.TempDir(), "no", "such", "dir", "ready.json"), File{Command: "x"})
	if err == nil || !strings.Contains(err.Error(), "readyfile:") {
		t.Fatalf("Write into a missing directory: %v", err)
	}
}

func TestReadRejectsAPartialObject(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ready.json")
	if err := os.WriteFile(path, []byte(`{"command":"apogee-br`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(path); err == nil || errors.Is(err, ErrNotReady) {
		t.Fatalf("Read of a torn file: %v, want a decoding error", err)
	}
}

func TestAttrsNameOpenListenersOnly(t *testing.T) {
	f := File{Command: "apogee-controller", PID: 3, Listen: "127.0.0.1:1", Raft: "127.0.0.1:2"}
	got := f.Attrs()
	want := []any{"pid", 3, "listen", "127.0.0.1:1", "raft", "127.0.0.1:2"}
	if !slices.Equal(got, want) {
		t.Fatalf("Attrs %v, want %v", got, want)
	}
}

func TestPublishLogsAndWrites(t *testing.T) {
	var log bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&log, nil))
	path := filepath.Join(t.TempDir(), "r.json")
	f := File{Command: "apogee-namesrv", PID: 9, Listen: "127.0.0.1:9876"}
	if err := Publish(path, f, logger); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(path); err != nil || got != f {
		t.Fatalf("Read %+v %v", got, err)
	}
	if !strings.Contains(log.String(), "msg=ready pid=9 listen=127.0.0.1:9876") {
		t.Fatalf("log line %q", log.String())
	}
	log.Reset()
	if err := Publish("", f, logger); err != nil || !strings.Contains(log.String(), "msg=ready") {
		t.Fatalf("Publish without a path: %v, log %q", err, log.String())
	}
	if err := Publish(filepath.Join(t.TempDir(), "missing", "r.json"), f, logger); err == nil || !strings.Contains(err.Error(), "--ready-file") {
		t.Fatalf("Publish to a missing directory: %v", err)
	}
}
