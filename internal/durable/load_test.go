package durable

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
)

type stateV struct {
	V int `json:"v"`
}

func parseStateV(b []byte) (stateV, error) {
	var s stateV
	if err := json.Unmarshal(b, &s); err != nil {
		return s, err
	}
	if s.V <= 0 {
		return s, errors.New("v must be positive") // contents that parse but cannot be used
	}
	return s, nil
}

func readFileT(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// logLines collects a slog text handler's lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range bytes.Split(bytes.TrimRight(p, "\n"), []byte("\n")) {
		l.lines = append(l.lines, string(line))
	}
	return len(p), nil
}

func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func ptr(s string) *string { return &s }

func TestLoadFallsBack(t *testing.T) {
	const (
		good    = `{"v":2}`
		older   = `{"v":1}`
		damaged = `{"v":2,"configTa`
	)
	for _, tc := range []struct {
		name        string
		cur, bak    *string // nil: absent
		want        int     // 0: not found
		fellBack    bool
		errHas      []string
		damagedCopy bool
		warn        string
	}{
		{name: "current", cur: ptr(good), bak: ptr(older), want: 2},
		{name: "current without bak", cur: ptr(good), want: 2},
		{name: "neither", want: 0},
		{name: "damaged", cur: ptr(damaged), bak: ptr(older), want: 1, fellBack: true, damagedCopy: true, warn: "state file damaged"},
		{name: "empty", cur: ptr(""), bak: ptr(older), want: 1, fellBack: true, damagedCopy: true, warn: "state file damaged"},
		{name: "unusable", cur: ptr(`{"v":-1}`), bak: ptr(older), want: 1, fellBack: true, damagedCopy: true, warn: "state file damaged"},
		{name: "missing", bak: ptr(older), want: 1, fellBack: true, warn: "state file missing"},
		{name: "both damaged", cur: ptr(damaged), bak: ptr("garbage"), errHas: []string{"state.json does not parse", "state.json.bak"}},
		{name: "damaged without bak", cur: ptr(damaged), errHas: []string{"state.json does not parse", "no previous version", "state.json.bak"}},
		{name: "missing and bak damaged", bak: ptr("garbage"), errHas: []string{"state.json is missing", "state.json.bak"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "state.json")
			if tc.cur != nil {
				if err := os.WriteFile(path, []byte(*tc.cur), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.bak != nil {
				if err := os.WriteFile(path+BakSuffix, []byte(*tc.bak), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			logs := &logLines{}
			v, found, fellBack, err := LoadWithBackup(vfs.Default, path, slog.New(slog.NewTextHandler(logs, nil)), parseStateV)
			if len(tc.errHas) > 0 {
				if err == nil {
					t.Fatalf("loaded %+v", v)
				}
				for _, s := range tc.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
				if _, serr := os.Stat(path + DamagedSuffix); serr == nil {
					t.Error("a file was moved aside although the load failed")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if found != (tc.want != 0) || v.V != tc.want || fellBack != tc.fellBack {
				t.Fatalf("got %+v found=%v fellBack=%v", v, found, fellBack)
			}
			wantLines := 0
			if tc.warn != "" {
				wantLines = 1
			}
			if len(logs.lines) != wantLines || wantLines == 1 && (logs.count("level=WARN") != 1 || logs.count(tc.warn) != 1) {
				t.Fatalf("log: %q", logs.lines)
			}
			_, serr := os.Stat(path + DamagedSuffix)
			if tc.damagedCopy != (serr == nil) {
				t.Fatalf("damaged copy present=%v, want %v", serr == nil, tc.damagedCopy)
			}
			if tc.damagedCopy {
				if got := readFileT(t, path+DamagedSuffix); got != *tc.cur {
					t.Fatalf("damaged copy holds %q", got)
				}
				if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the damaged file is still in place: %v", err)
				}
			}
		})
	}
}

// A write after a fallback recreates the file and keeps no damaged contents

// A write after a fallback recreates the file and keeps no damaged contents
// as the .bak.
func TestWriteAfterFallback(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	write := func(s string) {
		t.Helper()
		if err := WriteFile(vfs.Default, path, []byte(s), Backup(BakSuffix)); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"v":1}`)
	write(`{"v":2}`)
	if err := os.WriteFile(path, []byte(`{"v":2,`), 0o644); err != nil { // torn by hand
		t.Fatal(err)
	}
	v, _, fellBack, err := LoadWithBackup(vfs.Default, path, slog.New(slog.DiscardHandler), parseStateV)
	if err != nil || !fellBack || v.V != 1 {
		t.Fatalf("load: %+v fellBack=%v err=%v", v, fellBack, err)
	}
	write(`{"v":3}`)
	if got := readFileT(t, path); got != `{"v":3}` {
		t.Fatalf("file: %s", got)
	}
	if got := readFileT(t, path+BakSuffix); got != `{"v":1}` {
		t.Fatalf(".bak after a write that followed a fallback: %s", got)
	}
}

// A crash during a WriteFile leaves its temporary file; the next load of
// the name removes it (and only its).
func TestLoadRemovesTempsOfInterruptedWrites(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := WriteFile(vfs.Default, path, []byte(`{"v":1}`), Backup(BakSuffix)); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{".state.json.tmp-7", ".other.json.tmp-7"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v, found, fellBack, err := LoadWithBackup(vfs.Default, path, nil, parseStateV)
	if err != nil || !found || fellBack || v.V != 1 {
		t.Fatalf("load: %+v %v %v %v", v, found, fellBack, err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".state.json.tmp-7")); !os.IsNotExist(err) {
		t.Fatalf("the interrupted write's temporary file is still there: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, ".other.json.tmp-7")); err != nil {
		t.Fatalf("another file's temporary file was removed: %v", err)
	}
}
