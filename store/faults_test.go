package store

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
)

// faultQueues are the queues the fault workload writes to, in turn.
var faultQueues = []struct {
	topic string
	id    int32
}{{"T", 0}, {"T", 1}, {"U", 0}}

type qpos struct {
	topic string
	id    int32
	off   int64
}

type ack struct {
	body  string
	clOff int64 // its commit-log offset
}

// storeRun is one run of the store's fault workload: what was acknowledged
// (Put returned StatusOK in sync mode), by queue position, and every body
// ever put (an unacknowledged message may still be stored).
type storeRun struct {
	t      *testing.T
	fsys   *errorfs.FS
	acked  map[qpos]ack
	tried  map[string]bool
	failed bool // a Put returned ErrLogFailed: every later Put must too
	seq    int
	// cleaned: retention removed the log below it. A message there may be
	// gone, or (its segment's unlink deferred by a reader, then a crash)
	// back in the log without its index entries.
	cleaned int64
}

func (r *storeRun) ok(what string, err error) bool {
	r.t.Helper()
	if err == nil {
		if r.failed && what == "put" {
			r.t.Fatalf("put succeeded after the log failed: ErrLogFailed must be sticky")
		}
		return true
	}
	if !errors.Is(err, errorfs.ErrInjected) {
		r.t.Fatalf("%s: %v: not the injected failure, or its cause was lost", what, err)
	}
	if r.failed && what == "put" && !errors.Is(err, commitlog.ErrLogFailed) {
		r.t.Fatalf("put after the log failed: %v, want ErrLogFailed", err)
	}
	if errors.Is(err, commitlog.ErrLogFailed) {
		r.failed = true
	}
	return false
}

// put stores n messages over the fault queues, each with a key of its own.
// Every fourth (and the last) waits for its flush; the three before it do
// not (NoWait) and are acknowledged by its flush, which covers them.
func (r *storeRun) put(s *Store, n int) {
	type put struct {
		p qpos
		a ack
	}
	var pending []put
	for k := range n {
		i := r.seq
		r.seq++
		q := faultQueues[i%len(faultQueues)]
		body := faultBody(i)
		r.tried[body] = true
		m := &Message{Topic: q.topic, QueueID: q.id, BornHost: born, BornTimestamp: 1, Body: []byte(body),
			Properties: props(message.PropKeys, fmt.Sprintf("key%d", i)), NoWait: i%4 != 3 && k != n-1}
		res, err := s.Put(m)
		if !r.ok("put", err) {
			continue
		}
		pending = append(pending, put{qpos{q.topic, q.id, res.QueueOffset}, ack{body, res.CommitLogOffset}})
		if !m.NoWait {
			if res.Status == StatusOK {
				for _, p := range pending {
					r.acked[p.p] = p.a
				}
			}
			pending = pending[:0]
		}
	}
}

// settle waits for the dispatcher to reach the log's end, which it must
// unless the disk is gone for good (then it may stall, and nobody waits for
// it).
func (r *storeRun) settle(s *Store) {
	p, _ := r.fsys.Point()
	wait.For(r.t, "dispatch to reach the log's end after a transient fault", func() error {
		if p.Mode == errorfs.Stop && r.fsys.Fired() != nil {
			return nil
		}
		if d, w := s.DispatchedOffset(), s.log.WrittenOffset(); d < w {
			return fmt.Errorf("dispatch at %d, log at %d", d, w)
		}
		return nil
	})
}

// serve reads every queue and checks what it serves: each message a valid
// record at the queue offset it was put at, the acknowledged one where one
// was, never a stranger. With complete, every acknowledged message not
// cleaned away must be served.
func (r *storeRun) serve(s *Store, complete bool) {
	t := r.t
	t.Helper()
	var res GetResult
	defer res.Release()
	served := map[qpos]bool{}
	for _, q := range faultQueues {
		hi := s.MaxOffset(q.topic, q.id)
		for off := s.MinOffset(q.topic, q.id); off < hi; {
			if err := s.Get(q.topic, q.id, off, 32, 1<<20, nil, &res); !r.ok("get", err) {
				return
			}
			for _, v := range res.Messages {
				m, err := message.Decode(v.Bytes(), true)
				if err != nil {
					t.Fatalf("%s/%d from %d served a bad record: %v", q.topic, q.id, off, err)
				}
				body, qoff := string(m.Body()), m.QueueOffset()
				if qoff < off || string(m.Topic()) != q.topic || m.QueueID() != q.id || !r.tried[body] {
					t.Fatalf("%s/%d from %d served %s/%d at %d: %.20q", q.topic, q.id, off, m.Topic(), m.QueueID(), qoff, body)
				}
				if a, ok := r.acked[qpos{q.topic, q.id, qoff}]; ok && a.body != body {
					t.Fatalf("%s/%d at %d serves %.20q, acknowledged %.20q there", q.topic, q.id, qoff, body, a.body)
				}
				served[qpos{q.topic, q.id, qoff}] = true
				off = qoff + 1
			}
			if res.NextOffset <= off && len(res.Messages) == 0 {
				t.Fatalf("%s/%d: Get from %d made no progress (%v)", q.topic, q.id, off, res.Status)
			}
			off = max(off, res.NextOffset)
			res.Release()
		}
	}
	if !complete {
		return
	}
	for p, a := range r.acked {
		if a.clOff >= max(r.cleaned, s.log.MinOffset()) && !served[p] {
			t.Fatalf("acknowledged %s/%d at %d (log offset %d) is not served (queue [%d, %d))", p.topic, p.id, p.off, a.clOff,
				s.MinOffset(p.topic, p.id), s.MaxOffset(p.topic, p.id))
		}
	}
}

// keys checks that a query by key serves only the message with that key,
// and with complete that it finds every acknowledged one not cleaned away.
func (r *storeRun) keys(s *Store, complete bool) {
	byBody := map[string]ack{}
	for _, a := range r.acked {
		byBody[a.body] = a
	}
	for i := 0; i < r.seq; i += 5 {
		key := fmt.Sprintf("key%d", i)
		body := faultBody(i)
		topic := faultQueues[i%len(faultQueues)].topic
		vs, err := s.QueryByKey(topic, key, 0, 1<<62, 4, nil)
		if !r.ok("query", err) {
			return
		}
		for _, v := range vs {
			m, err := message.Decode(v.Bytes(), true)
			if err != nil || string(m.Body()) != body {
				r.t.Fatalf("query for %s served another message: %v", key, err)
			}
			v.Release()
		}
		if a, ok := byBody[body]; complete && ok && len(vs) == 0 && a.clOff >= max(r.cleaned, s.log.MinOffset()) {
			r.t.Fatalf("%s: acknowledged message with %s (log offset %d) not found by key; log [%d, %d), index up to %d",
				s.Dir(), key, a.clOff, s.log.MinOffset(), s.log.WrittenOffset(), s.idx.MaxCommitLogOffset())
		}
	}
}

func faultBody(i int) string { return fmt.Sprintf("message %d %0*d", i, 3000, i) }

func (r *storeRun) clone() *storeRun {
	c := &storeRun{t: r.t, fsys: r.fsys, acked: map[qpos]ack{}, tried: r.tried, seq: r.seq, cleaned: r.cleaned}
	for k, v := range r.acked {
		c.acked[k] = v
	}
	return c
}

func faultOptions(t testing.TB, dir string, fsys vfs.FS) Options {
	return Options{
		Dir: dir, FS: fsys,
		SegmentSize: 72 << 10, MaxMessageSize: 4 << 10, FlushMode: FlushSync,
		ConsumeQueueEntries: 8, IndexSlots: 16, IndexMaxEntries: 24,
		CleanInterval: -1, FlushInterval: time.Hour, CheckpointInterval: time.Hour, ScrubRate: -1,
		Logger: faultLogger(t),
	}
}

// TestFaults fails every file operation of a store's life, one at a time,
// once (a transient fault) and for good. The workload: open a new store;
// put (sync mode) across three queues with a key each, crossing commit-log
// segments, consume-queue files and index files; let dispatch catch up;
// read every queue and query keys; flush the consume queues and the index
// and write the checkpoint (what the store's maintenance does); clean with
// the disk reported full (retention of the oldest segment, then of the
// consume-queue and index files below it); copy the directory as a crash
// leaves it; put more; close. Then reopen (the clean path) and open the
// copy (recovery after a crash: re-dispatch from the checkpoint), put, read
// and close each. After each run both are opened with the real file system,
// and:
//
//   - every error returned is the injected one, with its cause; after a
//     failed sync every Put fails with ErrLogFailed (sticky);
//   - every acknowledged message not cleaned away is visible at the queue
//     offset it was given, and is served as it was put;
//   - nothing served is wrong: every record validates and is one that was
//     put at that queue offset; a query by key serves only that message;
//   - no file, lock, mapping or goroutine outlives Close (or a failed Open).
func TestFaults(t *testing.T) {
	modes := []errorfs.Mode{errorfs.Once, errorfs.Stop}
	errorfs.Walk(t, vfs.Default, modes, func(t *testing.T, fsys *errorfs.FS, dir string) {
		defer func(d time.Duration) { retryDelay = d }(retryDelay)
		retryDelay = time.Millisecond
		goroutines := runtime.NumGoroutine()
		r := &storeRun{t: t, fsys: fsys, acked: map[qpos]ack{}, tried: map[string]bool{}}
		fsys.SetDiskUsage(func(string) (float64, error) { return 0.99, nil })
		dirA, dirB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		var rb *storeRun

		if s, _, err := Open(faultOptions(t, dirA, fsys)); r.ok("open", err) {
			r.put(s, 48) // two and a half segments, three queue files each, two index files
			r.settle(s)
			r.serve(s, false)
			r.keys(s, false)
			r.ok("flush", s.flushDirty())
			r.ok("checkpoint", s.flushDerived())
			_, err := s.Clean()
			r.ok("clean", err)
			r.cleaned = s.log.MinOffset()
			r.settle(s)
			copyStore(t, dirA, dirB)
			rb = r.clone()
			r.put(s, 6)
			r.settle(s)
			r.serve(s, false)
			r.ok("close", s.Close())
		}
		fsys.CheckReleased(t, goroutines)
		r.failed = false
		if s, _, err := Open(faultOptions(t, dirA, fsys)); r.ok("reopen", err) {
			r.put(s, 6)
			r.settle(s)
			r.serve(s, false)
			r.ok("close", s.Close())
		}
		fsys.CheckReleased(t, goroutines)
		if rb != nil {
			if s, _, err := Open(faultOptions(t, dirB, fsys)); rb.ok("open copy", err) {
				rb.put(s, 6)
				rb.settle(s)
				rb.serve(s, false)
				rb.ok("close", s.Close())
			}
			fsys.CheckReleased(t, goroutines)
		}

		complete := fsys.Fired() == nil
		checkStore(t, dirA, r, complete)
		if rb != nil {
			checkStore(t, dirB, rb, complete)
		}
	})
}

// checkStore opens dir with the real file system and checks it.
func checkStore(t *testing.T, dir string, r *storeRun, complete bool) {
	t.Helper()
	s, _, err := Open(faultOptions(t, dir, nil))
	if err != nil {
		t.Fatalf("reopen %s: %v", dir, err)
	}
	defer s.Close()
	r.t, r.failed = t, false
	r.serve(s, true)
	r.keys(s, complete)
}

// copyStore copies a store's directory as the page cache holds it (what a
// crash of the process at this moment leaves), without its lock file. The
// store may still be unlinking retained files, and file after file is not
// one instant: the copy goes against the order things happen in, so that
// what it takes is a state a crash can leave. The store's checkpoint first,
// then the consume queues and the index (derived after the log, each
// cleaned oldest file first: copied newest first), then the commit log's
// checkpoint and its segments (newest first).
func copyStore(t *testing.T, from, to string) {
	t.Helper()
	var files []string
	err := filepath.WalkDir(from, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if rel != "lock" {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rank := func(rel string) int {
		switch {
		case !strings.Contains(rel, string(filepath.Separator)):
			return 0
		case strings.HasPrefix(rel, "consumequeue"):
			return 1
		case strings.HasPrefix(rel, "index"):
			return 2
		case filepath.Base(rel) == "CHECKPOINT":
			return 3
		}
		return 4
	}
	slices.SortFunc(files, func(a, b string) int {
		if c := cmp.Compare(rank(a), rank(b)); c != 0 {
			return c
		}
		return strings.Compare(b, a)
	})
	for _, rel := range files {
		b, err := os.ReadFile(filepath.Join(from, rel))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile: as if before
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, rel), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// faultLogger is the store's log in a fault run: the test's log (printed if
// it fails), or standard error when APOGEE_FAULT_LOG is set.
func faultLogger(t testing.TB) *slog.Logger {
	if os.Getenv("APOGEE_FAULT_LOG") != "" {
		return slog.Default()
	}
	return testlog.New(t, "store")
}
