package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/consumequeue"
	"github.com/apogeemq/apogee/message"
)

// The scrubber re-reads the retained commit log in the background, at a
// bounded rate, and checks what a restart does not: every record's CRC,
// size and offset, and that each record's consume-queue entry is the one
// the record implies. It repairs what the log can prove: a damaged record
// becomes a hole (its bytes saved aside; Get never serves it again), a
// consume-queue entry that disagrees with its record is rewritten from it.
// It reports the rest (a record whose queue lacks its entry).

// ScrubReport says what one pass of the scrubber (or Verify) found and did.
type ScrubReport struct {
	// From and To bound the commit-log range the pass walked.
	From, To int64
	// Records and Bytes count the records checked.
	Records, Bytes int64
	// BadRecords counts records that failed their own checks (magic, size,
	// PHYSICALOFFSET, body CRC); Holes how many of them the pass covered with
	// a hole marker.
	BadRecords, Holes int64
	// EntriesRepaired counts consume-queue entries rewritten from their
	// record; EntriesMissing records whose queue has no entry at their queue
	// offset.
	EntriesRepaired, EntriesMissing int64
	// Problems describes what was found, at most maxProblems of them;
	// ProblemCount counts all.
	Problems     []string
	ProblemCount int64
	Duration     time.Duration
}

// maxProblems bounds the problems a report lists.
const maxProblems = 100

func (r *ScrubReport) problem(format string, args ...any) {
	r.ProblemCount++
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// OK reports whether the pass found nothing wrong.
func (r ScrubReport) OK() bool { return r.ProblemCount == 0 }

// Scrub runs one scrubber pass over the whole retained log, now and at full
// speed, repairing what it can, and returns its report.
func (s *Store) Scrub(ctx context.Context) (ScrubReport, error) {
	if s.closed.Load() {
		return ScrubReport{}, ErrClosed
	}
	s.scrubMu.Lock()
	defer s.scrubMu.Unlock()
	return s.scrubPass(ctx, 0, true)
}

// scrubPass walks [log min, dispatched) at rate bytes/s (0: unbounded).
func (s *Store) scrubPass(ctx context.Context, rate int64, repair bool) (ScrubReport, error) {
	start := time.Now()
	rep := ScrubReport{From: s.log.MinOffset(), To: s.dispatched.Load()}
	err := s.scrubRange(ctx, rep.From, rep.To, rate, repair, &rep)
	rep.Duration = time.Since(start)
	s.stats.scrubPasses.Add(1)
	s.stats.scrubBytes.Add(rep.Bytes)
	s.stats.scrubBadRecords.Add(rep.BadRecords)
	s.stats.scrubRepaired.Add(rep.EntriesRepaired)
	s.stats.scrubMissing.Add(rep.EntriesMissing)
	s.stats.lastScrub.Store(time.Now().UnixNano())
	return rep, err
}

// scrubRange checks the records in [from, to) and their consume-queue
// entries. With repair, damaged records become holes and wrong entries are
// rewritten; without (Verify), everything is only reported.
func (s *Store) scrubRange(ctx context.Context, from, to, rate int64, repair bool, rep *ScrubReport) error {
	c := s.log.NewCursor(from)
	defer func() { c.Close() }()
	paceStart, paced := time.Now(), int64(0)
	for c.Offset() < to {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec, off, err := c.Next()
		switch {
		case errors.Is(err, commitlog.ErrOffsetNotWritten):
			return nil
		case errors.Is(err, commitlog.ErrOffsetDeleted):
			// Retention moved the log's start past the scrubber.
			c.Close()
			c = s.log.NewCursor(s.log.MinOffset())
			continue
		}
		var v message.View
		if err == nil {
			v, err = message.Decode(rec, true)
			if err == nil && v.PhysicalOffset() != off {
				err = fmt.Errorf("record claims offset %d", v.PhysicalOffset())
			}
		}
		if err != nil {
			rep.BadRecords++
			next := s.scrubBadRecord(off, err, repair, rep)
			if next <= off {
				return fmt.Errorf("store: scrub stopped at an unreadable record at %d: %w", off, err)
			}
			c.Close()
			c = s.log.NewCursor(next)
			continue
		}
		rep.Records++
		rep.Bytes += int64(len(rec))
		s.scrubEntry(v, off, repair, rep)
		if rate > 0 {
			if paced += int64(len(rec)); paced >= 256<<10 {
				due := paceStart.Add(time.Duration(float64(paced) / float64(rate) * float64(time.Second)))
				if d := time.Until(due); d > 0 {
					c.Close() // hold no segment while waiting
					t := time.NewTimer(d)
					select {
					case <-ctx.Done():
						t.Stop()
						return ctx.Err()
					case <-t.C:
					}
				}
				if time.Since(paceStart) > time.Minute {
					paceStart, paced = time.Now(), 0
				}
			}
		}
	}
	return nil
}

// scrubBadRecord reports a record that failed its checks and, with repair,
// makes it a hole. It returns the offset to continue at (past the hole), or
// off when the walk cannot step over it.
func (s *Store) scrubBadRecord(off int64, cause error, repair bool, rep *ScrubReport) int64 {
	if !repair {
		rep.problem("commit log offset %d: %v", off, cause)
		return off
	}
	loss, err := s.log.Quarantine(off)
	if err != nil {
		rep.problem("commit log offset %d: %v; cannot set it aside: %v", off, cause, err)
		s.opts.Logger.Error("store: scrubber found a damaged record it cannot set aside", "offset", off, "cause", cause, "err", err)
		return off
	}
	rep.Holes++
	rep.problem("commit log [%d,%d): %s; set aside in %s", loss.From, loss.To, loss.Reason, loss.Saved)
	s.reportLosses([]commitlog.Loss{loss})
	return loss.To
}

// scrubEntry checks that the consume-queue entry of record v (at off) is the
// one the record implies and, with repair, rewrites it when it is not.
func (s *Store) scrubEntry(v message.View, off int64, repair bool, rep *ScrubReport) {
	if !message.Dispatchable(v.SysFlag()) || v.QueueID() < 0 {
		return
	}
	topic, id, qoff := string(v.Topic()), v.QueueID(), v.QueueOffset()
	q, ok := s.cqs.Lookup(topic, id)
	if !ok || qoff < q.MinOffset() {
		return // a deleted topic, or entries cleaned up below the log's start
	}
	tags, _, _ := v.DispatchProperties()
	want := consumequeue.Entry{CommitLogOffset: off, Size: int32(v.TotalSize()), TagCode: s.tagCode(v, tags)}
	if qoff >= q.MaxOffset() {
		rep.EntriesMissing++
		rep.problem("queue %s/%d has no entry %d for the record at %d (max offset %d)", topic, id, qoff, off, q.MaxOffset())
		return
	}
	got, err := q.Get(qoff)
	if err != nil || got == want {
		return
	}
	if !repair && s.opts.TagCode == nil && got.CommitLogOffset == want.CommitLogOffset && got.Size == want.Size {
		return // offline, the broker's own tag codes (delivery times) cannot be derived
	}
	if !repair {
		rep.problem("queue %s/%d entry %d is %+v; the record at %d implies %+v", topic, id, qoff, got, off, want)
		return
	}
	wrote, err := q.Repair(qoff, want)
	if err != nil {
		rep.problem("queue %s/%d entry %d is %+v; repair failed: %v", topic, id, qoff, got, err)
		return
	}
	if wrote {
		rep.EntriesRepaired++
		rep.problem("queue %s/%d entry %d was %+v; rewritten from the record at %d", topic, id, qoff, got, off)
		s.opts.Logger.Error("store: scrubber rewrote a consume-queue entry from its record",
			"topic", topic, "queue", id, "queueOffset", qoff, "was", fmt.Sprintf("%+v", got), "commitLogOffset", off)
	}
}

// scrubLoop runs a pass at Options.ScrubRate, the first a minute after Open,
// then one every ScrubInterval (from start to start; back to back when a
// pass takes longer).
func (s *Store) scrubLoop() {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	t := time.NewTimer(s.opts.scrubDelay)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.scrubMu.Lock()
		rep, err := s.scrubPass(ctx, s.opts.ScrubRate, true)
		s.scrubMu.Unlock()
		if errors.Is(err, context.Canceled) {
			return
		}
		attrs := []any{"from", rep.From, "to", rep.To, "records", rep.Records, "bytes", rep.Bytes, "took", rep.Duration.Round(time.Millisecond),
			"badRecords", rep.BadRecords, "entriesRepaired", rep.EntriesRepaired, "entriesMissing", rep.EntriesMissing}
		switch {
		case err != nil:
			s.opts.Logger.Error("store: scrub pass failed", append(attrs, "err", err)...)
		case !rep.OK():
			s.opts.Logger.Error("store: scrub pass found damage", append(attrs, "problems", rep.ProblemCount, "first", rep.Problems[0])...)
		default:
			s.opts.Logger.Info("store: scrub pass clean", attrs...)
		}
		t.Reset(max(s.opts.ScrubInterval-rep.Duration, 0))
	}
}
