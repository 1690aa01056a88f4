package store

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"github.com/apogeemq/apogee/consumequeue"
	"github.com/apogeemq/apogee/litequeue"
)

// Lite topics (RocketMQ 5.5, RIP-83): a record whose properties carry
// message.PropertyLiteTopic is stored once, in its topic (the parent) and
// queue as any record, and the dispatcher also appends its entry to the
// lite topic (parent, lite) in the lite-topic index (package litequeue,
// <dir>/litequeue/). Lite queue offsets are assigned by the dispatcher,
// dense per lite topic, in commit-log order; lite consumer offsets live in
// the index too (CommitLiteOffset), not in the broker's offset file.
// docs/lite-topics.md is the design.

// LiteStats describes the lite-topic index (see litequeue.Stats).
type LiteStats = litequeue.Stats

// liteDirName is the lite-topic index's directory under the store's.
const liteDirName = "litequeue"

// liteParentTopic reports whether records of topic may be indexed as lite
// topics: every topic but the broker's system ones, whose records keep the
// property of the message they carry (a dead letter in %DLQ%<group>, a
// retry, a scheduled message or a timer's record) and must not create a
// lite topic under them.
func liteParentTopic(topic string) bool {
	for _, p := range [...]string{"%DLQ%", "%RETRY%", "%LMQ%", "SCHEDULE_TOPIC_XXXX", "rmq_sys_", "RMQ_SYS_"} {
		if strings.HasPrefix(topic, p) {
			return false
		}
	}
	return true
}

// openLite opens the lite-topic index (recovery step, after the log).
func (s *Store) openLite() error {
	o := s.opts
	lq, rep, err := litequeue.Open(filepath.Join(o.Dir, liteDirName), litequeue.Options{
		FileSize:  o.LiteFileSize,
		FS:        o.FS,
		StoreTime: s.liteStoreTime,
	})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	s.lq = lq
	switch {
	case rep.TableRejected != "":
		o.Logger.Warn("store: the lite-topic index's TABLE failed its checks; the index was rebuilt from its block headers and the commit log (nothing to do; a TABLE is only written by a clean stop)",
			"reason", rep.TableRejected, "liteTopics", rep.Topics, "brokenChains", rep.BrokenChains, "emptied", rep.Emptied)
	case !rep.Clean && rep.Topics > 0:
		// After a crash, chains cut and a journal tail cut are what was
		// never synced: re-dispatch writes it again.
		o.Logger.Info("store: lite-topic index rebuilt from its block headers", "liteTopics", rep.Topics,
			"brokenChains", rep.BrokenChains, "emptied", rep.Emptied, "journalBytesCut", rep.JournalCut)
	}
	return nil
}

// liteStoreTime reads the store time of the record a lite entry points at.
func (s *Store) liteStoreTime(e litequeue.Entry) (int64, bool) {
	ms, err := s.storeTimeOf(consumequeue.Entry{CommitLogOffset: e.CommitLogOffset, Size: e.Size})
	return ms, err == nil
}

// liteDeleteBelow applies retention to the lite-topic index when the log's
// minimum moved.
func (s *Store) liteDeleteBelow(logMin int64) error {
	if s.liteMin.Load() >= logMin {
		return nil
	}
	if err := s.lq.DeleteBelow(logMin); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	s.liteMin.Store(logMin)
	return nil
}

// writeLite appends p's entry to its lite topic. An entry the index refuses
// (a name too long, the index full) is logged and skipped; a failure to
// write (no disk space for a block) stops dispatch before the record, to be
// retried.
func (d *dispatcher) writeLite(p *pendingRecord) error {
	s := d.s
	r, err := s.lq.Append(p.v.Topic(), p.lite, litequeue.Entry{CommitLogOffset: p.e.CommitLogOffset, Size: p.e.Size, TagCode: p.e.TagCode},
		p.v.StoreTimestamp())
	if err != nil {
		if errors.Is(err, litequeue.ErrBadName) || errors.Is(err, litequeue.ErrFull) {
			s.stats.liteRefused.Add(1)
			if !d.liteDown {
				d.liteDown = true
				s.opts.Logger.Error("store: lite-topic index refused an entry; the message is stored in its parent topic but not in its lite topic (a lite topic name over 1024 bytes, or 67,108,864 lite topics alive: set lite.topic.expiration on the parent topics so idle ones expire)",
					"topic", string(p.v.Topic()), "offset", p.off, "err", err)
			}
			return nil
		}
		return err
	}
	d.liteDown = false
	if !r.Dup && s.opts.OnLiteArrival != nil {
		d.liteTouched[uint64(r.ID)<<32|uint64(r.Gen)] = struct{}{}
	}
	return nil
}

// flushLiteArrival tells the broker about every lite topic that grew.
func (d *dispatcher) flushLiteArrival() {
	if len(d.liteTouched) == 0 {
		return
	}
	for k := range d.liteTouched {
		if parent, lite, max, ok := d.s.lq.Describe(uint32(k>>32), uint32(k)); ok {
			d.s.opts.OnLiteArrival(parent, lite, max)
		}
	}
	clear(d.liteTouched)
}

// liteBatch bounds how many entries GetLite reads from the index at a time.
const liteBatch = 64

// GetLite returns up to maxMsgs messages (and about maxBytes; at least one
// when any is there) of the lite topic (parent, lite) from its queue
// offset offset, with Get's statuses, next offset and bounds (no filter:
// lite consumers subscribe to everything). An unknown lite topic reads as
// empty at 0 (NoMessageInQueue). Release res when done.
func (s *Store) GetLite(parent, lite string, offset int64, maxMsgs, maxBytes int, res *GetResult) error {
	res.Release()
	res.Status, res.NextOffset, res.MinOffset, res.MaxOffset = NoMessageInQueue, 0, 0, 0
	if s.closed.Load() {
		return ErrClosed
	}
	if maxMsgs <= 0 {
		maxMsgs = 1
	}
	if cap(res.entries) < liteBatch {
		res.entries = make([]consumequeue.Entry, 0, liteBatch)
	}
	var buf [liteBatch]litequeue.Entry
	g := getRead{s: s, res: res, topic: parent, queueID: -1, lite: lite, isLite: true, maxMsgs: maxMsgs, maxBytes: maxBytes,
		logMin: s.log.MinOffset(), next: offset}
	for first := true; len(res.Messages) < maxMsgs; first = false {
		n := min(liteBatch, maxMsgs-len(res.Messages))
		lentries, qmin, qmax, _, err := s.lq.Read(parent, lite, g.next, buf[:0:n])
		if err != nil {
			res.Release()
			return fmt.Errorf("store: read lite topic %s/%s at %d: %w", parent, lite, g.next, err)
		}
		if first && res.outside(offset, qmin, qmax) { // an unknown lite topic has no offsets: empty at 0
			return nil
		}
		if len(lentries) == 0 {
			break
		}
		entries := res.entries[:0]
		for _, e := range lentries {
			entries = append(entries, consumequeue.Entry{CommitLogOffset: e.CommitLogOffset, Size: e.Size, TagCode: e.TagCode})
		}
		if g.take(entries) || g.next >= qmax {
			break
		}
	}
	s.finishGet(res, g.next, g.removing)
	return nil
}

// LiteOffsets returns the lite topic's min and max offsets; ok is false for
// an unknown lite topic.
func (s *Store) LiteOffsets(parent, lite string) (min, max int64, ok bool) {
	return s.lq.Offsets(parent, lite)
}

// LiteTopics calls fn for each lite topic of parent until fn returns false.
// fn runs without a lock held and may call the store.
func (s *Store) LiteTopics(parent string, fn func(lite string, min, max, lastStoreMs int64) bool) {
	s.lq.ForEach(parent, func(_ string, li litequeue.LiteInfo) bool {
		return fn(li.Lite, li.Min, li.Max, li.LastStoreMs)
	})
}

// LiteCount is how many lite topics exist (every parent).
func (s *Store) LiteCount() int { return s.lq.Count() }

// DeleteLite removes the lite topic (parent, lite), its entries and every
// group's offset in it; its records stay in the parent. A later message
// creates it again at offset 0. Deleting an unknown lite topic removes its
// offsets, if any, and is not an error.
func (s *Store) DeleteLite(parent, lite string) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if _, err := s.lq.Delete(parent, lite); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// ExpireLite deletes parent's lite topics whose last message was stored
// before idleBeforeMs (ms), calling deleted with each one's name, and
// returns how many it deleted.
func (s *Store) ExpireLite(parent string, idleBeforeMs int64, deleted func(lite string)) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	n, err := s.lq.Expire(parent, idleBeforeMs, deleted)
	if err != nil {
		return n, fmt.Errorf("store: %w", err)
	}
	return n, nil
}

// CommitLiteOffset records group's consumer offset in the lite topic
// (parent, lite). Lite offsets are kept by the lite-topic index (not the
// broker's consumerOffset.json), journaled at the next flush (at most
// Options.FlushInterval later): a crash loses at most that.
func (s *Store) CommitLiteOffset(group, parent, lite string, offset int64) error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.lq.CommitOffset(group, parent, lite, offset); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// LiteOffset returns group's consumer offset in the lite topic (parent, lite).
func (s *Store) LiteOffset(group, parent, lite string) (int64, bool) {
	return s.lq.Offset(group, parent, lite)
}

// LiteStats returns the lite-topic index's state.
func (s *Store) LiteStats() LiteStats { return s.lq.Stats() }

// deleteLiteParent removes every lite topic of a deleted parent topic.
func (s *Store) deleteLiteParent(topic string) error {
	_, err := s.lq.Expire(topic, math.MaxInt64, nil)
	return err
}

// LiteOffsetRecord is one lite consumer offset with its change number
// (litequeue.LiteOffset).
type LiteOffsetRecord = litequeue.LiteOffset

// LiteOffsetsSince appends to dst, in change order, up to limit lite
// consumer offsets changed after change number since of this run of the
// index (epoch: LiteOffsetEpoch), and reports whether more remain: what a
// slave follows (litequeue's "Following the lite consumer offsets").
func (s *Store) LiteOffsetsSince(since uint64, limit int, dst []LiteOffsetRecord) ([]LiteOffsetRecord, bool) {
	return s.lq.OffsetsSince(since, limit, dst)
}

// LiteOffsetEpoch names this run of the lite offsets' change numbers.
func (s *Store) LiteOffsetEpoch() int64 { return s.lq.OffsetEpoch() }
