package broker

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// delayOffsetFileName is the scanners' progress (RocketMQ's
// config/delayOffset.json: {"offsetTable":{"1":n,...}}, by level).
const delayOffsetFileName = "delayOffset.json"

// parseDelayLevels parses RocketMQ's messageDelayLevel: whole numbers with
// the unit s, m, h or d ("ms" is accepted too), separated by spaces.
func parseDelayLevels(s string) ([]time.Duration, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, errors.New("broker: DelayLevels is empty")
	}
	if len(fields) > maxQueues {
		return nil, fmt.Errorf("broker: %d delay levels, at most %d", len(fields), maxQueues)
	}
	out := make([]time.Duration, len(fields))
	for i, f := range fields {
		unit := time.Second
		num := f
		switch {
		case strings.HasSuffix(f, "ms"):
			unit, num = time.Millisecond, f[:len(f)-2]
		case strings.HasSuffix(f, "s"):
			num = f[:len(f)-1]
		case strings.HasSuffix(f, "m"):
			unit, num = time.Minute, f[:len(f)-1]
		case strings.HasSuffix(f, "h"):
			unit, num = time.Hour, f[:len(f)-1]
		case strings.HasSuffix(f, "d"):
			unit, num = 24*time.Hour, f[:len(f)-1]
		default:
			return nil, fmt.Errorf("broker: delay level %d %q: want a number with the unit s, m, h or d", i+1, f)
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n <= 0 || n > int64(400*24*time.Hour/unit) {
			return nil, fmt.Errorf("broker: delay level %d %q: want a positive whole number of %v", i+1, f, unit)
		}
		out[i] = time.Duration(n) * unit
	}
	return out, nil
}

// scheduler runs the delay levels: messages with DELAY = n are stored in
// SCHEDULE_TOPIC_XXXX queue n-1 with their real topic and queue in
// REAL_TOPIC / REAL_QID, and a consume-queue tag code that is their delivery
// time (store time + the level's delay). One scanner goroutine per level
// reads its queue in order (delivery times never decrease within a level),
// re-stores each due message to its real topic and sleeps until the next one
// is due, or until a message arrives in an empty queue. Its progress (the
// next queue offset per level) is persisted in config/delayOffset.json.
type scheduler struct {
	b      *Broker
	delays []int64 // ms, by level-1
	path   string
	wake   []chan struct{} // by level-1

	mu        sync.Mutex
	offsets   []int64 // next queue offset to deliver, by level-1
	changes   uint64
	persistMu sync.Mutex // taken before mu
	persisted uint64     // changes covered by the last write (under persistMu)
}

func newScheduler(b *Broker, levels []time.Duration, cfgDir string) *scheduler {
	s := &scheduler{
		b: b, path: filepath.Join(cfgDir, delayOffsetFileName),
		delays:  make([]int64, len(levels)),
		wake:    make([]chan struct{}, len(levels)),
		offsets: make([]int64, len(levels)),
	}
	for i, d := range levels {
		s.delays[i] = d.Milliseconds()
		s.wake[i] = make(chan struct{}, 1)
	}
	return s
}

// load reads delayOffset.json (or its previous version, see
// loadStateFile) if it exists.
func (s *scheduler) load() error {
	w, found, _, err := loadStateFile(s.path, s.b.opts.Logger, func(data []byte) (protocol.DelayOffsetSerializeWrapper, error) {
		var w protocol.DelayOffsetSerializeWrapper
		return w, w.Decode(data)
	})
	if err != nil || !found {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for level, off := range w.OffsetTable {
		if level >= 1 && int(level) <= len(s.offsets) && off > 0 {
			s.offsets[level-1] = off
		}
	}
	return nil
}

// levels is the number of delay levels.
func (s *scheduler) levels() int { return len(s.delays) }

// clampLevel maps a DELAY value > 0 to a level in 1..levels (RocketMQ
// clamps a level above the last one to the last).
func (s *scheduler) clampLevel(level int64) int32 {
	return int32(min(level, int64(len(s.delays))))
}

// tagCode is the consume-queue tag code of a record in SCHEDULE_TOPIC_XXXX:
// its delivery time.
func (s *scheduler) tagCode(v message.View) int64 {
	level, _, ok := propInt(v.Properties(), message.PropDelay)
	if !ok || level <= 0 {
		level = int64(v.QueueID()) + 1
	}
	level = max(1, min(level, int64(len(s.delays))))
	return v.StoreTimestamp() + s.delays[level-1]
}

// arrived wakes the scanner of a level whose queue grew.
func (s *scheduler) arrived(queueID int32) {
	if queueID >= 0 && int(queueID) < len(s.wake) {
		select {
		case s.wake[queueID] <- struct{}{}:
		default:
		}
	}
}

func (s *scheduler) offset(i int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offsets[i]
}

func (s *scheduler) setOffset(i int, off int64) {
	s.mu.Lock()
	if s.offsets[i] != off {
		s.offsets[i] = off
		s.changes++
	}
	s.mu.Unlock()
}

// snapshot returns the next queue offset to deliver of each level (index
// level-1).
func (s *scheduler) snapshot() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.offsets...)
}

// persist writes delayOffset.json if the progress changed (always with force).
func (s *scheduler) persist(force bool) error {
	s.persistMu.Lock()
	defer s.persistMu.Unlock()
	s.mu.Lock()
	changes := s.changes
	if changes == s.persisted && !force {
		s.mu.Unlock()
		return nil
	}
	w := protocol.DelayOffsetSerializeWrapper{OffsetTable: make(map[int32]int64, len(s.offsets))}
	for i, off := range s.offsets {
		w.OffsetTable[int32(i+1)] = off
	}
	s.mu.Unlock()
	data, err := w.Encode()
	if err != nil {
		return fmt.Errorf("broker: encode delay offsets: %w", err)
	}
	if err := s.b.opts.WriteConfigFile(s.path, data); err != nil {
		return err
	}
	s.persisted = changes
	return nil
}

// start launches one scanner per level.
func (s *scheduler) start() {
	for i := range s.delays {
		// A crash of an async-flush store can lose the end of a queue the
		// persisted offset had passed: start at most at the queue's end.
		if max := s.b.store.MaxOffset(scheduleTopic, int32(i)); s.offset(i) > max {
			s.setOffset(i, max)
		}
		s.b.wg.Add(1)
		go s.scan(i)
	}
}

// scanRetry is how long a scanner waits after a failed read or put.
const scanRetry = time.Second

// scan is the scanner of level i+1.
func (s *scheduler) scan(i int) {
	b := s.b
	defer b.wg.Done()
	q := int32(i)
	var sc innerScratch
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	wait := func(d time.Duration, wake bool) bool {
		if d > 0 {
			timer.Reset(d)
		}
		var w <-chan struct{}
		if wake {
			w = s.wake[i]
		}
		select {
		case <-b.stop:
			return false
		case <-timer.C:
		case <-w:
			if d > 0 && !timer.Stop() {
				<-timer.C
			}
		}
		return true
	}
	for {
		off := s.offset(i)
		ents, err := b.store.ReadEntries(scheduleTopic, q, off, sc.entries(maxInnerBatchLength))
		sc.ents = ents[:0]
		if err != nil {
			if errors.Is(err, store.ErrOffsetOutOfRange) {
				min := b.store.MinOffset(scheduleTopic, q)
				b.opts.Logger.Warn("broker: delayed messages removed by retention before their delivery", "level", i+1,
					"from", off, "to", min)
				s.setOffset(i, min)
				continue
			}
			b.opts.Logger.Error("broker: delay scanner cannot read its queue", "level", i+1, "err", err)
			if !wait(scanRetry, false) {
				return
			}
			continue
		}
		if len(ents) == 0 {
			if !wait(0, true) {
				return
			}
			continue
		}
		now := time.Now().UnixMilli()
		taken, bytes := 0, 0
		var next int64 // ms until the first message not due yet
		for _, e := range ents {
			if e.Size <= 0 || e.Size == blankEntrySize {
				taken++
				continue
			}
			due := e.TagCode
			if due > now+s.delays[i] {
				due = now // the clock went back: deliver rather than wait longer than the level
			}
			if due > now {
				next = due - now
				break
			}
			if len(sc.msgs) > 0 && bytes+int(e.Size) > maxInnerBatchBytes {
				break
			}
			bytes += int(e.Size)
			taken++
			s.redeliver(&sc, e, i)
		}
		if len(sc.msgs) > 0 {
			sc.fix()
			if _, err := b.putInner(sc.msgs, sc.res[:0]); err != nil {
				sc.reset()
				b.opts.Logger.Error("broker: delayed messages could not be delivered; retrying", "level", i+1, "err", err)
				if !wait(scanRetry, false) {
					return
				}
				continue
			}
			b.stats.delayDelivered.Add(int64(len(sc.msgs)))
		}
		sc.reset()
		if taken > 0 {
			s.setOffset(i, off+int64(taken))
			continue
		}
		if !wait(time.Duration(next)*time.Millisecond, false) {
			return
		}
	}
}

// blankEntrySize marks a consume queue's pre-fill entries.
const blankEntrySize = 0x7FFFFFFF

// redeliver queues the record e points to for its real topic and queue: the
// DELAY property is cleared and WAIT=false set (as RocketMQ's
// ScheduleMessageService does); the tag code is computed from TAGS again by
// the store. A record that cannot be read or lacks REAL_TOPIC is skipped.
func (s *scheduler) redeliver(sc *innerScratch, e store.QueueEntry, level int) {
	b := s.b
	view, err := b.store.ReadMessage(e.CommitLogOffset)
	if err != nil {
		b.opts.Logger.Error("broker: delayed message unreadable; skipped", "level", level+1, "offset", e.CommitLogOffset, "err", err)
		return
	}
	v, err := message.Decode(view.Bytes(), false)
	realTopic, okT := v.Property(message.PropRealTopic)
	realQID, _, okQ := propInt(v.Properties(), message.PropRealQueueID)
	if err != nil || !okT || len(realTopic) == 0 || !okQ || realQID < 0 {
		view.Release()
		b.opts.Logger.Error("broker: delayed message without a valid REAL_TOPIC/REAL_QID; skipped", "level", level+1, "offset", e.CommitLogOffset)
		return
	}
	sc.views = append(sc.views, view)
	m := recordMessage(v)
	m.Topic = b.topicName(realTopic)
	m.QueueID = int32(realQID)
	start := len(sc.props)
	sc.props = appendPropsExcept(sc.props, v.Properties(), message.PropDelay, message.PropWait)
	sc.props = message.AppendProperty(sc.props, message.PropWait, "false")
	sc.add(m, start)
}

// topicName returns a topic's name as a string, without allocating when the
// topic is in the topic table.
func (b *Broker) topicName(t []byte) string {
	if e := b.topics.get(t); e != nil {
		return e.name
	}
	return string(t)
}
