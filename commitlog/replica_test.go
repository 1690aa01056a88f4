package commitlog

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/message"
)

// replicaOptions: small segments, no background retention (the test
// machine's disk is fuller than the default usage ratio).
func replicaOptions(dir string) Options {
	return Options{Dir: dir, SegmentSize: MinSegmentSize, RetentionInterval: -1}
}

// fillLog appends n records of varied sizes (singles and batches) and
// returns their offsets.
func fillLog(t testing.TB, l *Log, n int, rng *rand.Rand) []int64 {
	t.Helper()
	var offs []int64
	for i := 0; i < n; {
		k := 1 + rng.IntN(4)
		var batch []byte
		for j := 0; j < k && i < n; j++ {
			batch = append(batch, encode(t, "T", bodyOf(i, 1+rng.IntN(3000)))...)
			i++
		}
		var res Result
		if err := l.Append(batch, nil, &res); err != nil {
			t.Fatal(err)
		}
		offs = append(offs, res.Offsets...)
	}
	return offs
}

// stream copies master's bytes [from, to) into replica through
// AppendReplica in chunks of the sizes chunk returns, as the HA client does:
// bytes not consumed (a record cut by a chunk) go again with the next chunk.
func stream(t testing.TB, master, replica *Log, from, to int64, chunk func() int) {
	t.Helper()
	size := master.SegmentSize()
	var pend []byte
	pendOff, pos := from, from
	for end := to; pos < end; {
		n := int64(chunk())
		n = min(n, end-pos, pos-pos%size+size-pos)
		v, err := master.Read(pos, int(n))
		if err != nil {
			t.Fatal(err)
		}
		pend = append(pend, v.Bytes()...)
		v.Release()
		pos += n
		k, err := replica.AppendReplica(pendOff, pend)
		if err != nil {
			t.Fatalf("append replica at %d (%d bytes): %v", pendOff, len(pend), err)
		}
		pend = append(pend[:0], pend[k:]...)
		pendOff += int64(k)
	}
	if len(pend) != 0 {
		t.Fatalf("%d bytes left unconsumed at %d", len(pend), pendOff)
	}
}

// sameBytes compares the two logs' bytes over [from, to), except the ranges
// in skip (a hole's damaged bytes, which are not replicated).
func sameBytes(t testing.TB, a, b *Log, from, to int64, skip ...[2]int64) {
	t.Helper()
	size := a.SegmentSize()
	for off := from; off < to; {
		n := min(to-off, off-off%size+size-off)
		va, err := a.Read(off, int(n))
		if err != nil {
			t.Fatal(err)
		}
		vb, err := b.Read(off, int(n))
		if err != nil {
			t.Fatal(err)
		}
		ab, bb := bytes.Clone(va.Bytes()), bytes.Clone(vb.Bytes())
		va.Release()
		vb.Release()
		for _, s := range skip {
			for p := max(s[0], off); p < min(s[1], off+n); p++ {
				ab[p-off], bb[p-off] = 0, 0
			}
		}
		if !bytes.Equal(ab, bb) {
			i := 0
			for ab[i] == bb[i] {
				i++
			}
			t.Fatalf("logs differ at %d", off+int64(i))
		}
		off += n
	}
}

func TestAppendReplicaCopiesLog(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	master := openLog(t, replicaOptions(t.TempDir()))
	defer master.Close()
	offs := fillLog(t, master, 300, rng)
	// Damage a record in the middle and let the master cover it with a hole,
	// as its scrubber would: the hole marker is part of the stream.
	victim := offs[150]
	seg, err := master.pin(victim)
	if err != nil {
		t.Fatal(err)
	}
	seg.data[victim-seg.base+message.OffMagic] ^= 0xFF
	seg.m.Release()
	loss, err := master.Quarantine(victim)
	if err != nil {
		t.Fatal(err)
	}
	fillLog(t, master, 300, rng)

	dir := t.TempDir()
	replica := openLog(t, replicaOptions(dir))
	for _, chunk := range []func() int{
		func() int { return 1 + rng.IntN(40) },     // cuts every header
		func() int { return 1 + rng.IntN(20000) },  // cuts records
		func() int { return 1 << 20 },              // whole segments
		func() int { return 1 + rng.IntN(64<<10) }, // anything
	} {
		from := replica.WrittenOffset()
		stream(t, master, replica, from, master.WrittenOffset(), chunk)
		fillLog(t, master, 50, rng)
	}
	stream(t, master, replica, replica.WrittenOffset(), master.WrittenOffset(), func() int { return 4096 })
	end := master.WrittenOffset()
	if got := replica.WrittenOffset(); got != end {
		t.Fatalf("replica ends at %d, master at %d", got, end)
	}
	hole := [2]int64{loss.From + message.BlankHeaderSize, loss.To}
	sameBytes(t, master, replica, 0, end, hole)
	// 800 records but the damaged one.
	if a, b := readAll(t, master), readAll(t, replica); len(a) != len(b) || len(a) != 799 {
		t.Fatalf("master has %d records, replica %d", len(a), len(b))
	}
	if err := replica.WaitFlushed(end); err != nil {
		t.Fatal(err)
	}
	if err := replica.Close(); err != nil {
		t.Fatal(err)
	}
	replica, rep, err := Open(replicaOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	if !rep.Verified || rep.End != end {
		t.Fatalf("replica reopened: %s", rep)
	}
	sameBytes(t, master, replica, 0, end, hole)
}

// TestAppendReplicaPadding feeds a blank-end marker and the zeros after it in
// separate calls: the log moves to the next segment at the marker, and the
// padding may still arrive afterwards.
func TestAppendReplicaPadding(t *testing.T) {
	master := openLog(t, replicaOptions(t.TempDir()))
	defer master.Close()
	replica := openLog(t, replicaOptions(t.TempDir()))
	defer replica.Close()
	rec := encode(t, "T", make([]byte, 20000))
	for master.WrittenOffset() < MinSegmentSize {
		if err := master.Append(bytes.Clone(rec), nil, &Result{}); err != nil {
			t.Fatal(err)
		}
	}
	// Find the marker: the last record of the first segment ends there.
	c := master.NewCursor(0)
	var blank int64
	for {
		r, off, err := c.Next()
		if err != nil {
			t.Fatal(err)
		}
		if off >= MinSegmentSize {
			break
		}
		blank = off + int64(len(r))
	}
	c.Close()
	stream(t, master, replica, 0, blank, func() int { return int(blank) })
	if replica.WrittenOffset() != blank {
		t.Fatalf("replica at %d, want %d", replica.WrittenOffset(), blank)
	}
	v, err := master.Read(blank, int(MinSegmentSize-blank))
	if err != nil {
		t.Fatal(err)
	}
	b := bytes.Clone(v.Bytes())
	v.Release()
	// The marker and 3 bytes of padding.
	n, err := replica.AppendReplica(blank, b[:message.BlankHeaderSize+3])
	if err != nil || n != message.BlankHeaderSize+3 {
		t.Fatalf("marker: %d, %v", n, err)
	}
	if replica.WrittenOffset() != MinSegmentSize {
		t.Fatalf("replica at %d after the marker, want the next segment", replica.WrittenOffset())
	}
	// The rest of the padding, then the next segment's first record, in one call.
	v, err = master.Read(MinSegmentSize, len(rec))
	if err != nil {
		t.Fatal(err)
	}
	more := append(b[message.BlankHeaderSize+3:], v.Bytes()...)
	v.Release()
	n, err = replica.AppendReplica(blank+message.BlankHeaderSize+3, more)
	if err != nil || n != len(more) {
		t.Fatalf("padding and record: %d of %d, %v", n, len(more), err)
	}
	// The padding is behind us now.
	if _, err := replica.AppendReplica(blank+message.BlankHeaderSize+4, b[4:5]); !errors.Is(err, ErrReplicaOffset) {
		t.Fatalf("padding again: %v", err)
	}
	sameBytes(t, master, replica, 0, MinSegmentSize+int64(len(rec)))
}

func TestAppendReplicaRejects(t *testing.T) {
	master := openLog(t, replicaOptions(t.TempDir()))
	defer master.Close()
	fillLog(t, master, 10, rand.New(rand.NewPCG(3, 4)))
	v, err := master.Read(0, int(master.WrittenOffset()))
	if err != nil {
		t.Fatal(err)
	}
	good := bytes.Clone(v.Bytes())
	v.Release()
	first := int(message.ReadTotalSize(good))

	cases := []struct {
		name     string
		off      int64
		data     func() []byte
		err      error
		consumed int
	}{
		{"wrong offset", 100, func() []byte { return good }, ErrReplicaOffset, 0},
		{"bad crc in the second record", 0, func() []byte {
			b := bytes.Clone(good)
			b[first+88] ^= 0x55 // the second record's first body byte
			return b
		}, ErrReplicaData, first},
		{"wrong physical offset", 0, func() []byte {
			b := bytes.Clone(good)
			message.SetPhysicalOffset(b[first:], 12345)
			return b
		}, ErrReplicaData, first},
		{"bad magic", 0, func() []byte {
			b := bytes.Clone(good)
			b[first+message.OffMagic] = 0
			return b
		}, ErrReplicaData, first},
		{"blank of the wrong size", 0, func() []byte {
			return message.AppendBlank(bytes.Clone(good[:first]), 64)
		}, ErrReplicaData, first},
		{"record overrunning the segment", 0, func() []byte {
			b := bytes.Clone(good[:first+8])
			copy(b[first:], []byte{0, 0x01, 0, 0}) // 65536 bytes
			copy(b[first+4:], []byte{0xDA, 0xA3, 0x20, 0xA7})
			return b
		}, ErrReplicaData, first},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			replica := openLog(t, replicaOptions(t.TempDir()))
			defer replica.Close()
			n, err := replica.AppendReplica(tc.off, tc.data())
			if !errors.Is(err, tc.err) || n != tc.consumed {
				t.Fatalf("consumed %d, %v; want %d, %v", n, err, tc.consumed, tc.err)
			}
			if replica.WrittenOffset() != int64(tc.consumed) {
				t.Fatalf("written %d, want %d", replica.WrittenOffset(), tc.consumed)
			}
		})
	}
}

func TestRestartAt(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, replicaOptions(dir))
	fillLog(t, l, 100, rand.New(rand.NewPCG(5, 6)))
	oldSegs := l.Segments()
	held, err := l.ReadRecord(0)
	if err != nil {
		t.Fatal(err)
	}
	heldCopy := bytes.Clone(held.Bytes())
	if _, err := l.RestartAt(l.WrittenOffset()); err == nil {
		t.Fatal("restart inside the log accepted")
	}
	base := (int64(len(oldSegs)) + 3) * MinSegmentSize
	aside, err := l.RestartAt(base)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(held.Bytes(), heldCopy) {
		t.Fatal("a view of the old log changed")
	}
	held.Release()
	if l.MinOffset() != base || l.WrittenOffset() != base || l.FlushedOffset() != base {
		t.Fatalf("after restart: min %d written %d flushed %d, want %d", l.MinOffset(), l.WrittenOffset(), l.FlushedOffset(), base)
	}
	if _, err := l.Read(0, 10); !errors.Is(err, ErrOffsetDeleted) {
		t.Fatalf("read of the old log: %v", err)
	}
	for _, b := range oldSegs {
		if _, err := os.Stat(filepath.Join(aside, segmentName(b))); err != nil {
			t.Fatalf("old segment not set aside: %v", err)
		}
	}
	// The restarted segment, and maybe the next one, prepared ahead.
	if names, _ := listSegments(vfs.Default, dir); len(names) == 0 || names[0] != base || names[len(names)-1] > base+MinSegmentSize {
		t.Fatalf("segments after restart: %v", names)
	}
	// Records replicated from a master at base append normally.
	master := openLog(t, replicaOptions(t.TempDir()))
	defer master.Close()
	fillLog(t, master, 3, rand.New(rand.NewPCG(7, 8)))
	v, err := master.Read(0, int(master.WrittenOffset()))
	if err != nil {
		t.Fatal(err)
	}
	recs := bytes.Clone(v.Bytes())
	v.Release()
	for off := 0; off < len(recs); {
		size := int(message.ReadTotalSize(recs[off:]))
		message.SetPhysicalOffset(recs[off:], base+int64(off))
		off += size
	}
	if n, err := l.AppendReplica(base, recs); err != nil || n != len(recs) {
		t.Fatalf("append after restart: %d, %v", n, err)
	}
	end := l.WrittenOffset()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, rep, err := Open(replicaOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if !rep.Verified || l.MinOffset() != base || l.WrittenOffset() != end {
		t.Fatalf("reopened: min %d, %s", l.MinOffset(), rep)
	}

	// An empty log restarts without keeping anything.
	empty := openLog(t, replicaOptions(t.TempDir()))
	defer empty.Close()
	if aside, err := empty.RestartAt(5 * MinSegmentSize); err != nil || aside != "" {
		t.Fatalf("restart of an empty log: %q, %v", aside, err)
	}
	if names, _ := listSegments(vfs.Default, empty.Dir()); len(names) == 0 || names[0] != 5*MinSegmentSize {
		t.Fatalf("segments: %v", names)
	}
}

// TestRestartAtCrashStates opens the directory as a crash during RestartAt
// would leave it at each step: every state opens, without AcceptLoss.
func TestRestartAtCrashStates(t *testing.T) {
	build := func(t *testing.T) (string, []int64, int64) {
		dir := t.TempDir()
		l := openLog(t, replicaOptions(dir))
		fillLog(t, l, 100, rand.New(rand.NewPCG(9, 10)))
		end := l.WrittenOffset()
		segs := l.Segments()
		l.simulateCrash()
		// RestartAt drops the segment prepared ahead first.
		all, err := listSegments(vfs.Default, dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range all[len(segs):] {
			if err := os.Remove(filepath.Join(dir, segmentName(b))); err != nil {
				t.Fatal(err)
			}
		}
		// The first step: the checkpoint no longer records the old log.
		c, _, _, err := openCheckpoint(vfs.Default, dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.write(checkpointState{time: time.Now().UnixMilli()}); err != nil {
			t.Fatal(err)
		}
		c.close()
		return dir, segs, end
	}
	base := func(segs []int64) int64 { return segs[len(segs)-1] + 4*MinSegmentSize }
	move := func(t *testing.T, dir string, segs []int64) {
		aside := filepath.Join(dir, DiscardedDir, "1")
		if err := os.MkdirAll(aside, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, b := range segs {
			if err := os.Rename(filepath.Join(dir, segmentName(b)), filepath.Join(aside, segmentName(b))); err != nil {
				t.Fatal(err)
			}
		}
	}
	newSeg := func(t *testing.T, dir string, b int64, name string) {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(filepath.Join(dir, name), MinSegmentSize); err != nil {
			t.Fatal(err)
		}
	}
	check := func(t *testing.T, dir string, wantMin, wantEnd int64) {
		l, rep, err := Open(replicaOptions(dir))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		if l.MinOffset() != wantMin || l.WrittenOffset() != wantEnd {
			t.Fatalf("opened at [%d, %d), want [%d, %d): %s", l.MinOffset(), l.WrittenOffset(), wantMin, wantEnd, rep)
		}
	}
	t.Run("checkpoint reset, new segment under its temporary name", func(t *testing.T) {
		dir, segs, end := build(t)
		newSeg(t, dir, base(segs), segmentName(base(segs))+restartSuffix)
		check(t, dir, 0, end)
	})
	t.Run("some segments moved", func(t *testing.T) {
		dir, segs, end := build(t)
		move(t, dir, segs[:2])
		check(t, dir, segs[2], end)
	})
	t.Run("all segments moved", func(t *testing.T) {
		dir, segs, _ := build(t)
		newSeg(t, dir, base(segs), segmentName(base(segs))+restartSuffix)
		move(t, dir, segs)
		check(t, dir, 0, 0)
	})
	t.Run("new segment named", func(t *testing.T) {
		dir, segs, _ := build(t)
		move(t, dir, segs)
		newSeg(t, dir, base(segs), segmentName(base(segs)))
		check(t, dir, base(segs), base(segs))
	})
}

func TestWrittenAfter(t *testing.T) {
	l := openLog(t, replicaOptions(t.TempDir()))
	select {
	case <-l.WrittenAfter(-1):
	default:
		t.Fatal("not closed for a position already passed")
	}
	ch := l.WrittenAfter(0)
	ch2 := l.WrittenAfter(0)
	select {
	case <-ch:
		t.Fatal("closed before an append")
	default:
	}
	if err := l.Append(encode(t, "T", []byte("x")), nil, &Result{}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []<-chan struct{}{ch, ch2} {
		select {
		case <-c:
		case <-time.After(5 * time.Second):
			t.Fatal("not woken by an append")
		}
	}
	ch = l.WrittenAfter(l.WrittenOffset())
	l.Close()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by Close")
	}
}
