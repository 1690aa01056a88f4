package delay

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/broker/internal/reput"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

const (
	// Topic is the system topic that holds delayed messages: queue n-1 for
	// level n.
	Topic = "SCHEDULE_TOPIC_XXXX"
	// StateFile is the scanners' progress, RocketMQ's
	// config/delayOffset.json: {"offsetTable":{"1":n,...}}, the next queue
	// offset to deliver by level.
	StateFile = "delayOffset.json"
	// MaxLevels bounds the number of delay levels (the schedule topic has a
	// queue per level).
	MaxLevels = 1024
	// retryAfter is how long a scanner waits after a failed read or put.
	retryAfter = time.Second
)

// Host is what the scheduler needs of the broker. Its methods are called
// from the scanners' goroutines concurrently (Records once per scanner).
type Host interface {
	// ReadEntries, MinOffset and MaxOffset read the schedule topic's
	// consume queues, with store.Store's contract: ReadEntries fills dst
	// up to its capacity, returns dst unchanged at or past the max offset
	// and an error wrapping store.ErrOffsetOutOfRange below the min offset.
	ReadEntries(topic string, queueID int32, offset int64, dst []store.QueueEntry) ([]store.QueueEntry, error)
	MinOffset(topic string, queueID int32) int64
	MaxOffset(topic string, queueID int32) int64
	// Records returns a record reader for one goroutine.
	Records() reput.Records
	// PutInner stores messages the broker makes itself and returns once
	// they are stored (and durable, in sync-flush mode); res is appended to.
	PutInner(msgs []store.Message, res []store.PutResult) ([]store.PutResult, error)
	// TopicName returns a topic's name as a string (without allocating when
	// the topic is known).
	TopicName(name []byte) string
	// LoadState reads the state file name, calling parse with its contents
	// (parse may be called again with an older version when one does not
	// parse); found is false when there is none. WriteState replaces it
	// atomically.
	LoadState(name string, parse func(data []byte) error) (found bool, err error)
	WriteState(name string, data []byte) error
}

// Config configures a Scheduler.
type Config struct {
	// Levels are the delays of levels 1..len(Levels) (ParseLevels); at
	// least one, at most MaxLevels, each positive.
	Levels []time.Duration
	// Logger receives the scanners' warnings and errors. Default
	// slog.Default().
	Logger *slog.Logger
}

// Stats are the scheduler's counters.
type Stats struct {
	// Delivered counts the delayed messages stored to their real topic.
	Delivered int64
}

// Scheduler runs the delay levels; see the package documentation.
type Scheduler struct {
	host   Host
	log    *slog.Logger
	delays []int64 // ms, by level-1; immutable
	wake   []chan struct{}

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	delivered atomic.Int64

	persistMu sync.Mutex // taken before mu
	persisted uint64     // changes covered by the last write (under persistMu)

	mu      sync.Mutex
	offsets []int64 // next queue offset to deliver, by level-1
	changes uint64
}

// ParseLevels parses RocketMQ's messageDelayLevel: whole numbers with the
// unit s, m, h or d ("ms" is accepted too), separated by spaces.
func ParseLevels(s string) ([]time.Duration, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return nil, errors.New("delay: the delay levels are empty")
	}
	if len(fields) > MaxLevels {
		return nil, fmt.Errorf("delay: %d delay levels, at most %d", len(fields), MaxLevels)
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
			return nil, fmt.Errorf("delay: delay level %d %q: want a number with the unit s, m, h or d", i+1, f)
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n <= 0 || n > int64(400*24*time.Hour/unit) {
			return nil, fmt.Errorf("delay: delay level %d %q: want a positive whole number of %v", i+1, f, unit)
		}
		out[i] = time.Duration(n) * unit
	}
	return out, nil
}

// New returns a scheduler of cfg.Levels. It starts nothing: Load its state,
// then Start it once the store is open.
func New(host Host, cfg Config) (*Scheduler, error) {
	n := len(cfg.Levels)
	if n == 0 || n > MaxLevels {
		return nil, fmt.Errorf("delay: %d delay levels, want 1 to %d", n, MaxLevels)
	}
	s := &Scheduler{
		host: host, log: cfg.Logger,
		delays:  make([]int64, n),
		wake:    make([]chan struct{}, n),
		offsets: make([]int64, n),
		stop:    make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	for i, d := range cfg.Levels {
		if d <= 0 {
			return nil, fmt.Errorf("delay: delay level %d is %v, want a positive delay", i+1, d)
		}
		s.delays[i] = d.Milliseconds()
		s.wake[i] = make(chan struct{}, 1)
	}
	return s, nil
}

// Load reads the progress file (StateFile) if there is one. Levels it
// names beyond the configured ones are ignored.
func (s *Scheduler) Load() error {
	var table map[int32]int64
	found, err := s.host.LoadState(StateFile, func(data []byte) error {
		var w protocol.DelayOffsetSerializeWrapper
		if err := w.Decode(data); err != nil {
			return err
		}
		table = w.OffsetTable
		return nil
	})
	if err != nil || !found {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for level, off := range table {
		if level >= 1 && int(level) <= len(s.offsets) && off > 0 {
			s.offsets[level-1] = off
		}
	}
	return nil
}

// Levels is the number of delay levels (the schedule topic's queues).
func (s *Scheduler) Levels() int { return len(s.delays) }

// ClampLevel maps a DELAY value > 0 to a level in 1..Levels (RocketMQ
// clamps a level above the last one to the last).
func (s *Scheduler) ClampLevel(level int64) int32 {
	return int32(min(level, int64(len(s.delays))))
}

// TagCode is the consume-queue tag code of a record in the schedule topic
// (the store's TagCode hook): its delivery time, store time + the level's
// delay. The level is DELAY's (clamped), or the queue's when DELAY is
// missing. It does not allocate and takes no lock.
func (s *Scheduler) TagCode(v message.View) int64 {
	level, _, ok := reput.PropInt(v.Properties(), message.PropDelay)
	if !ok || level <= 0 {
		level = int64(v.QueueID()) + 1
	}
	level = max(1, min(level, int64(len(s.delays))))
	return v.StoreTimestamp() + s.delays[level-1]
}

// Arrived wakes the scanner of a level whose queue grew (the store's
// OnArrival for the schedule topic). It never blocks.
func (s *Scheduler) Arrived(queueID int32) {
	if queueID >= 0 && int(queueID) < len(s.wake) {
		select {
		case s.wake[queueID] <- struct{}{}:
		default:
		}
	}
}

// Offsets returns the next queue offset to deliver of each level (index
// level-1), as GET_ALL_DELAY_OFFSET reports them.
func (s *Scheduler) Offsets() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.offsets...)
}

// SetOffsets replaces the progress of the levels table names (level →
// next queue offset, GET_ALL_DELAY_OFFSET's shape; other levels are
// ignored): a slave's scheduler, which does not run, follows its master's
// with it, and Persist writes it. Call it only while the scanners are not
// running.
func (s *Scheduler) SetOffsets(table map[int32]int64) {
	for level, off := range table {
		if level >= 1 && int(level) <= len(s.delays) && off >= 0 {
			s.setOffset(int(level-1), off)
		}
	}
}

// Stats returns the scheduler's counters.
func (s *Scheduler) Stats() Stats { return Stats{Delivered: s.delivered.Load()} }

func (s *Scheduler) offset(i int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.offsets[i]
}

func (s *Scheduler) setOffset(i int, off int64) {
	s.mu.Lock()
	if s.offsets[i] != off {
		s.offsets[i] = off
		s.changes++
	}
	s.mu.Unlock()
}

// Persist writes the progress file if the progress changed since the last
// write (always with force).
func (s *Scheduler) Persist(force bool) error {
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
		return fmt.Errorf("delay: encode the delay offsets: %w", err)
	}
	if err := s.host.WriteState(StateFile, data); err != nil {
		return fmt.Errorf("delay: persist %s: %w", StateFile, err)
	}
	s.persisted = changes
	return nil
}

// Start launches one scanner per level. Call it once, after Load, with the
// store open.
func (s *Scheduler) Start() {
	for i := range s.delays {
		// A crash of an async-flush store can lose the end of a queue the
		// persisted offset had passed: start at most at the queue's end.
		if max := s.host.MaxOffset(Topic, int32(i)); s.offset(i) > max {
			s.setOffset(i, max)
		}
		s.wg.Add(1)
		go s.scan(i)
	}
}

// Stop stops the scanners and waits for them. A batch being stored is
// finished first. It may be called more than once, and without Start.
func (s *Scheduler) Stop() {
	s.stopOnce.Do(func() { close(s.stop) })
	s.wg.Wait()
}

// scan is the scanner of level i+1.
func (s *Scheduler) scan(i int) {
	defer s.wg.Done()
	q := int32(i)
	sc := reput.Scratch{Recs: s.host.Records()}
	defer sc.Reset()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	// wait sleeps d (none when 0), or until an arrival with wake; false
	// when the scheduler stops.
	wait := func(d time.Duration, wake bool) bool {
		if d > 0 {
			timer.Reset(d)
		}
		var w <-chan struct{}
		if wake {
			w = s.wake[i]
		}
		select {
		case <-s.stop:
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
		ents, err := s.host.ReadEntries(Topic, q, off, sc.Entries(reput.MaxBatchLength))
		sc.Ents = ents[:0]
		if err != nil {
			if errors.Is(err, store.ErrOffsetOutOfRange) {
				min := s.host.MinOffset(Topic, q)
				s.log.Warn("delay: delayed messages removed by retention before their delivery", "level", i+1,
					"from", off, "to", min)
				s.setOffset(i, min)
				continue
			}
			s.log.Error("delay: the scanner cannot read its queue", "level", i+1, "err", err)
			if !wait(retryAfter, false) {
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
			if e.Size <= 0 || e.Size == reput.BlankEntrySize {
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
			if len(sc.Msgs) > 0 && bytes+int(e.Size) > reput.MaxBatchBytes {
				break
			}
			bytes += int(e.Size)
			taken++
			s.redeliver(&sc, e, i)
		}
		if len(sc.Msgs) > 0 {
			sc.Fix()
			if _, err := s.host.PutInner(sc.Msgs, sc.Res[:0]); err != nil {
				sc.Reset()
				s.log.Error("delay: delayed messages could not be delivered; retrying", "level", i+1, "err", err)
				if !wait(retryAfter, false) {
					return
				}
				continue
			}
			s.delivered.Add(int64(len(sc.Msgs)))
		}
		sc.Reset()
		if taken > 0 {
			s.setOffset(i, off+int64(taken))
			continue
		}
		if !wait(time.Duration(next)*time.Millisecond, false) {
			return
		}
	}
}

// redeliver queues the record e points to for its real topic and queue:
// the DELAY property is cleared and WAIT=false set (as RocketMQ's
// ScheduleMessageService does); the tag code is computed from TAGS again by
// the store. A record that cannot be read or lacks a valid REAL_TOPIC and
// REAL_QID is skipped (logged).
func (s *Scheduler) redeliver(sc *reput.Scratch, e store.QueueEntry, level int) {
	rec, err := sc.Recs.Read(e.CommitLogOffset)
	if err != nil {
		s.log.Error("delay: delayed message unreadable; skipped", "level", level+1, "offset", e.CommitLogOffset, "err", err)
		return
	}
	v, err := message.Decode(rec, false)
	var realTopic []byte
	var realQID int32
	ok := err == nil
	if ok {
		realTopic, realQID, ok = reput.RealTarget(v)
	}
	if !ok {
		s.log.Error("delay: delayed message without a valid REAL_TOPIC/REAL_QID; skipped", "level", level+1, "offset", e.CommitLogOffset)
		return
	}
	m := reput.Message(v)
	m.Topic = s.host.TopicName(realTopic)
	m.QueueID = realQID
	start := len(sc.Props)
	sc.Props = reput.AppendPropsExcept(sc.Props, v.Properties(), message.PropDelay, message.PropWait)
	sc.Props = message.AppendProperty(sc.Props, message.PropWait, "false")
	sc.Add(m, start)
}
