package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/consumequeue"
	"github.com/apogeemq/apogee/index"
	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/message"
)

// recover opens the parts in recovery order (see the package doc) and
// re-dispatches what the consume queues and the index may lack.
func (s *Store) recover() (commitlog.Recovery, error) {
	o := s.opts
	abortPath := filepath.Join(o.Dir, abortName)
	crashed, err := o.exists(abortPath)
	if err != nil {
		return commitlog.Recovery{}, err
	}
	cqDir := filepath.Join(o.Dir, "consumequeue")
	idxDir := filepath.Join(o.Dir, "index")
	cqThere, err := o.exists(cqDir)
	if err != nil {
		return commitlog.Recovery{}, err
	}
	idxThere, err := o.exists(idxDir)
	if err != nil {
		return commitlog.Recovery{}, err
	}
	lqThere, err := o.exists(filepath.Join(o.Dir, liteDirName))
	if err != nil {
		return commitlog.Recovery{}, err
	}
	// A missing lite-topic index is rebuilt from the whole log too (once,
	// for a store written before lite topics existed).
	derivedMissing := !cqThere || !idxThere || !lqThere

	// From now on a crash must take the abnormal path.
	if err := durable.Touch(o.FS, abortPath); err != nil {
		return commitlog.Recovery{}, fmt.Errorf("store: abort marker: %w", err)
	}
	log, rep, err := commitlog.Open(commitlog.Options{
		Dir:                filepath.Join(o.Dir, "commitlog"),
		AcceptLoss:         o.AcceptLoss,
		RecycleSegments:    o.RecycleSegments,
		SegmentSize:        o.SegmentSize,
		FlushMode:          o.FlushMode,
		SyncFlushTimeout:   o.SyncFlushTimeout,
		RetentionTime:      o.RetentionTime,
		TruncatedRetention: o.TruncatedRetention,
		TruncatedMaxBytes:  o.TruncatedMaxBytes,
		DiskUsageRatio:     o.DiskUsageRatio,
		RetentionInterval:  -1, // the store runs retention, then cleans what depends on it
		Logger:             o.Logger,
		FS:                 o.FS,
	})
	if err != nil {
		return rep, fmt.Errorf("store: %w", err)
	}
	s.log = log
	switch {
	case rep.Damaged():
		o.Logger.Error("store: commit log damaged; repaired from what could be proven", "report", rep.String())
	case !rep.Verified:
		o.Logger.Warn("store: commit log recovered", "report", rep.String())
	}
	s.cqs, err = consumequeue.OpenSet(cqDir, consumequeue.Options{EntriesPerFile: o.ConsumeQueueEntries, FS: o.FS})
	if err != nil {
		return rep, fmt.Errorf("store: %w", err)
	}
	s.idx, err = index.Open(idxDir, index.Options{SlotCount: o.IndexSlots, MaxEntries: o.IndexMaxEntries, FS: o.FS})
	if err != nil {
		return rep, fmt.Errorf("store: %w", err)
	}
	if err := s.openLite(); err != nil {
		return rep, err
	}
	ckpt, dispatched, haveCkpt, err := openStoreCheckpoint(o.FS, o.Dir)
	if err != nil {
		return rep, err
	}
	s.ckpt = ckpt

	end, logMin := log.WrittenOffset(), log.MinOffset()
	// Which messages the log lost, while the queues still point at them.
	s.reportLosses(rep.Losses)
	rebuildAll := derivedMissing && end > logMin
	rebuild := func(topic string, id int32, why string) error {
		o.Logger.Error("store: consume queue damaged; rebuilding it from the commit log", "topic", topic, "queue", id, "reason", why)
		s.stats.queuesRebuilt.Add(1)
		rebuildAll = true
		if err := s.cqs.DropQueue(topic, id); err != nil {
			return fmt.Errorf("store: %w", err)
		}
		return nil
	}
	for _, d := range s.cqs.Damaged() {
		if err := rebuild(d.Topic, d.QueueID, d.Err.Error()); err != nil {
			return rep, err
		}
	}
	if err := s.cqs.TruncateAfter(end); err != nil {
		return rep, fmt.Errorf("store: %w", err)
	}
	// Each queue's last entries must point at their records.
	var disagree []consumequeue.DamagedQueue
	s.cqs.ForEach(func(topic string, id int32, q *consumequeue.Queue) bool {
		if bad := s.checkTail(q, logMin, rep.Losses); bad != "" {
			disagree = append(disagree, consumequeue.DamagedQueue{Topic: topic, QueueID: id, Err: fmt.Errorf("%s", bad)})
		}
		return true
	})
	for _, d := range disagree {
		if err := rebuild(d.Topic, d.QueueID, d.Err.Error()); err != nil {
			return rep, err
		}
	}
	// The index can only hold entries past the log's end after the log was
	// truncated; then whole index files went and must be re-indexed.
	idxAhead := s.idx.MaxCommitLogOffset() >= end && end > logMin
	for _, r := range s.idx.Repaired() {
		o.Logger.Error("store: index file damaged; re-indexing from the commit log", "reason", r)
		s.stats.indexFilesRebuilt.Add(1)
	}
	idxResume, err := s.idx.TruncateAfter(end)
	if err != nil {
		return rep, fmt.Errorf("store: %w", err)
	}
	if !idxAhead && len(s.idx.Repaired()) == 0 {
		idxResume = end
	}

	// Where dispatch resumes: everything below `from` is already in the
	// consume queues and the index.
	var from int64
	switch {
	case rebuildAll:
		from = logMin
	case crashed:
		if haveCkpt {
			from = dispatched
		} else {
			from = logMin
		}
	default:
		from = s.cqs.MaxCommitLogEnd()
		if haveCkpt && dispatched > from {
			from = dispatched
		}
	}
	from = max(min(from, end, idxResume), logMin)
	// The checkpoint's dispatched offset may lie past what the log had
	// synced (in async mode the queues and the index are flushed on their
	// own clock): after a power loss the log may have lost records below
	// it, covered by a hole now. Re-dispatch starts at the first such loss
	// at the latest, a boundary of the recovered log (started inside a
	// hole, the cursor met torn records and Open failed).
	for _, l := range rep.Losses {
		if l.From < from && l.From >= logMin {
			from = l.From
		}
	}
	if from < end {
		o.Logger.Info("store: re-dispatching the commit log", "from", from, "to", end, "crashed", crashed)
	}
	s.dispatched.Store(from)
	s.dispatch.init(s)
	s.dispatch.cursor.Close()
	s.dispatch.cursor = log.NewCursor(from)
	if from > logMin && !isBoundary(log, from) {
		// A checkpoint from before a truncation can point into the middle of
		// nothing valid; fall back to a full re-dispatch.
		s.dispatch.cursor = log.NewCursor(logMin)
		s.dispatched.Store(logMin)
	}
	// Lite entries at or above where dispatch resumes go and are appended
	// again, with the same lite offsets (litequeue's recovery).
	if err := s.lq.TruncateFrom(s.dispatched.Load()); err != nil {
		return rep, fmt.Errorf("store: %w", err)
	}
	// A rebuilt queue may meet queue offsets whose records the log lost:
	// the dispatcher fills them with lost-message entries meanwhile.
	s.dispatch.rebuilding = true
	s.dispatch.run()
	s.dispatch.rebuilding = false
	if s.dispatched.Load() != end {
		return rep, fmt.Errorf("store: re-dispatch stopped at %d, log ends at %d", s.dispatched.Load(), end)
	}
	// Only now: after a power loss a queue may hold all-zero entries (a
	// page of it never reached the disk) that re-dispatch has just filled
	// in from their records. Earlier, the entries of lost messages could
	// not be found past them, and DeleteBelow, which looks for the first
	// entry at or above the log's minimum, took them for cleaned-up ones
	// and raised the queue's minimum over acknowledged messages.
	if err := s.markLost(rep.Losses, end); err != nil {
		return rep, err
	}
	if _, err := s.cqs.DeleteBelow(logMin); err != nil {
		return rep, fmt.Errorf("store: %w", err)
	}
	if err := s.lq.DeleteBelow(logMin); err != nil {
		return rep, fmt.Errorf("store: %w", err)
	}
	s.liteMin.Store(logMin)
	// Counters start where the consume queues end.
	s.cqs.ForEach(func(topic string, id int32, q *consumequeue.Queue) bool {
		s.counter(topic, id).next = q.MaxOffset()
		return true
	})
	if err := s.flushDerived(); err != nil {
		return rep, err
	}
	return rep, nil
}

// isBoundary reports whether off starts a record, a blank marker, or a segment.
func isBoundary(log *commitlog.Log, off int64) bool {
	if off%log.SegmentSize() == 0 || off == log.WrittenOffset() {
		return true
	}
	v, err := log.ReadRecord(off)
	if err != nil {
		// A blank or hole marker is a boundary too.
		b, err := log.Read(off, 8)
		if err != nil {
			return false
		}
		defer b.Release()
		if _, ok := message.IsHole(b.Bytes()); ok {
			return true
		}
		size, ok := message.IsBlank(b.Bytes())
		return ok && int64(size) == log.SegmentSize()-off%log.SegmentSize()
	}
	v.Release()
	return true
}

// exists reports whether path exists; an error other than its absence is
// returned (with it, the store cannot tell a crash from a clean stop).
func (o Options) exists(path string) (bool, error) {
	_, err := o.FS.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("store: %w", err)
}
