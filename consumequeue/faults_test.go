package consumequeue

import (
	"path/filepath"
	"runtime"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
)

// expQueue is what a queue must hold after a reopen: the entries ent(k) for
// k in [0, max) it acknowledged (those below what DeleteBelow removed may
// come back as long as they are right), and whether a failed call allows
// it to be reported damaged (a failed TruncateAfter or DropQueue may leave
// a file behind that recovery rightly refuses) or to be gone (dropped).
type expQueue struct {
	max          int64
	mayBeDamaged bool
	mayBeGone    bool
	dropped      bool
	stuck        bool  // an append failed for good: no more appends
	oldMax       int64 // a failed TruncateAfter may have left this max (0: none)
}

// cqRun is a run of TestFaults: its checker and what the queues must hold.
type cqRun struct {
	*errorfs.Checker
	t   *testing.T
	exp map[queueKey]*expQueue
}

func (r *cqRun) queue(s *Set, topic string, id int32) *Queue {
	q, err := s.Queue(topic, id)
	if !r.OK("queue", err) {
		return nil
	}
	if r.exp[queueKey{topic, id}] == nil {
		r.exp[queueKey{topic, id}] = &expQueue{}
	}
	return q
}

// appendTo appends ent(k) for k in [from, to) and records what was acknowledged.
func (r *cqRun) appendTo(q *Queue, from, to int64) {
	if q == nil {
		return
	}
	e := r.exp[queueKey{q.topic, q.id}]
	for k := from; k < to && !e.stuck; k++ {
		if !r.Retry("append", func() error { return q.Append(k, ent(k)) }) {
			e.stuck = true
			return
		}
		e.max = k + 1
	}
}

// readAll reads every entry of every queue the set holds: each must be
// right (a read may fail only with the injected failure).
func (r *cqRun) readAll(s *Set) {
	s.ForEach(func(topic string, id int32, q *Queue) bool {
		for k := q.MinOffset(); k < q.MaxOffset(); k++ {
			e, err := q.Get(k)
			if !r.OK("get", err) {
				return true
			}
			if e != ent(k) {
				r.t.Fatalf("%s/%d served %+v at %d, want %+v", topic, id, e, k, ent(k))
			}
		}
		return true
	})
}

// checkDamaged accepts the queues a reopen found damaged only when an
// earlier failed call allowed it (an injected failure while recovering must
// fail OpenSet instead: it proves nothing about the files); they stay
// damaged until dropped.
func (r *cqRun) checkDamaged(s *Set) {
	for _, d := range s.Damaged() {
		e := r.exp[queueKey{d.Topic, d.QueueID}]
		switch {
		case e == nil:
			r.t.Fatalf("unknown queue %s/%d reported damaged: %v", d.Topic, d.QueueID, d.Err)
		case !e.mayBeDamaged:
			r.t.Fatalf("%s/%d reported damaged: %v", d.Topic, d.QueueID, d.Err)
		}
	}
}

func (r *cqRun) cloneExp() map[queueKey]*expQueue {
	c := map[queueKey]*expQueue{}
	for k, e := range r.exp {
		v := *e
		c[k] = &v
	}
	return c
}

// TestFaults fails every file operation of a workload, one at a time, once
// (a transient fault) and for good. The workload: a new set; one queue
// filled across three files with a flush midway, a short queue, a queue
// that starts past zero (blank pre-fill); flush; two sweeps that unmap the
// idle files; more appends (mapping cold files again); DeleteBelow; a copy
// of the directory as a crash leaves it; TruncateAfter through a whole
// file; DropQueue; Close (the clean-shutdown record). Then the directory is
// reopened (strict recovery) and the copy too (crash recovery), each
// appended to and closed. After each run both are opened with the real file
// system, and:
//
//   - every error returned is the injected one, with its cause, and after a
//     transient fault the same call succeeds when tried again;
//   - every queue holds exactly the entries it acknowledged (max offset and
//     every entry from its min offset on), except that a queue whose
//     TruncateAfter or DropQueue failed may be reported damaged (the store
//     rebuilds it) and a dropped one may be gone or still whole;
//   - nothing served while running or after reopening is a wrong entry;
//   - no file, mapping or goroutine outlives Close (or a failed OpenSet).
func TestFaults(t *testing.T) {
	modes := []errorfs.Mode{errorfs.Once, errorfs.Stop}
	errorfs.Walk(t, vfs.Default, modes, func(t *testing.T, fsys *errorfs.FS, dir string) {
		goroutines := runtime.NumGoroutine()
		r := &cqRun{Checker: errorfs.NewChecker(t, fsys), t: t, exp: map[queueKey]*expQueue{}}
		opts := Options{EntriesPerFile: 256, IdleUnmap: 1, FS: fsys}
		dirA, dirB := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		var expB map[queueKey]*expQueue

		if s, err := OpenSet(dirA, opts); r.OK("open", err) {
			q0 := r.queue(s, "A", 0)
			r.appendTo(q0, 0, 300)
			r.Retry("flush", s.Flush)
			r.appendTo(q0, 300, 601)
			r.appendTo(r.queue(s, "A", 1), 0, 10)
			r.appendTo(r.queue(s, "B", 0), 300, 320) // files start at 256: blanks before 300
			r.Retry("flush", s.Flush)
			s.Sweep(timeAt(1))
			s.Sweep(timeAt(2)) // unmaps what the first sweep found idle
			r.appendTo(q0, 601, 620)
			r.readAll(s)
			r.Retry("delete below", func() error { _, err := s.DeleteBelow(ent(300).CommitLogOffset); return err })
			errorfs.CopyTree(t, dirA, dirB)
			expB = r.cloneExp()
			if q0 != nil {
				e := r.exp[queueKey{"A", 0}]
				if !r.OK("truncate", q0.TruncateAfter(ent(500).End())) {
					// Done, not done, or half done (detected as damage).
					e.mayBeDamaged, e.oldMax = true, e.max
				}
				e.max = min(e.max, 501)
			}
			if e := r.exp[queueKey{"A", 1}]; e != nil {
				e.dropped = true
				if !r.OK("drop", s.DropQueue("A", 1)) {
					e.mayBeDamaged, e.mayBeGone = true, true
				}
			}
			r.readAll(s)
			r.OK("close", s.Close())
		}
		fsys.CheckReleased(t, goroutines)

		if s, err := OpenSet(dirA, opts); r.OK("reopen", err) {
			r.checkDamaged(s)
			if q, ok := s.Lookup("A", 0); ok {
				r.appendTo(q, q.MaxOffset(), q.MaxOffset()+30)
			}
			r.readAll(s)
			r.OK("close", s.Close())
		}
		fsys.CheckReleased(t, goroutines)
		if expB != nil {
			r.exp, expB = expB, r.exp
			if s, err := OpenSet(dirB, opts); r.OK("open copy", err) {
				r.checkDamaged(s)
				if q, ok := s.Lookup("A", 0); ok {
					r.appendTo(q, q.MaxOffset(), q.MaxOffset()+10)
				}
				r.readAll(s)
				r.OK("close", s.Close())
			}
			fsys.CheckReleased(t, goroutines)
			r.exp, expB = expB, r.exp
		}

		checkSet(t, dirA, r.exp)
		if expB != nil {
			checkSet(t, dirB, expB)
		}
	})
}

// checkSet opens root with the real file system and checks it against exp.
func checkSet(t *testing.T, root string, exp map[queueKey]*expQueue) {
	t.Helper()
	s, err := OpenSet(root, Options{EntriesPerFile: 256})
	if err != nil {
		t.Fatalf("reopen %s: %v", root, err)
	}
	defer s.Close()
	damaged := map[queueKey]error{}
	for _, d := range s.Damaged() {
		damaged[queueKey{d.Topic, d.QueueID}] = d.Err
	}
	for k, e := range exp {
		if err := damaged[k]; err != nil {
			if !e.mayBeDamaged {
				t.Fatalf("%s/%d reported damaged: %v", k.topic, k.id, err)
			}
			continue
		}
		q, ok := s.Lookup(k.topic, k.id)
		switch {
		case !ok && e.max == 0:
			continue
		case !ok && (e.dropped || e.mayBeGone):
			continue
		case !ok:
			t.Fatalf("%s/%d missing, want %d entries", k.topic, k.id, e.max)
		case e.dropped && !e.mayBeGone:
			t.Fatalf("%s/%d still there after it was dropped", k.topic, k.id)
		}
		if e.max == 0 && q.MinOffset() == q.MaxOffset() {
			continue // a first append past zero that failed after the blank pre-fill
		}
		if q.MaxOffset() != e.max && (e.oldMax == 0 || q.MaxOffset() != e.oldMax) {
			t.Fatalf("%s/%d has max offset %d, acknowledged %d", k.topic, k.id, q.MaxOffset(), e.max)
		}
		for i := q.MinOffset(); i < q.MaxOffset(); i++ {
			got, err := q.Get(i)
			if err != nil || got != ent(i) {
				t.Fatalf("%s/%d at %d: %+v %v, want %+v", k.topic, k.id, i, got, err, ent(i))
			}
		}
	}
	for k := range damaged {
		if exp[k] == nil {
			t.Fatalf("unknown queue %s/%d reported damaged", k.topic, k.id)
		}
	}
}
