package commitlog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/crashtest"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"golang.org/x/sys/unix"
)

const recycleSeg = 1 << 20

// recycleOptions: 1 MiB segments, retention by hand (every segment but the
// active one is old enough), a checkpoint only at Open and Close (so that
// after a crash everything written since Open lies past the synced
// position recovery knows of).
func recycleOptions(t testing.TB, dir string) Options {
	return Options{Dir: dir, SegmentSize: recycleSeg, RetentionInterval: -1, RetentionTime: time.Nanosecond,
		CheckpointInterval: time.Hour, Logger: testlog.New(t, "commitlog")}
}

// fillTo appends records with bodies of size bytes until the written
// position reaches target, recording each body by offset.
func fillTo(t testing.TB, l *Log, target int64, seq *int, size int, bodies map[int64][]byte) {
	t.Helper()
	var res Result
	for l.WrittenOffset() < target {
		body := bodyOf(*seq, size)
		*seq++
		res.Offsets = res.Offsets[:0]
		if err := l.Append(encode(t, "T", body), nil, &res); err != nil {
			t.Fatal(err)
		}
		bodies[res.Offsets[0]] = body
	}
}

// checkBodies reads every recorded body at or above the log's minimum
// offset, and walks the log: it must serve exactly those records.
func checkBodies(t testing.TB, l *Log, bodies map[int64][]byte) {
	t.Helper()
	var want []int64
	for off, body := range bodies {
		if off < l.MinOffset() {
			continue
		}
		want = append(want, off)
		v, err := l.ReadRecord(off)
		if err != nil {
			t.Fatalf("record at %d: %v", off, err)
		}
		m, err := message.Decode(v.Bytes(), true)
		if err != nil || m.PhysicalOffset() != off || !bytes.Equal(m.Body(), body) {
			t.Fatalf("record at %d: %v, or not the one appended", off, err)
		}
		v.Release()
	}
	slices.Sort(want)
	var got []int64
	c := l.NewCursor(l.MinOffset())
	defer c.Close()
	for {
		rec, off, err := c.Next()
		if errors.Is(err, ErrOffsetNotWritten) {
			break
		}
		if err != nil {
			t.Fatalf("cursor at %d: %v", off, err)
		}
		m, err := message.Decode(rec, true)
		if err != nil || m.PhysicalOffset() != off {
			t.Fatalf("served record at %d does not validate: %v", off, err)
		}
		got = append(got, off)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the log serves %d records, %d were appended (and kept)", len(got), len(want))
	}
}

func statSegment(t testing.TB, dir string, base int64) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, segmentName(base)))
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

func registered(t testing.TB, dir string) []int64 {
	t.Helper()
	bases, all, err := readRegistry(vfs.Default, dir)
	if err != nil || all {
		t.Fatalf("registry: %v (unreadable: %v)", err, all)
	}
	return bases
}

// recycledSetup writes segments 0 to 3 with bodies of oldSize bytes,
// retires 0 to 2 (the file of segment 2 goes to the pool), and writes with
// bodies of newSize bytes up to offset to (past 5 MiB: segment 4 is the
// fresh prepared one, segment 5 the recycled file of segment 2). It
// returns the open log, the recorded bodies and segment 2's file info.
func recycledSetup(t *testing.T, dir string, o Options, oldSize, newSize int, to int64) (*Log, map[int64][]byte, os.FileInfo) {
	t.Helper()
	l := openLog(t, o)
	bodies := map[int64][]byte{}
	seq := 0
	fillTo(t, l, 3*recycleSeg+1000, &seq, oldSize, bodies)
	settleAllocator(t, l) // segment 4, new
	old := statSegment(t, dir, 2*recycleSeg)
	mustFlush(t, l)
	removed, err := l.RetainBelow(l.WrittenOffset())
	if err != nil || len(removed) != 3 {
		t.Fatalf("retain: %v %v, want segments 0 to 2 removed", removed, err)
	}
	if _, err := os.Stat(filepath.Join(dir, poolName(2*recycleSeg))); err != nil {
		t.Fatalf("the newest retired file is not in the pool: %v", err)
	}
	for _, b := range []int64{0, recycleSeg} {
		if _, err := os.Stat(filepath.Join(dir, poolName(b))); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("pool holds more than RecycleSegments files: %s: %v", poolName(b), err)
		}
	}
	fillTo(t, l, to, &seq, newSize, bodies)
	return l, bodies, old
}

// TestRecycleReusesRetiredFile: the segment after retention is the retired
// file (same inode), registered while it may hold stale bytes and dropped
// from the registry once sealed and synced; every record reads back.
func TestRecycleReusesRetiredFile(t *testing.T) {
	dir := t.TempDir()
	l, bodies, old := recycledSetup(t, dir, recycleOptions(t, dir), 700, 1500, 5*recycleSeg+1000)
	defer l.Close()
	if !os.SameFile(old, statSegment(t, dir, 5*recycleSeg)) {
		t.Fatal("segment 5 is not the retired file of segment 2")
	}
	if got := registered(t, dir); !slices.Contains(got, 5*recycleSeg) {
		t.Fatalf("registry %v does not hold the recycled segment", got)
	}
	checkBodies(t, l, bodies)
	// Once segment 5 is sealed and synced it leaves the registry.
	seq := 1 << 20
	fillTo(t, l, 6*recycleSeg+1000, &seq, 1500, bodies)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	// The flusher prunes the registry right after the round that woke Flush.
	wait.For(t, "the sealed, synced segment 5 out of the registry", func() error {
		if got := registered(t, dir); slices.Contains(got, 5*recycleSeg) {
			return fmt.Errorf("registry %v", got)
		}
		return nil
	})
	checkBodies(t, l, bodies)
}

// TestRecycleDisabled: RecycleSegments < 0 unlinks retired files as before.
func TestRecycleDisabled(t *testing.T) {
	dir := t.TempDir()
	o := recycleOptions(t, dir)
	o.RecycleSegments = -1
	l := openLog(t, o)
	defer l.Close()
	seq, bodies := 0, map[int64][]byte{}
	fillTo(t, l, 3*recycleSeg+1000, &seq, 700, bodies)
	mustFlush(t, l)
	if _, err := l.RetainBelow(l.WrittenOffset()); err != nil {
		t.Fatal(err)
	}
	fillTo(t, l, 5*recycleSeg+1000, &seq, 700, bodies)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if _, ok := parseSegmentName(e.Name()); !ok && e.Name() != checkpointName && !e.IsDir() {
			t.Fatalf("unexpected file %s with recycling disabled", e.Name())
		}
	}
	checkBodies(t, l, bodies)
}

// TestRecycleCleanShutdownStaleTail: a clean shutdown inside a recycled
// segment whose older content (other record sizes, so stale records, a
// partial one and a stale blank-end marker lie after the end) is still
// there: the reopen is verified, loses nothing, and appends continue at the
// end.
func TestRecycleCleanShutdownStaleTail(t *testing.T) {
	dir := t.TempDir()
	l, bodies, _ := recycledSetup(t, dir, recycleOptions(t, dir), 700, 1900, 5*recycleSeg+300<<10)
	end := l.WrittenOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, segmentName(5*recycleSeg)))
	if err != nil {
		t.Fatal(err)
	}
	tail := b[end-5*recycleSeg:]
	if _, ok := message.IsBlank(tail); ok || lastNonZero(tail[:64]) < 0 || !bytes.Contains(tail, blankMagicBytes) {
		t.Fatal("the scenario needs stale bytes (no marker) right after the end and a stale blank-end marker later")
	}
	l2, rep, err := Open(recycleOptions(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if !rep.Verified || rep.Lost() || rep.End != end {
		t.Fatalf("reopen: %s; want verified, nothing lost, end %d", rep, end)
	}
	checkBodies(t, l2, bodies)
	var res Result
	if err := l2.Append(encode(t, "T", []byte("after")), nil, &res); err != nil || res.Offsets[0] != end {
		t.Fatalf("append after reopen at %v (%v), want %d", res.Offsets, err, end)
	}
	if got := registered(t, dir); len(got) != 0 {
		t.Fatalf("registry %v after recovery zeroed the tail", got)
	}
}

// TestRecycleCrashSyncFlush: a crash while writing into a recycled segment
// in sync mode: every acknowledged record is there, nothing stale is
// served, the end is right and no loss is reported below the synced
// position.
func TestRecycleCrashSyncFlush(t *testing.T) {
	dir := t.TempDir()
	o := recycleOptions(t, dir)
	o.FlushMode = FlushSync
	o.CheckpointInterval = time.Nanosecond
	l, bodies, _ := recycledSetup(t, dir, o, 700, 1300, 5*recycleSeg+200<<10)
	if err := l.Flush(); err != nil {
		t.Fatal(err)
	}
	end := l.WrittenOffset()
	l.simulateCrash()
	l2, rep, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if rep.End != end || rep.Damaged() || len(rep.SetAside) > 0 {
		t.Fatalf("recovery: %s; want end %d, no damage", rep, end)
	}
	for _, loss := range rep.Losses {
		if !loss.Unsynced || loss.Saved != "" || loss.From < end {
			t.Fatalf("loss %s: below the end, damage, or stale bytes saved", loss)
		}
	}
	checkBodies(t, l2, bodies)
}

// TestRecycleStaleMarkersAtEnd: after a crash, a stale blank-end marker or
// hole marker exactly where the new data ends (past the synced position)
// must neither close the segment nor be skipped as a hole.
func TestRecycleStaleMarkersAtEnd(t *testing.T) {
	for _, kind := range []string{"blank", "hole"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			l, bodies, _ := recycledSetup(t, dir, recycleOptions(t, dir), 700, 1500, 5*recycleSeg+100<<10)
			end := l.WrittenOffset()
			l.simulateCrash()
			patchFile(t, dir, 5*recycleSeg, end, func(b []byte) {
				if kind == "blank" {
					message.PutBlank(b, int32(6*recycleSeg-end))
				} else {
					message.PutHole(b, 4096)
				}
			})
			l2, rep, err := Open(recycleOptions(t, dir))
			if err != nil {
				t.Fatal(err)
			}
			defer l2.Close()
			if rep.End != end || rep.Holes != 0 || rep.Damaged() || len(rep.Losses) != 0 {
				t.Fatalf("recovery: %s; want end %d, no hole, nothing lost", rep, end)
			}
			checkBodies(t, l2, bodies)
			var res Result
			if err := l2.Append(encode(t, "T", []byte("after")), nil, &res); err != nil || res.Offsets[0] != end {
				t.Fatalf("append after recovery at %v (%v), want %d in the same segment", res.Offsets, err, end)
			}
		})
	}
}

// TestRecycleDamageBelowDurableIsAHole: a flipped byte in a synced record
// of a recycled segment still becomes a hole, the records after it kept.
func TestRecycleDamageBelowDurableIsAHole(t *testing.T) {
	dir := t.TempDir()
	l, bodies, _ := recycledSetup(t, dir, recycleOptions(t, dir), 700, 1500, 5*recycleSeg+200<<10)
	end := l.WrittenOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	var in5 []int64
	for off := range bodies {
		if off >= 5*recycleSeg {
			in5 = append(in5, off)
		}
	}
	slices.Sort(in5)
	bad := in5[len(in5)/2]
	patchFile(t, dir, 5*recycleSeg, bad, func(b []byte) { b[200] ^= 0xFF })
	l2, rep, err := Open(recycleOptions(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if rep.End != end || len(rep.Losses) != 1 {
		t.Fatalf("recovery: %s; want end %d and one hole", rep, end)
	}
	loss := rep.Losses[0]
	if loss.From != bad || loss.To != in5[len(in5)/2+1] || loss.Unsynced || loss.Saved == "" {
		t.Fatalf("loss %s, want the damaged record [%d, %d) as durable damage, saved", loss, bad, in5[len(in5)/2+1])
	}
	delete(bodies, bad)
	checkBodies(t, l2, bodies)
}

// TestRecyclePreparedSegmentAtCrash: the recycled file prepared as the
// next segment (full of an older segment's data) at a crash is dropped
// quietly (back to the pool): the log ends in the segment before it and
// nothing is set aside or counted as lost. The read-only open agrees.
func TestRecyclePreparedSegmentAtCrash(t *testing.T) {
	dir := t.TempDir()
	l, bodies, _ := recycledSetup(t, dir, recycleOptions(t, dir), 700, 1500, 4*recycleSeg+100<<10)
	settleAllocator(t, l)
	l.allocMu.Lock()
	p := l.prepared
	l.allocMu.Unlock()
	if p == nil || !p.recycled || p.base != 5*recycleSeg {
		t.Fatalf("prepared segment %+v, want the recycled segment 5", p)
	}
	end := l.WrittenOffset()
	l.simulateCrash()
	prepared := statSegment(t, dir, 5*recycleSeg)
	ro, rep, err := OpenReadOnly(recycleOptions(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	if rep.End != end || rep.Lost() || rep.DroppedSegments != 0 {
		t.Fatalf("read-only open: %s; want end %d, nothing lost", rep, end)
	}
	ro.Close()
	l2, rep, err := Open(recycleOptions(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if rep.End != end || rep.Lost() || rep.DroppedSegments != 0 || len(rep.SetAside) != 0 {
		t.Fatalf("recovery: %s; want end %d, nothing lost or set aside", rep, end)
	}
	if segs := l2.Segments(); segs[len(segs)-1] != 4*recycleSeg {
		t.Fatalf("segments %v, want the log to end in segment 4", segs)
	}
	if _, err := os.Stat(filepath.Join(dir, DamagedDir)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("something was set aside: %v", err)
	}
	checkBodies(t, l2, bodies)
	// The file went back to the pool (the allocator may have taken it
	// again already): it becomes segment 5 again.
	seq := 1 << 20
	fillTo(t, l2, 5*recycleSeg+1000, &seq, 1500, bodies)
	if !os.SameFile(prepared, statSegment(t, dir, 5*recycleSeg)) {
		t.Fatal("segment 5 is not the recycled file recovery returned to the pool")
	}
	checkBodies(t, l2, bodies)
}

// TestRecycleOpenTrimsPool: Open keeps the newest RecycleSegments pool
// files of the right size and removes the rest; with recycling disabled it
// removes them all.
func TestRecycleOpenTrimsPool(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, recycleOptions(t, dir))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	write := func(name string, size int64) {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(poolName(7*recycleSeg), recycleSeg)
	write(poolName(9*recycleSeg), recycleSeg)
	write(poolName(11*recycleSeg), 4096) // the wrong size
	write(poolPrefix+"junk", recycleSeg)
	pool := func() []string {
		var names []string
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), poolPrefix) {
				names = append(names, e.Name())
			}
		}
		return names
	}
	newest, err := os.Stat(filepath.Join(dir, poolName(9*recycleSeg)))
	if err != nil {
		t.Fatal(err)
	}
	l = openLog(t, recycleOptions(t, dir))
	// The allocator may already have made the kept file the next segment.
	if got := pool(); len(got) > 1 || len(got) == 1 && got[0] != poolName(9*recycleSeg) {
		t.Fatalf("pool after Open: %v, want only the newest file of the right size", got)
	}
	settleAllocator(t, l)
	if !os.SameFile(newest, statSegment(t, dir, recycleSeg)) {
		t.Fatal("the next segment is not the pool file Open kept")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	o := recycleOptions(t, dir)
	o.RecycleSegments = -1
	l = openLog(t, o)
	defer l.Close()
	if got := pool(); len(got) != 0 {
		t.Fatalf("pool after Open with recycling disabled: %v", got)
	}
}

// TestRecycleUnreadableRegistry: a damaged registry makes recovery treat
// every segment as recycled: the crash case of TestRecycleStaleMarkersAtEnd
// still ends right.
func TestRecycleUnreadableRegistry(t *testing.T) {
	dir := t.TempDir()
	l, bodies, _ := recycledSetup(t, dir, recycleOptions(t, dir), 700, 1500, 5*recycleSeg+100<<10)
	end := l.WrittenOffset()
	l.simulateCrash()
	patchFile(t, dir, 5*recycleSeg, end, func(b []byte) { message.PutBlank(b, int32(6*recycleSeg-end)) })
	if err := os.WriteFile(filepath.Join(dir, recycledName), []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	l2, rep, err := Open(recycleOptions(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if rep.End != end || rep.Damaged() {
		t.Fatalf("recovery: %s; want end %d", rep, end)
	}
	checkBodies(t, l2, bodies)
}

// TestRecycleReplica: a replica's log recycles too (AppendReplica into a
// recycled segment); after a crash it holds the master's records.
func TestRecycleReplica(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	master := openLog(t, replicaOptions(t.TempDir()))
	defer master.Close()
	dir := t.TempDir()
	ro := replicaOptions(dir)
	ro.RetentionTime = time.Nanosecond
	replica := openLog(t, ro)
	chunk := func() int { return 1 + rng.IntN(20000) }
	fillLog(t, master, 120, rng)
	stream(t, master, replica, 0, master.WrittenOffset(), chunk)
	mustFlush(t, replica)
	if _, err := replica.RetainBelow(replica.WrittenOffset()); err != nil {
		t.Fatal(err)
	}
	from := master.WrittenOffset()
	fillLog(t, master, 150, rng)
	stream(t, master, replica, from, master.WrittenOffset(), chunk)
	recycled := false
	for _, s := range *replica.segs.Load() {
		recycled = recycled || s.recycled
	}
	if !recycled {
		t.Fatal("no replica segment is a recycled file")
	}
	end := replica.WrittenOffset()
	replica.simulateCrash()
	replica, rep, err := Open(ro)
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	if rep.End != end || rep.Damaged() {
		t.Fatalf("replica recovery: %s; want end %d", rep, end)
	}
	sameRecords(t, master, replica, replica.MinOffset(), end)
	from = master.WrittenOffset()
	fillLog(t, master, 40, rng)
	stream(t, master, replica, from, master.WrittenOffset(), chunk)
	sameRecords(t, master, replica, replica.MinOffset(), replica.WrittenOffset())
}

// sameRecords walks both logs over [from, to): the same records at the
// same offsets (markers' padding is not compared: a recycled file keeps
// stale bytes there).
func sameRecords(t testing.TB, a, b *Log, from, to int64) {
	t.Helper()
	ca, cb := a.NewCursor(from), b.NewCursor(from)
	defer ca.Close()
	defer cb.Close()
	for {
		ra, oa, ea := ca.Next()
		rb, ob, eb := cb.Next()
		if oa >= to && ob >= to {
			return
		}
		if ea != nil || eb != nil || oa != ob || !bytes.Equal(ra, rb) {
			t.Fatalf("logs differ: %d (%v) against %d (%v)", oa, ea, ob, eb)
		}
	}
}

const recycleCrashEnv = "APOGEE_COMMITLOG_RECYCLE_CRASH_DIR"

// TestRecycleCrashChild is the child of TestRecycleCrashSIGKILL: it appends
// in sync mode from 4 goroutines, keeps only the last two segments
// (RetainBelow), so that every new segment is a recycled file, and prints
// one line per acknowledged record until killed.
func TestRecycleCrashChild(t *testing.T) {
	dir := os.Getenv(recycleCrashEnv)
	if dir == "" {
		t.Skip("run by TestRecycleCrashSIGKILL")
	}
	o := Options{Dir: dir, SegmentSize: 256 << 10, FlushMode: FlushSync, RetentionInterval: -1, RetentionTime: time.Nanosecond}
	appendUntilKilled(o, 4, func(l *Log, g, i int) {
		if g == 0 && i%16 == 0 {
			// Keep the active segment and the one before it.
			w := l.WrittenOffset()
			if _, err := l.RetainBelow(w - w%o.SegmentSize - o.SegmentSize); err != nil {
				fmt.Fprintln(os.Stderr, "retain:", err)
				os.Exit(5)
			}
		}
	})
}

// TestRecycleCrashSIGKILL kills a process that appends in sync mode into
// recycled segments at random moments; after each kill every acknowledged
// record not retained away is there intact, nothing invalid or stale is
// served, and recovery reports no damage.
func TestRecycleCrashSIGKILL(t *testing.T) {
	if os.Getenv(recycleCrashEnv) != "" {
		t.Skip("child")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	var all []ack
	recycledSeen := false
	for round := 0; round < 12; round++ {
		acks := runRecycleChild(t, dir, time.Duration(100+rng.IntN(300))*time.Millisecond)
		all = append(all, acks...)
		if regs, _, _ := readRegistry(vfs.Default, dir); len(regs) > 0 {
			recycledSeen = true
		}
		l, rep, err := Open(Options{Dir: dir, SegmentSize: 256 << 10, FlushMode: FlushSync, RetentionInterval: -1})
		if err != nil {
			t.Fatalf("round %d: reopen: %v", round, err)
		}
		if rep.Damaged() || len(rep.SetAside) > 0 {
			t.Fatalf("round %d: recovery reports damage: %s", round, rep)
		}
		for _, a := range all {
			if a.offset < l.MinOffset() {
				continue
			}
			v, err := l.ReadRecord(a.offset)
			if err != nil {
				t.Fatalf("round %d: acknowledged record at %d lost: %v (%s)", round, a.offset, err, rep)
			}
			m, err := message.Decode(v.Bytes(), true)
			if err != nil || len(v.Bytes()) != a.size || bodyHash(m.Body()) != a.hash {
				t.Fatalf("round %d: acknowledged record at %d differs: %v", round, a.offset, err)
			}
			v.Release()
		}
		checkAllValid(t, l)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if !recycledSeen {
		t.Fatal("no round was killed while a recycled segment was registered")
	}
}

func runRecycleChild(t *testing.T, dir string, after time.Duration) []ack {
	t.Helper()
	var acks []ack
	crashtest.KillAfter(t, "TestRecycleCrashChild", []string{recycleCrashEnv + "=" + dir}, after, 30*time.Second, func(line string) {
		var a ack
		if _, err := fmt.Sscanf(line, "ack %d %d %d", &a.offset, &a.size, &a.hash); err == nil {
			acks = append(acks, a)
		}
	})
	return acks
}

// TestRecycleColdFileIsZeroed: a pool file whose pages were evicted from
// the page cache is zeroed when it is reused (reading it back would cost
// more than new pages): it still is the retired file, its records read
// back, and after a crash recovery ends right with nothing lost.
func TestRecycleColdFileIsZeroed(t *testing.T) {
	dir := t.TempDir()
	// Segment 3 active, 4 prepared (new): the pool file (segment 2's) is
	// not reused before the writer takes 4. Evict its pages (synced first:
	// dirty pages stay).
	l, bodies, old := recycledSetup(t, dir, recycleOptions(t, dir), 700, 1500, 3*recycleSeg+2000)
	f, err := os.Open(filepath.Join(dir, poolName(2*recycleSeg)))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	f.Close()
	l.allocMu.Lock()
	p := l.prepared
	l.allocMu.Unlock()
	if p != nil && p.base == 5*recycleSeg {
		t.Skip("the allocator reused the file before its pages could be evicted")
	}
	seq := 1 << 20
	fillTo(t, l, 5*recycleSeg+100<<10, &seq, 1500, bodies)
	segs := *l.segs.Load()
	s := segs[len(segs)-1]
	if !s.recycled || !os.SameFile(old, statSegment(t, dir, 5*recycleSeg)) {
		t.Fatal("segment 5 is not the recycled file")
	}
	if s.oldData {
		t.Skip("the kernel kept the evicted pages cached; nothing to observe")
	}
	end := l.WrittenOffset()
	if tail := s.data[end-s.base:]; lastNonZero(tail) >= 0 {
		t.Fatal("the cold recycled file was not zeroed past the written position")
	}
	checkBodies(t, l, bodies)
	l.simulateCrash()
	l2, rep, err := Open(recycleOptions(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if rep.End != end || rep.Lost() {
		t.Fatalf("recovery: %s; want end %d, nothing lost", rep, end)
	}
	checkBodies(t, l2, bodies)
}

// TestRecycleNotUnderDiskPressure: retention for disk pressure first
// unlinks the files kept for recycling (and deletes no segment when that
// was enough), and unlinks the files of the segments it deletes.
func TestRecycleNotUnderDiskPressure(t *testing.T) {
	dir := t.TempDir()
	fsys := errorfs.New(vfs.Default)
	o := recycleOptions(t, dir)
	o.RetentionTime = time.Hour
	o.FS = fsys
	l := openLog(t, o)
	defer l.Close()
	seq, bodies := 0, map[int64][]byte{}
	fillTo(t, l, 3*recycleSeg+1000, &seq, 700, bodies)
	settleAllocator(t, l)
	// A pool file, as a time-based retention would have left.
	mustFlush(t, l)
	l.opts.RetentionTime = time.Nanosecond
	if removed, err := l.RetainBelow(recycleSeg); err != nil || len(removed) != 1 {
		t.Fatalf("retain: %v %v", removed, err)
	}
	l.opts.RetentionTime = time.Hour
	pooled := filepath.Join(dir, poolName(0))
	if _, err := os.Stat(pooled); err != nil {
		t.Fatal(err)
	}
	// Over the ratio until the pool file is gone: nothing else is deleted.
	fsys.SetDiskUsage(func(string) (float64, error) {
		if _, err := os.Stat(pooled); err == nil {
			return 0.99, nil
		}
		return 0.5, nil
	})
	if removed, err := l.Retain(); err != nil || len(removed) != 0 {
		t.Fatalf("retain under pressure deleted %v (%v), want only the pool file gone", removed, err)
	}
	if _, err := os.Stat(pooled); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("pool file still there under pressure: %v", err)
	}
	// Still over the ratio: a segment goes, and its file is unlinked.
	fsys.SetDiskUsage(func(string) (float64, error) { return 0.99, nil })
	removed, err := l.RetainBelow(2 * recycleSeg)
	if err != nil || len(removed) != 1 || !removed[0].Pressure {
		t.Fatalf("retain under pressure: %v %v, want segment 1 deleted", removed, err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), poolPrefix) || e.Name() == segmentName(recycleSeg) {
			t.Fatalf("%s kept after a deletion for disk pressure", e.Name())
		}
	}
	checkBodies(t, l, bodies)
}
