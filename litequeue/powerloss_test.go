package litequeue

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs/crashfs"
)

// TestPowerLoss cuts the power (crashfs clones, strict and torn) at points
// of a workload that appends to lite topics across block files, creates,
// deletes and recreates lite topics (ids reused), applies retention (block
// files removed),
// commits offsets and rewrites its journal, flushing now and then. Each
// clone is opened with the real file system and, as the store does before
// it re-dispatches, truncated at the first entry appended after the last
// Flush that succeeded. Then every lite topic alive at that Flush holds
// exactly the entries it had, each the right one; one deleted before it is
// gone; the offset committed before it is there.
func TestPowerLoss(t *testing.T) {
	old := journalSlack
	journalSlack = 4 << 10
	defer func() { journalSlack = old }()
	for round := range crashfs.Rounds(4) {
		seed := uint64(round)*7919 + 1
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			powerLossRound(t, seed)
		})
	}
}

// plFileSize is 32 blocks: the workload spans many block files, and
// retention removes some.
const plFileSize = 16 << 10

type plModel struct {
	n       map[string]int // entries per live lite topic
	gen     map[string]int // incarnation, part of its entries' values
	cl      int64
	offset  map[string]int64
	deleted map[string]bool
}

func (m *plModel) clone() *plModel {
	c := &plModel{n: map[string]int{}, gen: map[string]int{}, cl: m.cl, offset: map[string]int64{}, deleted: map[string]bool{}}
	for k, v := range m.n {
		c.n[k] = v
	}
	for k, v := range m.gen {
		c.gen[k] = v
	}
	for k, v := range m.offset {
		c.offset[k] = v
	}
	for k, v := range m.deleted {
		c.deleted[k] = v
	}
	return c
}

// plEntry is the entry lite topic l (incarnation g) holds at offset k, at
// commit-log offset cl.
func plEntry(cl int64, l string, g, k int) Entry {
	return Entry{CommitLogOffset: cl, Size: int32(len(l) + g), TagCode: int64(g)<<40 | int64(k)}
}

func powerLossRound(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	dir := t.TempDir()
	fsys, err := crashfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	x, _, err := Open(dir, Options{FileSize: plFileSize, FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	m := &plModel{n: map[string]int{}, gen: map[string]int{}, offset: map[string]int64{}, deleted: map[string]bool{}}
	var durable *plModel // the model at the last Flush that succeeded
	type clone struct {
		dir    string
		model  *plModel
		stats  crashfs.CloneStats
		mode   crashfs.Mode
		cSeed  uint64
		before string
	}
	var clones []clone
	names := []string{"a", "b", "c", "d", "e", "f"}
	for step := range 60 {
		switch op := rng.IntN(11); {
		case op < 6:
			for range 1 + rng.IntN(60) {
				l := names[rng.IntN(len(names))]
				if m.gen[l] == 0 {
					m.gen[l] = 1
				}
				m.cl += 100
				if _, err := x.Append([]byte("P"), []byte(l), plEntry(m.cl, l, m.gen[l], m.n[l]), m.cl); err != nil {
					t.Fatal(err)
				}
				m.n[l]++
				delete(m.deleted, l)
			}
		case op == 6:
			l := names[rng.IntN(len(names))]
			if _, err := x.Delete("P", l); err != nil {
				t.Fatal(err)
			}
			if m.n[l] > 0 || m.gen[l] > 0 {
				m.gen[l]++
			}
			delete(m.n, l)
			delete(m.offset, l)
			m.deleted[l] = true
		case op == 7:
			l := names[rng.IntN(len(names))]
			off := rng.Int64N(100)
			if err := x.CommitOffset("g", "P", l, off); err != nil {
				t.Fatal(err)
			}
			m.offset[l] = off
		case op == 9:
			// Retention: the log's minimum moves up, below what the last
			// Flush covered (the store's log keeps what re-dispatch needs).
			if durable == nil {
				break
			}
			if err := x.DeleteBelow(min(m.cl-3000, durable.cl)); err != nil {
				t.Fatal(err)
			}
		case op == 8:
			if err := x.Flush(); err != nil {
				t.Fatal(err)
			}
			durable = m.clone()
		default:
			mode := crashfs.Mode(rng.IntN(2))
			c := clone{dir: filepath.Join(t.TempDir(), "clone"), mode: mode, cSeed: rng.Uint64(), before: fmt.Sprint("step ", step)}
			if durable != nil {
				c.model = durable.clone()
			}
			if c.stats, err = fsys.CrashClone(c.dir, crashfs.CloneOptions{Mode: mode, Seed: c.cSeed}); err != nil {
				t.Fatal(err)
			}
			clones = append(clones, c)
		}
	}
	for _, c := range clones {
		checkClone(t, c.dir, c.model, fmt.Sprintf("%s (%v, seed %d, %+v)", c.before, c.mode, c.cSeed, c.stats))
	}
}

func checkClone(t *testing.T, dir string, want *plModel, what string) {
	t.Helper()
	x, _, err := Open(dir, Options{FileSize: plFileSize})
	if err != nil {
		t.Fatalf("%s: open: %v", what, err)
	}
	defer x.Close()
	if want == nil {
		return // nothing was flushed: anything (right) may be there
	}
	if err := x.TruncateFrom(want.cl + 1); err != nil {
		t.Fatal(err)
	}
	for l, n := range want.n {
		mn, mx, ok := x.Offsets("P", l)
		if !ok || mx != int64(n) {
			t.Fatalf("%s: %s has max %d (%v), want %d", what, l, mx, ok, n)
		}
		got, _, _, _, err := x.Read("P", l, mn, make([]Entry, 0, mx-mn))
		if err != nil || int64(len(got)) != mx-mn {
			t.Fatalf("%s: %s: read %d of %d..%d: %v", what, l, len(got), mn, mx, err)
		}
		for i, e := range got {
			k := int(mn) + i
			if e.TagCode != int64(want.gen[l])<<40|int64(k) || e.Size != int32(len(l)+want.gen[l]) {
				t.Fatalf("%s: %s at %d: %+v (want incarnation %d)", what, l, k, e, want.gen[l])
			}
		}
		if off, ok := want.offset[l]; ok {
			if got, ok2 := x.Offset("g", "P", l); !ok2 || got != off {
				t.Fatalf("%s: offset of %s: %d %v, want %d", what, l, got, ok2, off)
			}
		}
	}
	for l := range want.deleted {
		if _, mx, ok := x.Offsets("P", l); ok && mx > 0 {
			t.Fatalf("%s: %s deleted before the flush, has %d entries", what, l, mx)
		}
	}
}
