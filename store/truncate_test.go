package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/mmap"
)

// copyLogTo feeds the master's log into the replica up to end (a record
// boundary).
func copyLogTo(t *testing.T, master, replica *Store, end int64) {
	t.Helper()
	var pend []byte
	pos := replica.WrittenOffset()
	pendOff := pos
	for pos < end {
		v, err := master.ReadLog(pos, int(min(end-pos, 64<<10)))
		if err != nil {
			t.Fatal(err)
		}
		pend = append(pend, v.Bytes()...)
		pos += int64(len(v.Bytes()))
		v.Release()
		n, err := replica.AppendReplicated(pendOff, pend)
		if err != nil {
			t.Fatal(err)
		}
		pend = append(pend[:0], pend[n:]...)
		pendOff += int64(n)
	}
	if len(pend) > 0 {
		t.Fatalf("%d bytes of a cut record left at %d", len(pend), pendOff)
	}
}

// logBytes reads a store's whole log.
func logBytes(t *testing.T, s *Store) []byte {
	t.Helper()
	var out []byte
	for pos := s.LogMinOffset(); pos < s.WrittenOffset(); {
		v, err := s.ReadLog(pos, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, v.Bytes()...)
		pos += int64(len(v.Bytes()))
		v.Release()
	}
	return out
}

func truncBody(i int) string {
	return fmt.Sprintf("message %d %s", i, bytes.Repeat([]byte{'x'}, 200+i%900))
}

// putMessages puts n messages over 5 topics and 3 queues, each with a key.
func putMessages(t *testing.T, s *Store, from, n int) []PutResult {
	t.Helper()
	var res []PutResult
	for i := from; i < from+n; i++ {
		m := msg(fmt.Sprintf("T%d", i%5), int32(i%3), truncBody(i), message.PropKeys, fmt.Sprintf("k%d", i))
		m.NoWait = true
		r, err := s.Put(m)
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, r)
	}
	return res
}

// A replica holding 1500 messages is cut back to the 1000th (the last
// offset it shares with its new master, whose log then goes its own way):
// the log, the queues and the index end there; views taken before keep
// their bytes; the new master's records then append, and the replica
// serves what the new master does, also after a restart.
func TestTruncateReplica(t *testing.T) {
	oldMaster := openStore(t, testOptions(t.TempDir()))
	defer oldMaster.Close()
	res := putMessages(t, oldMaster, 0, 1500)
	off := res[1000].CommitLogOffset
	if off%oldMaster.SegmentSize() == 0 {
		t.Fatal("pick a cut inside a segment")
	}
	ro := testOptions(t.TempDir())
	ro.Replica = true
	replica := openStore(t, ro)
	copyLogTo(t, oldMaster, replica, oldMaster.WrittenOffset())
	waitDispatched(t, replica)
	before := logBytes(t, replica)

	// The new master: the old one's log up to off, then its own messages.
	no := testOptions(t.TempDir())
	no.Replica = true
	nm := openStore(t, no)
	copyLogTo(t, oldMaster, nm, off)
	nm.Close()
	no.Replica = false
	newMaster := openStore(t, no)
	defer newMaster.Close()
	putMessages(t, newMaster, 5000, 300)
	waitDispatched(t, newMaster)

	// A reader holds a view of the part that is cut.
	held, err := replica.ReadLog(off, 4096)
	if err != nil {
		t.Fatal(err)
	}
	heldCopy := bytes.Clone(held.Bytes())

	if _, err := replica.TruncateReplica(off + 1); err == nil {
		t.Fatal("truncation inside a record accepted")
	}
	tr, err := replica.TruncateReplica(off)
	if err != nil {
		t.Fatal(err)
	}
	if tr.From != oldMaster.WrittenOffset() || tr.To != off || tr.Bytes != tr.From-off || tr.Messages != 500 || tr.Aside == "" {
		t.Fatalf("truncation %+v", tr)
	}
	if !bytes.Equal(held.Bytes(), heldCopy) {
		t.Fatal("a view taken before the truncation changed")
	}
	held.Release()
	if replica.WrittenOffset() != off || !bytes.Equal(logBytes(t, replica), before[:off]) {
		t.Fatalf("log after truncation: end %d, want %d (or bytes differ)", replica.WrittenOffset(), off)
	}
	for q := int32(0); q < 3; q++ {
		for topic := range 5 {
			want := int64(0)
			for i := 0; i < 1000; i++ {
				if i%5 == topic && int32(i%3) == q {
					want++
				}
			}
			if got := replica.MaxOffset(fmt.Sprintf("T%d", topic), q); got != want {
				t.Fatalf("T%d/%d max offset %d, want %d", topic, q, got, want)
			}
		}
	}
	now := time.Now().UnixMilli() + 1000
	if vs, _ := replica.QueryByKey("T4", "k1499", 0, now, 10, nil); len(vs) != 0 {
		t.Fatalf("a cut message's key still finds %d", len(vs))
	}
	vs, err := replica.QueryByKey("T4", "k999", 0, now, 10, nil)
	if err != nil || len(vs) != 1 {
		t.Fatalf("a kept message's key: %d, %v", len(vs), err)
	}
	vs[0].Release()
	// The file kept holds exactly the bytes cut.
	c, cutBytes, err := commitlog.ReadTruncated(nil, tr.Aside)
	if err != nil {
		t.Fatal(err)
	}
	if c.Start != off || c.End != tr.From || !bytes.Equal(cutBytes, before[off:tr.From]) {
		t.Fatalf("kept %d-%d (%d bytes), want %d-%d", c.Start, c.End, len(cutBytes), off, tr.From)
	}
	if st, err := os.Stat(tr.Aside); err != nil || st.Size() != tr.KeptBytes || filepath.Dir(tr.Aside) != filepath.Join(replica.Dir(), "commitlog", commitlog.TruncatedDir) {
		t.Fatalf("kept file %s: %v, size want %d", tr.Aside, err, tr.KeptBytes)
	}

	// The replica follows the new master from off.
	copyLogTo(t, newMaster, replica, newMaster.WrittenOffset())
	waitDispatched(t, replica)
	if n := sameQueues(t, newMaster, replica); n != 1300 {
		t.Fatalf("%d entries compared, want 1300", n)
	}
	if vs, err := replica.QueryByKey("T0", "k5000", 0, now, 10, nil); err != nil || len(vs) != 1 {
		t.Fatalf("the new master's key on the replica: %d, %v", len(vs), err)
	} else {
		vs[0].Release()
	}
	if err := replica.Close(); err != nil {
		t.Fatal(err)
	}
	replica = openStore(t, ro)
	defer replica.Close()
	if n := sameQueues(t, newMaster, replica); n != 1300 {
		t.Fatalf("after a restart: %d entries compared, want 1300", n)
	}
	if !bytes.Equal(logBytes(t, replica), logBytes(t, newMaster)) {
		t.Fatal("the replica's log differs from the new master's")
	}
	if _, err := newMaster.TruncateReplica(0); !errors.Is(err, ErrNotReplica) {
		t.Fatalf("truncation of a master: %v", err)
	}
}

// Cutting at a segment's base, and cutting everything.
func TestTruncateReplicaAtSegmentBoundaries(t *testing.T) {
	master := openStore(t, testOptions(t.TempDir()))
	defer master.Close()
	putMessages(t, master, 0, 3000)
	ro := testOptions(t.TempDir())
	ro.Replica = true
	replica := openStore(t, ro)
	defer replica.Close()
	copyLogTo(t, master, replica, master.WrittenOffset())
	seg := replica.SegmentSize()
	if replica.WrittenOffset() < 2*seg {
		t.Fatalf("log of %d bytes: want three segments", replica.WrittenOffset())
	}
	if _, err := replica.TruncateReplica(seg); err != nil {
		t.Fatal(err)
	}
	if replica.WrittenOffset() != seg {
		t.Fatalf("end %d, want %d", replica.WrittenOffset(), seg)
	}
	tr, err := replica.TruncateReplica(0)
	if err != nil {
		t.Fatal(err)
	}
	if replica.WrittenOffset() != 0 || tr.Messages == 0 {
		t.Fatalf("end %d after cutting everything (%+v)", replica.WrittenOffset(), tr)
	}
	replica.Queues(func(topic string, id int32, min, max int64) bool {
		if max != 0 {
			t.Errorf("%s/%d keeps max offset %d", topic, id, max)
		}
		return true
	})
	copyLogTo(t, master, replica, master.WrittenOffset())
	waitDispatched(t, replica)
	if n := sameQueues(t, master, replica); n != 3000 {
		t.Fatalf("%d entries compared after refilling, want 3000", n)
	}
}

// switchFS sends operations to fault while on is set, to plain otherwise:
// the fault walk below fails the truncation's own operations, not those of
// the set-up around it.
type switchFS struct {
	on    atomic.Bool
	plain vfs.FS
	fault vfs.FS
}

func (s *switchFS) pick() vfs.FS {
	if s.on.Load() {
		return s.fault
	}
	return s.plain
}

func (s *switchFS) OpenFile(n string, f int, p os.FileMode) (vfs.File, error) {
	return s.pick().OpenFile(n, f, p)
}
func (s *switchFS) Remove(n string) error                   { return s.pick().Remove(n) }
func (s *switchFS) RemoveAll(p string) error                { return s.pick().RemoveAll(p) }
func (s *switchFS) Rename(a, b string) error                { return s.pick().Rename(a, b) }
func (s *switchFS) Link(a, b string) error                  { return s.pick().Link(a, b) }
func (s *switchFS) MkdirAll(p string, m os.FileMode) error  { return s.pick().MkdirAll(p, m) }
func (s *switchFS) ReadDir(n string) ([]fs.DirEntry, error) { return s.pick().ReadDir(n) }
func (s *switchFS) Stat(n string) (fs.FileInfo, error)      { return s.pick().Stat(n) }
func (s *switchFS) SyncDir(d string) error                  { return s.pick().SyncDir(d) }
func (s *switchFS) MSync(n string, m *mmap.Mapping, off, l int) error {
	return s.pick().MSync(n, m, off, l)
}
func (s *switchFS) Lock(n string) (io.Closer, error)    { return s.pick().Lock(n) }
func (s *switchFS) DiskUsage(p string) (float64, error) { return s.pick().DiskUsage(p) }

func truncFaultOptions(t testing.TB, dir string, fsys vfs.FS) Options {
	o := faultOptions(t, dir, fsys)
	o.Replica = true
	o.FlushMode = FlushAsync
	return o
}

// TestTruncateReplicaFaults fails every file operation of a truncation in
// turn, once and for good; then the directory is opened with the real file
// system, and: it opens; its log is a prefix of the log before (never a
// byte that was not there, never a record the truncation had cut and
// something then brought back); it ends at the offset asked for, or, after
// a failure, somewhere from the base of that offset's segment to the old
// end; a restart leaves it sound (Verify); and a truncation run without a
// failure ends exactly at the offset.
func TestTruncateReplicaFaults(t *testing.T) {
	template := t.TempDir()
	master := openStore(t, faultOptions(t, filepath.Join(template, "m"), nil))
	for i := range 60 {
		m := msg(fmt.Sprintf("T%d", i%3), 0, faultBody(i), message.PropKeys, fmt.Sprintf("k%d", i))
		m.NoWait = true
		if _, err := master.Put(m); err != nil {
			t.Fatal(err)
		}
	}
	rdir := filepath.Join(template, "r")
	replica := openStore(t, truncFaultOptions(t, rdir, nil))
	copyLogTo(t, master, replica, master.WrittenOffset())
	waitDispatched(t, replica)
	before := logBytes(t, replica)
	seg := replica.SegmentSize()
	// Cut inside the second segment: the third goes whole.
	var off int64
	c := replica.log.NewCursor(seg)
	for range 3 {
		_, o, err := c.Next()
		if err != nil {
			t.Fatal(err)
		}
		off = o
	}
	c.Close()
	if int64(len(before)) < 2*seg || off <= seg {
		t.Fatalf("log of %d bytes, cut at %d: want three segments and a cut in the second", len(before), off)
	}
	replica.Close()
	master.Close()

	modes := []errorfs.Mode{errorfs.Once, errorfs.Stop}
	errorfs.Walk(t, vfs.Default, modes, func(t *testing.T, fsys *errorfs.FS, dir string) {
		copyStore(t, rdir, dir)
		sw := &switchFS{plain: vfs.Default, fault: fsys}
		s, _, err := Open(truncFaultOptions(t, dir, sw))
		if err != nil {
			t.Fatal(err)
		}
		sw.on.Store(true)
		tr, terr := s.TruncateReplica(off)
		sw.on.Store(false)
		if terr != nil && !errors.Is(terr, errorfs.ErrInjected) {
			t.Fatalf("truncation failed with %v, not the injected error", terr)
		}
		if terr == nil && tr.To != off {
			t.Fatalf("truncation %+v", tr)
		}
		s.Close()

		s, _, err = Open(truncFaultOptions(t, dir, nil))
		if err != nil {
			t.Fatalf("reopen: %v", err)
		}
		end := s.WrittenOffset()
		got := logBytes(t, s)
		s.Close()
		if !bytes.Equal(got, before[:len(got)]) {
			t.Fatal("the log after the truncation is not a prefix of the log before")
		}
		switch {
		case fsys.Fired() == nil || terr == nil:
			if end != off {
				t.Fatalf("end %d after a truncation that succeeded, want %d", end, off)
			}
		case end != off && (end < off-off%seg || end > int64(len(before))):
			t.Fatalf("end %d after a failed truncation to %d (old end %d)", end, off, len(before))
		}
		rep, err := Verify(context.Background(), truncFaultOptions(t, dir, nil))
		if err != nil {
			t.Fatal(err)
		}
		if !rep.OK() {
			t.Fatalf("unsound after reopening: %v", rep.Problems)
		}
	})
}
