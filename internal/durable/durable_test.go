package durable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
	"golang.org/x/sys/unix"
)

func TestWriteFileReplacesAndKeepsBackup(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for v := 1; v <= 3; v++ {
		if err := WriteFile(vfs.Default, path, []byte(fmt.Sprintf("v%d", v)), Backup(".bak")); err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		if string(got) != fmt.Sprintf("v%d", v) {
			t.Fatalf("after write %d: %q", v, got)
		}
		bak, err := os.ReadFile(path + ".bak")
		if v == 1 {
			if !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a first write made a backup: %q %v", bak, err)
			}
			continue
		}
		if string(bak) != fmt.Sprintf("v%d", v-1) {
			t.Fatalf("backup after write %d: %q", v, bak)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Fatalf("directory holds %v, want the file and its backup only", ents)
	}
}

func TestWriteFileBackupWithoutHardLinks(t *testing.T) {
	fsys := errorfs.New(vfs.Default)
	fsys.FailWhen(func(op errorfs.Op, _ string) unix.Errno {
		if op == errorfs.OpLink {
			return unix.EPERM // a file system without hard links
		}
		return 0
	})
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	for v := 1; v <= 3; v++ {
		if err := WriteFile(fsys, path, []byte(fmt.Sprintf("v%d", v)), Backup(".bak")); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := os.ReadFile(path + ".bak"); string(got) != "v2" {
		t.Fatalf("backup %q, want the copied previous version", got)
	}
	if got, _ := os.ReadFile(path); string(got) != "v3" {
		t.Fatalf("file %q", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("directory holds %v", ents)
	}
	if fsys.Counts()[errorfs.OpLink] == 0 {
		t.Fatal("no link was tried")
	}
}

func TestWriteFileWithoutBackupLeavesOnlyTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for i := 0; i < 3; i++ {
		if err := WriteFile(vfs.Default, path, []byte{byte(i)}, Perm(0o600)); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("directory holds %v", ents)
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode())
	}
}

func TestRemoveTemps(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	for _, n := range []string{".f.tmp-1", ".f.tmp-22", ".g.tmp-1", "f"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	if err := RemoveTemps(vfs.Default, path); err != nil {
		t.Fatal(err)
	}
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != ".g.tmp-1 f" {
		t.Fatalf("left %v", names)
	}
	if err := RemoveTemps(vfs.Default, filepath.Join(dir, "missing", "f")); err != nil {
		t.Fatalf("missing directory: %v", err)
	}
}

func TestTouch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "abort")
	if err := Touch(vfs.Default, path); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(path, []byte("x"), 0o644)
	if err := Touch(vfs.Default, path); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "x" {
		t.Fatalf("Touch changed an existing file: %q", b)
	}
}

// legacyRecord is how commitlog/checkpoint.go and store/checkpoint.go laid
// out their files before this package: magic, payload, CRC32 of both.
func legacyRecord(magic string, payload []byte) []byte {
	b := append([]byte(magic), payload...)
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

func TestRecordFormat(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ckpt")
	payload := []byte("0123456789abcdef")
	if err := os.WriteFile(path, legacyRecord("APGSTCK1", payload), 0o644); err != nil {
		t.Fatal(err)
	}
	r, got, ok, err := OpenRecord(vfs.Default, path, "APGSTCK1", len(payload))
	if err != nil || !ok || !bytes.Equal(got, payload) {
		t.Fatalf("open a record in the old format: %q %v %v", got, ok, err)
	}
	next := []byte("fedcba9876543210")
	if err := r.Write(next); err != nil {
		t.Fatal(err)
	}
	if err := r.Write(next[:3]); err == nil {
		t.Fatal("a payload of the wrong size was written")
	}
	r.Close()
	if err := r.Write(next); !errors.Is(err, ErrRecordClosed) {
		t.Fatalf("write after close = %v", err)
	}
	b, _ := os.ReadFile(path)
	if !bytes.Equal(b, legacyRecord("APGSTCK1", next)) {
		t.Fatalf("written record % x, want the old format", b)
	}
	if len(b) != Size(len(payload)) {
		t.Fatalf("size %d", len(b))
	}

	for name, damage := range map[string]func([]byte) []byte{
		"torn":          func(b []byte) []byte { b[10] ^= 1; return b },
		"short":         func(b []byte) []byte { return b[:len(b)-1] },
		"other magic":   func(b []byte) []byte { copy(b, "APGCKPT1"); return b },
		"empty":         func([]byte) []byte { return nil },
		"garbage added": func(b []byte) []byte { return append(b, 1, 2, 3) },
	} {
		d := damage(append([]byte(nil), b...))
		os.WriteFile(path, d, 0o644)
		got, ok, err := ReadRecord(vfs.Default, path, "APGSTCK1", len(payload))
		want := name == "garbage added" // bytes past the record are not part of it
		if err != nil || ok != want || ok && !bytes.Equal(got, next) {
			t.Errorf("%s: read %q ok %v err %v", name, got, ok, err)
		}
	}
	if _, ok, err := ReadRecord(vfs.Default, filepath.Join(dir, "none"), "APGSTCK1", 16); ok || err != nil {
		t.Fatalf("missing record: %v %v", ok, err)
	}
	if _, ok, _ := ReadRecord(vfs.Default, path, "short", 16); ok {
		t.Fatal("a magic of the wrong length was accepted")
	}
}

// TestFaults walks an injected failure over every file operation of a
// workload that uses every function of the package, and checks after each
// (with the real file system): an error was returned unless the failure was
// absorbed without effect, the files hold complete versions only (the
// acknowledged one, or the one before a failed write), no temporary file
// outlives a write that returned, and nothing was left open.
func TestFaults(t *testing.T) {
	errorfs.Walk(t, vfs.Default, []errorfs.Mode{errorfs.Once, errorfs.Stop}, func(t *testing.T, fsys *errorfs.FS, dir string) {
		goroutines := runtime.NumGoroutine()
		path := filepath.Join(dir, "state")
		var injected []error
		// note records a returned error: it must be the injected one.
		note := func(what string, err error) bool {
			if err == nil {
				return true
			}
			if !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("%s: %v, not the injected failure", what, err)
			}
			injected = append(injected, err)
			return false
		}

		// Versions of the state file: acked is the last WriteFile that
		// returned nil; attempted the one after it, if it failed.
		acked, prevAcked := "", ""
		for v := 1; v <= 3; v++ {
			data := fmt.Sprintf("version %d", v)
			if note("write", WriteFile(fsys, path, []byte(data), Backup(".bak"))) {
				prevAcked, acked = acked, data
			}
		}
		note("touch", Touch(fsys, filepath.Join(dir, "marker")))

		rec := filepath.Join(dir, "ckpt")
		var recAcked []byte
		if r, p, ok, err := OpenRecord(fsys, rec, "TESTREC1", 8); note("open record", err) {
			if ok {
				t.Fatalf("a new record file read as %q", p)
			}
			for i := byte(1); i <= 3; i++ {
				payload := bytes.Repeat([]byte{i}, 8)
				if note("write record", r.Write(payload)) {
					recAcked = payload
				}
			}
			r.Close()
		}
		if got, ok, err := ReadRecord(fsys, rec, "TESTREC1", 8); note("read record", err) && len(injected) == 0 {
			if !ok || !bytes.Equal(got, recAcked) {
				t.Fatalf("record reads %q %v, want the last written %q", got, ok, recAcked)
			}
		}
		note("remove temps", RemoveTemps(fsys, path))

		if err := fsys.Leaks(); err != nil {
			t.Fatal(err)
		}
		errorfs.CheckGoroutines(t, goroutines)
		fired := fsys.Fired()
		if fired != nil && len(injected) == 0 && fired.Op != errorfs.OpLink {
			// Only a failed link may be absorbed (a synced copy stands in);
			// the checks below then find everything as if nothing failed.
			t.Fatalf("%v was absorbed without an error", fired)
		}

		// What the real file system holds now.
		got, err := os.ReadFile(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if acked != "" {
				t.Fatalf("state file missing though %q was acknowledged", acked)
			}
		case err != nil:
			t.Fatal(err)
		case string(got) != acked && (len(injected) == 0 || !isVersion(string(got))):
			t.Fatalf("state file holds %q, acknowledged %q", got, acked)
		}
		if bak, err := os.ReadFile(path + ".bak"); err == nil {
			if !isVersion(string(bak)) {
				t.Fatalf("backup holds %q, not a complete version", bak)
			}
			if len(injected) == 0 && string(bak) != prevAcked {
				t.Fatalf("backup holds %q, want %q", bak, prevAcked)
			}
		}
		// A write that returned removed its temporary file, unless the
		// disk was gone by then; RemoveTemps removes any.
		if p, _ := fsys.Point(); fired == nil || p.Mode == errorfs.Once {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if strings.Contains(e.Name(), tempInfix) {
					t.Fatalf("temporary file %s left", e.Name())
				}
			}
		}
		if err := RemoveTemps(vfs.Default, path); err != nil {
			t.Fatal(err)
		}
		got, ok, err := ReadRecord(vfs.Default, rec, "TESTREC1", 8)
		switch {
		case err != nil:
			t.Fatal(err)
		case ok && (got[0] < 1 || got[0] > 3 || !bytes.Equal(got, bytes.Repeat(got[:1], 8))):
			t.Fatalf("record holds %q, not one that was written", got)
		case len(injected) == 0 && !bytes.Equal(got, recAcked):
			t.Fatalf("record holds %q, want %q", got, recAcked)
		}
	})
}

func isVersion(s string) bool {
	return s == "version 1" || s == "version 2" || s == "version 3"
}
