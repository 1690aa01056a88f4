package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/consumequeue"
	"github.com/apogeemq/apogee/message"
)

// recordMatches reports whether rec, read at entry e's commit-log offset, is
// the record e points to as queue offset qoff of queue queueID: its
// TOTALSIZE is e's size, its magic a record's (not a blank or hole marker),
// and its PHYSICALOFFSET, QUEUEID and QUEUEOFFSET agree. It reads the first
// 36 bytes only (the line a pull writes out anyway); the topic is left to the
// scrubber. rec must hold at least e.Size bytes.
func recordMatches(rec []byte, e consumequeue.Entry, queueID int32, qoff int64) bool {
	return recordHeaderMatches(rec, e) &&
		int32(binary.BigEndian.Uint32(rec[message.OffQueueID:])) == queueID &&
		int64(binary.BigEndian.Uint64(rec[message.OffQueueOffset:])) == qoff
}

// recordHeaderMatches is recordMatches without the queue fields (TOTALSIZE,
// magic and PHYSICALOFFSET): what a lite entry's record is checked by, its
// queue fields being its parent queue's.
func recordHeaderMatches(rec []byte, e consumequeue.Entry) bool {
	if len(rec) < message.MinRecordSize || int(e.Size) != len(rec) {
		return false
	}
	be := binary.BigEndian
	magic := be.Uint32(rec[message.OffMagic:])
	return int32(be.Uint32(rec)) == e.Size &&
		(magic == message.MagicV1 || magic == message.MagicV2) &&
		int64(be.Uint64(rec[message.OffPhysicalOffset:])) == e.CommitLogOffset
}

// checkEntry reads the record entry e (queue offset qoff of topic/queueID)
// points to and checks it fully: the header (recordMatches) and the topic.
// It returns a description of the disagreement, "" when they agree.
func (s *Store) checkEntry(topic string, queueID int32, qoff int64, e consumequeue.Entry) string {
	v, err := s.log.Read(e.CommitLogOffset, int(e.Size))
	if err != nil {
		return fmt.Sprintf("entry %d points at [%d,+%d): %v", qoff, e.CommitLogOffset, e.Size, err)
	}
	defer v.Release()
	if !recordMatches(v.Bytes(), e, queueID, qoff) {
		return fmt.Sprintf("entry %d (%d bytes at %d) does not point at its record", qoff, e.Size, e.CommitLogOffset)
	}
	m, err := message.Decode(v.Bytes(), false)
	if err != nil {
		return fmt.Sprintf("entry %d: record at %d: %v", qoff, e.CommitLogOffset, err)
	}
	if string(m.Topic()) != topic {
		return fmt.Sprintf("entry %d points at a record of topic %q", qoff, m.Topic())
	}
	return ""
}

// tailEntriesChecked is how many of each queue's last entries Open checks
// against the commit log.
const tailEntriesChecked = 2

// checkTail checks q's last entries against the records they point to and
// returns what disagrees ("" when all agree). When recovery left the last
// entry at hand, that one is checked alone and no queue file is touched (a
// restart with 100,000s of queues).
func (s *Store) checkTail(q *consumequeue.Queue, logMin int64, losses []commitlog.Loss) string {
	lo, hi := q.MinOffset(), q.MaxOffset()
	if hi <= lo {
		return ""
	}
	if e, ok := q.RecoveredTail(); ok {
		return s.checkTailEntry(q, hi-1, e, logMin, losses)
	}
	for k := hi - 1; k >= max(lo, hi-tailEntriesChecked); k-- {
		e, err := q.Get(k)
		if err != nil {
			return fmt.Sprintf("entry %d unreadable: %v", k, err)
		}
		if bad := s.checkTailEntry(q, k, e, logMin, losses); bad != "" {
			return bad
		}
	}
	return ""
}

// checkTailEntry checks entry e at queue offset k of q. Entries below the
// log's minimum (retention) or inside a lost range (reported already),
// lost-message and blank entries pass.
func (s *Store) checkTailEntry(q *consumequeue.Queue, k int64, e consumequeue.Entry, logMin int64, losses []commitlog.Loss) string {
	if e.IsLost() || e.Size <= 0 || e.Size == 0x7FFFFFFF || e.CommitLogOffset < logMin || inLosses(losses, e.CommitLogOffset) {
		return ""
	}
	return s.checkEntry(q.Topic(), q.ID(), k, e)
}

func inLosses(losses []commitlog.Loss, off int64) bool {
	for _, l := range losses {
		if l.From <= off && off < l.To {
			return true
		}
	}
	return false
}

// reportLosses logs, for every range the commit log lost, which messages it
// held: per queue, the queue offsets whose entries point into it (ERROR for
// damage to synced data, WARN for the unsynced tail of a crash). It must run
// before the queues are truncated to the log's end.
func (s *Store) reportLosses(losses []commitlog.Loss) {
	for _, l := range losses {
		level := slog.LevelError
		if l.Unsynced {
			level = slog.LevelWarn
		}
		var msgs int64
		s.cqs.ForEach(func(topic string, id int32, q *consumequeue.Queue) bool {
			first, err := q.SearchCommitLogOffset(l.From)
			if err != nil {
				s.opts.Logger.Error("store: cannot tell which messages were lost", "topic", topic, "queue", id, "err", err)
				return true
			}
			last, err := q.SearchCommitLogOffset(l.To)
			if err != nil {
				s.opts.Logger.Error("store: cannot tell which messages were lost", "topic", topic, "queue", id, "err", err)
				return true
			}
			if last > first {
				msgs += last - first
				s.opts.Logger.Log(context.Background(), level, "store: messages lost",
					"topic", topic, "queue", id, "fromQueueOffset", first, "toQueueOffset", last-1, "count", last-first)
			}
			return true
		})
		s.opts.Logger.Log(context.Background(), level, "store: commit log range lost",
			"from", l.From, "to", l.To, "bytes", l.To-l.From, "messages", msgs, "reason", l.Reason, "savedIn", l.Saved, "unsynced", l.Unsynced)
		if !l.Unsynced {
			s.stats.lostMessages.Add(msgs)
			s.stats.lostBytes.Add(l.To - l.From)
		}
	}
}

// badEntry counts and reports a consume-queue entry Get skipped because the
// record it points at is not its own (damage the scrubber or the next start
// repairs). Reports are rate-limited to one a second.
func (s *Store) badEntry(topic string, queueID int32, qoff int64, e consumequeue.Entry, why string) {
	s.stats.badEntries.Add(1)
	now := time.Now().UnixNano()
	last := s.badEntryLogged.Load()
	if now-last < int64(time.Second) || !s.badEntryLogged.CompareAndSwap(last, now) {
		return
	}
	s.opts.Logger.Error("store: consume-queue entry does not match the commit log; skipped",
		"topic", topic, "queue", queueID, "queueOffset", qoff, "commitLogOffset", e.CommitLogOffset, "size", e.Size,
		"reason", why, "skippedSoFar", s.stats.badEntries.Load())
}

// markLost turns the consume-queue entries that point into a range the
// commit log lost (below its recovered end) into lost-message entries
// (consumequeue.LostSize), which Get skips and counts, and so do the
// all-zero entries among them (their pages never reached the disk, and
// re-dispatch, which runs first, found no record for them). Get checks a
// record's header against its entry, not its body: after a power loss a
// record inside a torn range (covered by a hole now) can keep an intact
// header over a torn body, and its entry, flushed before the crash while
// the record was not synced, would serve it. Queue offsets stay dense.
// reportLosses has named these messages already.
func (s *Store) markLost(losses []commitlog.Loss, end int64) error {
	var marked int64
	var ferr error
	for _, l := range losses {
		if l.From >= end {
			continue // beyond the end: the queues are cut there
		}
		s.cqs.ForEach(func(topic string, id int32, q *consumequeue.Queue) bool {
			first, err := q.SearchCommitLogOffset(l.From)
			if err == nil {
				var last int64
				if last, err = q.SearchCommitLogOffset(l.To); err == nil {
					// prevEnd: where a lost entry standing for an all-zero one
					// points (as FillLost's do), so offsets keep increasing.
					prevEnd := l.From
					if first > q.MinOffset() {
						if e, gerr := q.Get(first - 1); gerr == nil && e.Size > 0 && e.Size != 0x7FFFFFFF {
							prevEnd = max(prevEnd, e.End())
						}
					}
					for k := first; k < last && err == nil; k++ {
						var e consumequeue.Entry
						if e, err = q.Get(k); err != nil || e.IsLost() {
							continue
						}
						lost := consumequeue.Entry{CommitLogOffset: e.CommitLogOffset, Size: consumequeue.LostSize}
						switch {
						case e == (consumequeue.Entry{}):
							// Its page never reached the disk, and re-dispatch
							// did not fill it: its record is in the range.
							lost.CommitLogOffset = prevEnd
						case e.CommitLogOffset < l.From || e.CommitLogOffset >= l.To:
							prevEnd = e.End()
							continue
						}
						var wrote bool
						if wrote, err = q.Repair(k, lost); wrote {
							marked++
						}
						prevEnd = lost.End()
					}
				}
			}
			if err != nil {
				ferr = fmt.Errorf("store: mark the entries of lost messages in %s/%d: %w", topic, id, err)
				return false
			}
			return true
		})
		if ferr != nil {
			return ferr
		}
	}
	if marked > 0 {
		s.opts.Logger.Warn("store: consume-queue entries of messages the commit log lost marked lost", "entries", marked)
	}
	return nil
}
