package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/consumequeue"
	"github.com/apogeemq/apogee/index"
)

// VerifyReport is what Verify found in a stopped store's directory.
type VerifyReport struct {
	Dir string
	// CleanShutdown is false when the last run did not stop cleanly (the
	// abort marker is there): a restart then recovers the unsynced tail,
	// which is not damage.
	CleanShutdown bool
	// Log is what a restart's recovery of the commit log would find, from a
	// read-only walk of every segment (not only the newest).
	Log commitlog.Recovery
	// Queues counts the consume queues checked; DamagedQueues lists those a
	// restart would rebuild from the log.
	Queues        int
	DamagedQueues []consumequeue.DamagedQueue
	// Index lists the index files a restart would repair or re-index.
	Index []string
	// Scrub is the record-by-record check: every record's CRC, and every
	// record's consume-queue entry.
	Scrub ScrubReport
	// Problems lists everything above that is wrong, one line each; empty
	// when the directory is sound.
	Problems []string
}

// OK reports whether Verify found nothing wrong.
func (r *VerifyReport) OK() bool { return len(r.Problems) == 0 }

func (r *VerifyReport) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Verify checks the store in opts.Dir, which must not be open (it takes the
// directory's lock: ErrLocked while a broker runs on it), without changing a
// byte: the commit log is mapped read-only and validated record by record
// (magic, size, offset, CRC) in every segment; the consume queues are
// checked as strictly as after a clean shutdown and against the records
// their entries point to; every record is checked against its queue entry
// (the tag code only when opts.TagCode is set, since the broker derives some
// from the record); the index files' sizes and headers are checked. It is the
// scrubber's check plus the restart's, run offline; what it reports is what
// a restart and the scrubber would repair or set aside.
//
// The layout options (SegmentSize, ConsumeQueueEntries, IndexSlots,
// IndexMaxEntries) must be those the store was written with.
func Verify(ctx context.Context, opts Options) (*VerifyReport, error) {
	if opts.MaxMessageSize == 0 && opts.SegmentSize > 0 {
		// Not part of the layout; only bounded by the segment size.
		opts.MaxMessageSize = int(max(1, min(4<<20, opts.SegmentSize-(64<<10)-1)))
	}
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if _, err := o.FS.Stat(o.Dir); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	lock, err := lockDir(o.FS, o.Dir)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	r := &VerifyReport{Dir: o.Dir}
	aborted, err := o.exists(filepath.Join(o.Dir, abortName))
	if err != nil {
		return nil, err
	}
	r.CleanShutdown = !aborted

	log, rep, err := commitlog.OpenReadOnly(commitlog.Options{Dir: filepath.Join(o.Dir, "commitlog"), SegmentSize: o.SegmentSize, FS: o.FS})
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer log.Close()
	r.Log = rep
	for _, l := range rep.Losses {
		if l.Unsynced && !r.CleanShutdown {
			continue // a crash's torn tail: recovery cuts it, nothing durable is lost
		}
		r.problem("commit log: %s", l)
	}
	for _, e := range rep.Extended {
		r.problem("commit log: segment %s is shorter than the segment size %d", e, o.SegmentSize)
	}
	if rep.Clean && rep.Mismatch != "" {
		r.problem("commit log: the clean shutdown's checkpoint does not match the files: %s", rep.Mismatch)
	}

	cqDir := filepath.Join(o.Dir, "consumequeue")
	cqs, err := consumequeue.OpenSet(cqDir, consumequeue.Options{EntriesPerFile: o.ConsumeQueueEntries, ReadOnly: true, FS: o.FS})
	if errors.Is(err, os.ErrNotExist) {
		if log.WrittenOffset() > log.MinOffset() {
			r.problem("consume queues: %s is missing; a restart rebuilds every queue from the commit log", cqDir)
		}
		cqs = nil
	} else if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	if cqs != nil {
		defer cqs.Close()
		r.DamagedQueues = cqs.Damaged()
		for _, d := range r.DamagedQueues {
			r.problem("consume queue %s/%d: %v; a restart rebuilds it from the commit log", d.Topic, d.QueueID, d.Err)
		}
	}

	if r.Index, err = index.Check(filepath.Join(o.Dir, "index"), index.Options{SlotCount: o.IndexSlots, MaxEntries: o.IndexMaxEntries, FS: o.FS}); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	for _, p := range r.Index {
		r.problem("index: %s", p)
	}

	if cqs == nil {
		return r, nil
	}
	// The record-by-record checks run on a store made of the read-only parts.
	s := &Store{opts: o, log: log, cqs: cqs}
	s.dispatched.Store(log.WrittenOffset())
	cqs.ForEach(func(topic string, id int32, q *consumequeue.Queue) bool {
		r.Queues++
		if e, ok := q.LastEntry(); ok && !e.IsLost() && e.End() > log.WrittenOffset() {
			r.problem("consume queue %s/%d: its last entry points past the log's end %d", topic, id, log.WrittenOffset())
		} else if bad := s.checkTail(q, log.MinOffset(), rep.Losses); bad != "" {
			r.problem("consume queue %s/%d: %s", topic, id, bad)
		}
		return ctx.Err() == nil
	})
	if err := s.scrubRange(ctx, log.MinOffset(), log.WrittenOffset(), 0, false, &r.Scrub); err != nil {
		return r, err
	}
	for _, p := range r.Scrub.Problems {
		r.problem("%s", p)
	}
	if n := r.Scrub.ProblemCount - int64(len(r.Scrub.Problems)); n > 0 {
		r.problem("... and %d more record or entry problems", n)
	}
	return r, nil
}
