package store

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestEpochFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, EpochFileName)
	f, err := OpenEpochFile(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f.LastEpoch() != -1 || len(f.Entries()) != 0 {
		t.Fatal("a new epoch file has entries")
	}
	steps := []struct {
		epoch int32
		start int64
		err   error
	}{
		{1, 0, nil},
		{1, 500, nil}, // the same epoch again: nothing changes
		{3, 1000, nil},
		{2, 2000, ErrEpochOrder},
		{4, 900, ErrEpochOrder},
		{4, 1000, nil}, // epoch 3 wrote nothing: replaced
		{6, 3000, nil},
	}
	for _, s := range steps {
		if err := f.Append(s.epoch, s.start); !errors.Is(err, s.err) {
			t.Fatalf("append %d at %d: %v, want %v", s.epoch, s.start, err, s.err)
		}
	}
	want := []EpochEntry{{1, 0}, {4, 1000}, {6, 3000}}
	if !slices.Equal(f.Entries(), want) {
		t.Fatalf("entries %v, want %v", f.Entries(), want)
	}
	// RocketMQ's CheckpointFile text.
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 5 || lines[0] != "3" || lines[2] != "1-0" || lines[4] != "6-3000" {
		t.Fatalf("file:\n%s", b)
	}
	if g, err := OpenEpochFile(path, nil, nil); err != nil || !slices.Equal(g.Entries(), want) {
		t.Fatalf("reopened: %v %v", g.Entries(), err)
	}
	if err := f.TruncateFrom(3000); err != nil {
		t.Fatal(err)
	}
	if err := f.TruncateBefore(1000); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.Entries(), []EpochEntry{{4, 1000}}) {
		t.Fatalf("after truncations: %v", f.Entries())
	}
	// A damaged file falls back to the previous version.
	os.WriteFile(path, []byte("1\n12345\n4-1000\n"), 0o644)
	g, err := OpenEpochFile(path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Entries(), []EpochEntry{{1, 0}, {4, 1000}}) {
		t.Fatalf("fallback entries %v", g.Entries())
	}
	if e, ok := EpochAt(g.Entries(), 5000, 999); !ok || e.Epoch != 1 {
		t.Fatalf("epoch at 999: %v %v", e, ok)
	}
	if _, ok := EpochAt(g.Entries(), 5000, 5000); ok {
		t.Fatal("an epoch at the log's end")
	}
}

// LastCommonOffset against the cases of RocketMQ's AutoSwitchHA.
func TestLastCommonOffset(t *testing.T) {
	cases := []struct {
		name      string
		local     []EpochEntry
		localEnd  int64
		remote    []EpochEntry
		remoteEnd int64
		want      int64
		ok        bool
	}{
		{"same history, replica behind", []EpochEntry{{1, 0}, {2, 100}}, 150, []EpochEntry{{1, 0}, {2, 100}}, 300, 150, true},
		{"same history, replica ahead (async loss on the master)", []EpochEntry{{1, 0}}, 500, []EpochEntry{{1, 0}}, 300, 300, true},
		{"old master rejoins: its epoch went further than the new master took",
			[]EpochEntry{{1, 0}, {2, 100}}, 400, []EpochEntry{{1, 0}, {2, 100}, {3, 250}}, 600, 250, true},
		{"replica wrote in an epoch the master never saw",
			[]EpochEntry{{1, 0}, {2, 100}, {3, 300}}, 420, []EpochEntry{{1, 0}, {2, 100}, {4, 350}}, 500, 300, true},
		{"same epoch number, other start: not common",
			[]EpochEntry{{1, 0}, {2, 120}}, 200, []EpochEntry{{1, 0}, {2, 100}}, 300, 100, true},
		{"nothing common", []EpochEntry{{2, 0}}, 100, []EpochEntry{{1, 0}}, 300, -1, false},
		{"replica without epochs", nil, 0, []EpochEntry{{1, 0}}, 300, -1, false},
	}
	for _, c := range cases {
		got, ok := LastCommonOffset(c.local, c.localEnd, c.remote, c.remoteEnd)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %d %v, want %d %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
