package timerwheel

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/broker/internal/reput"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

const (
	// Topic is the system topic timer messages wait in (queue 0), RocketMQ
	// 5's rmq_sys_wheel_timer.
	Topic = "rmq_sys_wheel_timer"
	// StateFile is the wheel's progress (a Checkpoint, JSON) in the
	// broker's config directory.
	StateFile = "timerCheckpoint.json"
	// PropTimerOutMS is the delivery time (ms) of a record in Topic.
	PropTimerOutMS = "TIMER_OUT_MS"
	// PropRollTimes counts how often a record was written again to Topic
	// (a roll).
	PropRollTimes = "TIMER_ROLL_TIMES"
	// MaxDelayLimit bounds the broker's TimerMaxDelay so that store time
	// and delivery time are never more than 2^22 s apart (see packTag).
	MaxDelayLimit = 45 * 24 * time.Hour
)

// Timer tag codes. A timer record's consume-queue tag code packs its
// delivery time (ms, 42 bits: until the year 2109) above its store time in
// seconds modulo 2^22 (48.5 days), so that the wheel can be rebuilt from the
// consume queue alone, without reading a record, and every record's roll
// time is known (deterministically) from its entry.
const (
	storeBits  = 22
	storeMask  = 1<<storeBits - 1
	deliverMax = 1<<42 - 1
	// storeSlack: a record may be stored up to this many seconds after its
	// delivery time (it was routed as a timer just before it came due).
	storeSlack = 60
	// chunkShift groups timer queue offsets in chunks of 4096 for the
	// count of pending entries that gives the checkpoint's pending offset.
	chunkShift = 12
	// loadBatch is how many entries one load step reads.
	loadBatch = 1024
	// retryAfter is how long the wheel waits after a failed read or put.
	retryAfter = time.Second
)

// packTag is the tag code of a timer record stored at storeMs for
// delivery at deliverMs.
func packTag(deliverMs, storeMs int64) int64 {
	return int64(uint64(deliverMs&deliverMax)<<storeBits | uint64(storeMs/1000)&storeMask)
}

// unpackTag returns the delivery time and the store time (in whole
// seconds, as ms) of a timer tag code.
func unpackTag(tag int64) (deliverMs, storeMs int64) {
	deliverMs = int64(uint64(tag) >> storeBits)
	deliverSec := deliverMs / 1000
	d := (deliverSec - int64(uint64(tag)&storeMask)) & storeMask
	if d > storeMask-storeSlack {
		d -= storeMask + 1
	}
	return deliverMs, (deliverSec - d) * 1000
}

// ErrIllegal is matched (errors.Is) by every error DeliverTime returns: the
// message's timer properties are malformed or ask for more than the max
// delay. The error's text is RocketMQ's remark for MESSAGE_ILLEGAL.
var ErrIllegal = errors.New("timerwheel: illegal timer properties")

type illegalError string

func (e illegalError) Error() string        { return string(e) }
func (e illegalError) Is(target error) bool { return target == ErrIllegal }

func beyondMax(maxDelay time.Duration) error {
	return illegalError(fmt.Sprintf("timer message illegal, the delay time should not be bigger than the max delay %dms", maxDelay.Milliseconds()))
}

// DeliverTime reads a message's timer properties (TIMER_DELIVER_MS, else
// TIMER_DELAY_SEC, else TIMER_DELAY_MS, RocketMQ 5's order), from the
// send's properties as parsed once (message.SendProps), and returns the
// delivery time in ms. isTimer is false when there are none or the time has
// already come (the message is then an ordinary one). A malformed value or
// a delay beyond maxDelay is an error (ErrIllegal). now is read only for a
// message that has one of the properties, not on every send; nothing is
// allocated unless an error is returned.
func DeliverTime(sp *message.SendProps, now func() time.Time, maxDelay time.Duration) (deliver int64, isTimer bool, err error) {
	var nowMs int64
	if v, present, ok := sp.Int(message.SendTimerDeliverMS); present {
		if !ok {
			return 0, false, illegalError("the TIMER_DELIVER_MS property is not a number")
		}
		nowMs, deliver = now().UnixMilli(), v
	} else if v, present, ok := sp.Int(message.SendTimerDelaySec); present {
		if !ok || v > int64(maxDelay/time.Second)+1 {
			return 0, false, beyondMax(maxDelay)
		}
		nowMs = now().UnixMilli()
		deliver = nowMs + v*1000
	} else if v, present, ok := sp.Int(message.SendTimerDelayMS); present {
		if !ok || v > maxDelay.Milliseconds()+1 {
			return 0, false, beyondMax(maxDelay)
		}
		nowMs = now().UnixMilli()
		deliver = nowMs + v
	} else {
		return 0, false, nil
	}
	if deliver <= nowMs {
		return 0, false, nil
	}
	if deliver-nowMs > maxDelay.Milliseconds() {
		return 0, false, beyondMax(maxDelay)
	}
	return deliver, true, nil
}

// AppendRoute moves m to the timer topic for delivery at deliverMs:
// REAL_TOPIC, REAL_QID and TIMER_OUT_MS are appended to props, and m's topic
// and queue become Topic, 0. The caller sets m.Properties. It does not
// allocate beyond props' growth.
func AppendRoute(props []byte, m *store.Message, deliverMs int64) []byte {
	props = message.AppendProperty(props, message.PropRealTopic, m.Topic)
	props = reput.AppendPropInt(props, message.PropRealQueueID, int64(m.QueueID))
	props = reput.AppendPropInt(props, PropTimerOutMS, deliverMs)
	m.Topic, m.QueueID = Topic, 0
	return props
}

// Host is what the wheel needs of the broker. Its methods are called from
// the wheel's goroutine, and Persist's caller's (LoadState from Load's).
type Host interface {
	// ReadEntries, MinOffset and MaxOffset read the timer topic's consume
	// queue, with store.Store's contract: ReadEntries fills dst up to its
	// capacity, returns dst unchanged at or past the max offset and an
	// error wrapping store.ErrOffsetOutOfRange below the min offset.
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

// Config configures a Wheel.
type Config struct {
	// RollInterval: a record is written again to the timer topic (a roll)
	// once this long after it was stored, while its delivery time is
	// further away, so that retention never deletes a pending timer. It
	// must be positive.
	RollInterval time.Duration
	// CheckpointInterval is how often, at most, the wheel publishes a new
	// checkpoint while busy (it also does whenever it goes idle); the
	// broker persists at ProgressFlushInterval and sets this to half of
	// it. Default 500 ms.
	CheckpointInterval time.Duration
	// Logger receives the wheel's warnings and errors. Default
	// slog.Default().
	Logger *slog.Logger
}

// Checkpoint is the wheel's persisted progress: every entry of the timer
// queue below PendingOffset is done, every entry in [PendingOffset,
// LoadedOffset) whose due time is below FiredBefore is done (delivered or
// rolled), and nothing from LoadedOffset on was acted upon.
type Checkpoint struct {
	LoadedOffset  int64 `json:"loadedOffset"`
	PendingOffset int64 `json:"pendingOffset"`
	FiredBefore   int64 `json:"firedBefore"`
}

// Stats are the wheel's counters and state.
type Stats struct {
	// Pending is the number of loaded timers not yet acted upon.
	Pending int
	// Fired counts timers delivered to their real topic; Rolls, records
	// written again to the timer topic.
	Fired, Rolls int64
	// Checkpoint is the latest consistent checkpoint (what Persist writes).
	Checkpoint Checkpoint
}

// entry is a pending timer: its record and when the wheel acts on it. It
// holds no pointer, so the garbage collector does not scan the heap.
type entry struct {
	due  int64 // ms: the delivery time, or the roll time of a record that would outlive retention
	off  int64 // commit-log offset of the record
	qoff int64 // its offset in the timer queue
	size int32
	roll bool // at due the record is written again to the timer topic, not delivered
}

// Wheel delivers timer messages; see the package documentation.
type Wheel struct {
	host       Host
	log        *slog.Logger
	rollMs     int64
	ckInterval time.Duration
	wake       chan struct{}

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	started  atomic.Bool // set by Start: Stop then publishes a last checkpoint

	fired, rolls atomic.Int64

	// Owned by the loop goroutine (by Load and Start before it runs, by
	// Stop after it ended).
	heap        []entry
	chunks      map[int64]int32 // timer-queue chunk -> pending entries in it
	loaded      int64           // next timer queue offset to load
	restore     Checkpoint      // what the last run persisted
	lastCk      time.Time
	firedAt     int64 // ms: every entry below firedLoaded due at or before it is done
	firedLoaded int64
	sc          reput.Scratch
	batch       []entry

	persistMu sync.Mutex // taken before mu
	persisted uint64     // changes covered by the last write (under persistMu)

	mu      sync.Mutex
	ck      Checkpoint // latest consistent checkpoint, written by Persist
	pending int        // len(heap), for Stats
	changes uint64
	// recalled are the recalled keys and their delivery times (recall.go);
	// dropped, those whose entries were dropped since the last checkpoint.
	recalled map[string]int64
	dropped  []string
}

// New returns a wheel. It starts nothing: Load its state, then Start it
// once the store is open.
func New(host Host, cfg Config) (*Wheel, error) {
	if cfg.RollInterval <= 0 {
		return nil, fmt.Errorf("timerwheel: roll interval %v, want a positive one", cfg.RollInterval)
	}
	w := &Wheel{
		host: host, log: cfg.Logger, rollMs: cfg.RollInterval.Milliseconds(), ckInterval: cfg.CheckpointInterval,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), chunks: make(map[int64]int32),
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.ckInterval <= 0 {
		w.ckInterval = 500 * time.Millisecond
	}
	return w, nil
}

// Load reads the checkpoint (StateFile) if there is one. Call it before
// Start.
func (w *Wheel) Load() error {
	var ck Checkpoint
	var recalled map[string]int64
	found, err := w.host.LoadState(StateFile, func(data []byte) error {
		var p persisted
		if err := json.Unmarshal(data, &p); err != nil {
			return err
		}
		c := p.Checkpoint
		if c.PendingOffset < 0 || c.LoadedOffset < c.PendingOffset {
			return fmt.Errorf("timerwheel: inconsistent checkpoint %+v", c)
		}
		ck = c
		recalled = p.Recalled
		return nil
	})
	if err != nil || !found {
		return err
	}
	w.restore = ck
	w.mu.Lock()
	w.ck = ck
	w.recalled = recalled
	w.mu.Unlock()
	return nil
}

// TagCode is the consume-queue tag code of a record in the timer topic (the
// store's TagCode hook): its TIMER_OUT_MS and store time, packed. It does
// not allocate and takes no lock.
func (w *Wheel) TagCode(v message.View) int64 {
	deliver, _, _ := reput.PropInt(v.Properties(), PropTimerOutMS)
	return packTag(deliver, v.StoreTimestamp())
}

// dueOf returns when the wheel acts on an entry with this tag code.
func (w *Wheel) dueOf(tag int64) (due int64, roll bool) {
	deliver, stored := unpackTag(tag)
	// stored is the store time rounded down to the second: roll no earlier
	// than a full interval after the real store time.
	if rollAt := stored + 1000 + w.rollMs; deliver > rollAt {
		return rollAt, true
	}
	return deliver, false
}

// Arrived wakes the wheel: the timer queue grew (the store's OnArrival for
// the timer topic). It never blocks.
func (w *Wheel) Arrived() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Start positions the loader and launches the loop. Call it once, after
// Load, with the store open.
func (w *Wheel) Start() {
	max := w.host.MaxOffset(Topic, 0)
	w.loaded = min(w.restore.PendingOffset, max)
	if w.restore.LoadedOffset > max {
		// An async-flush crash lost the end of the queue: what is left is
		// still governed by the checkpoint.
		w.restore.LoadedOffset = max
	}
	w.sc.Recs = w.host.Records()
	w.started.Store(true)
	w.wg.Add(1)
	go w.run()
}

// Stop stops the loop, waits for it (a put in flight completes first) and
// publishes a last checkpoint for Persist. It may be called more than once,
// and without Start.
func (w *Wheel) Stop() {
	w.stopOnce.Do(func() {
		close(w.stop)
		w.wg.Wait()
		if w.started.Load() {
			w.snapshot(true)
		}
	})
}

// Stats returns the wheel's counters, its pending count and its latest
// checkpoint.
func (w *Wheel) Stats() Stats {
	w.mu.Lock()
	pending, ck := w.pending, w.ck
	w.mu.Unlock()
	return Stats{Pending: pending, Fired: w.fired.Load(), Rolls: w.rolls.Load(), Checkpoint: ck}
}

func (w *Wheel) run() {
	defer w.wg.Done()
	defer w.sc.Reset()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		more, err := w.loadSome()
		if err != nil {
			w.log.Error("timerwheel: cannot read the timer queue", "err", err)
		}
		failed := w.fireDue()
		w.mu.Lock()
		w.pending = len(w.heap)
		w.mu.Unlock()
		w.snapshot(false)
		var d time.Duration
		switch {
		case failed || err != nil:
			d = retryAfter
		case more:
			continue
		case len(w.heap) > 0:
			d = time.Duration(w.heap[0].due-time.Now().UnixMilli()) * time.Millisecond
			if d <= 0 {
				continue
			}
		default:
			d = -1
		}
		if !failed && err == nil {
			w.snapshot(true) // going to sleep: publish the latest progress
		}
		if d > 0 {
			timer.Reset(d)
		}
		select {
		case <-w.stop:
			return
		case <-w.wake:
			if d > 0 && !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

// loadSome reads up to loadBatch new entries of the timer queue into the
// heap; more reports that there may be more to read.
func (w *Wheel) loadSome() (more bool, err error) {
	ents, err := w.host.ReadEntries(Topic, 0, w.loaded, w.sc.Entries(loadBatch))
	w.sc.Ents = ents[:0]
	if err != nil {
		if errors.Is(err, store.ErrOffsetOutOfRange) {
			min := w.host.MinOffset(Topic, 0)
			w.log.Warn("timerwheel: timer records removed by retention before their time", "from", w.loaded, "to", min)
			w.loaded = min
			return true, nil
		}
		return false, err
	}
	for _, e := range ents {
		qoff := w.loaded
		w.loaded++
		if e.Size <= 0 || e.Size == reput.BlankEntrySize {
			continue
		}
		due, roll := w.dueOf(e.TagCode)
		if qoff < w.restore.LoadedOffset && due < w.restore.FiredBefore {
			continue // done before the restart
		}
		w.push(entry{due: due, off: e.CommitLogOffset, qoff: qoff, size: e.Size, roll: roll})
	}
	return len(ents) == loadBatch, nil
}

// fireDue delivers (or rolls) every entry due by now, in batches; it reports
// whether a put failed (the entries stay pending).
func (w *Wheel) fireDue() (failed bool) {
	for {
		now := time.Now().UnixMilli()
		if len(w.heap) == 0 || w.heap[0].due > now {
			w.firedAt, w.firedLoaded = now, w.loaded
			return false
		}
		w.batch = w.batch[:0]
		bytes := 0
		fired, rolled := 0, 0
		for len(w.heap) > 0 && w.heap[0].due <= now && len(w.batch) < reput.MaxBatchLength &&
			(len(w.batch) == 0 || bytes+int(w.heap[0].size) <= reput.MaxBatchBytes) {
			e := w.pop()
			bytes += int(e.size)
			w.batch = append(w.batch, e)
			switch w.fire(e) {
			case actFired:
				fired++
			case actRolled:
				rolled++
			}
		}
		if len(w.sc.Msgs) > 0 {
			w.sc.Fix()
			if _, err := w.host.PutInner(w.sc.Msgs, w.sc.Res[:0]); err != nil {
				w.sc.Reset()
				for _, e := range w.batch {
					w.insert(e) // still counted in its chunk: popped, not done
				}
				w.log.Error("timerwheel: timer messages could not be delivered; retrying", "err", err)
				return true
			}
		}
		w.sc.Reset()
		w.fired.Add(int64(fired))
		w.rolls.Add(int64(rolled))
		for _, e := range w.batch {
			w.done(e)
		}
	}
}

// action is what fire queued for an entry.
type action uint8

const (
	actDropped action = iota
	actFired
	actRolled
)

// fire queues the re-store of one entry's record: to its real topic, or
// (a roll) to the timer topic again. An unreadable record, or one without
// a valid REAL_TOPIC / REAL_QID, is dropped (logged).
func (w *Wheel) fire(e entry) action {
	sc := &w.sc
	rec, err := sc.Recs.Read(e.off)
	if err != nil {
		w.log.Error("timerwheel: timer record unreadable; dropped", "offset", e.off, "err", err)
		return actDropped
	}
	v, err := message.Decode(rec, false)
	var realTopic []byte
	var realQID int32
	ok := err == nil
	if ok {
		realTopic, realQID, ok = reput.RealTarget(v)
	}
	if !ok {
		w.log.Error("timerwheel: timer record without a valid REAL_TOPIC/REAL_QID; dropped", "offset", e.off)
		return actDropped
	}
	if w.isRecalled(v.UniqKey()) {
		w.log.Info("timerwheel: recalled timer message dropped", "offset", e.off, "topic", string(realTopic))
		return actDropped
	}
	m := reput.Message(v)
	start := len(sc.Props)
	if e.roll {
		rolls, _, _ := reput.PropInt(v.Properties(), PropRollTimes)
		sc.Props = reput.AppendPropsExcept(sc.Props, v.Properties(), PropRollTimes)
		sc.Props = reput.AppendPropInt(sc.Props, PropRollTimes, rolls+1)
		m.Topic, m.QueueID = Topic, 0
		sc.Add(m, start)
		return actRolled
	}
	sc.Props = reput.AppendPropsExcept(sc.Props, v.Properties(), message.PropTimerDeliverMS, message.PropTimerDelaySec,
		message.PropTimerDelayMS, message.PropDelay, message.PropWait)
	sc.Props = message.AppendProperty(sc.Props, message.PropWait, "false")
	m.Topic, m.QueueID = w.host.TopicName(realTopic), realQID
	sc.Add(m, start)
	return actFired
}

// done records that an entry was acted upon.
func (w *Wheel) done(e entry) {
	c := e.qoff >> chunkShift
	if n := w.chunks[c] - 1; n > 0 {
		w.chunks[c] = n
	} else {
		delete(w.chunks, c)
	}
}

// snapshot publishes a consistent checkpoint for Persist: it runs right
// after fireDue (or after the loop stopped), when every entry loaded and
// due at or before w.firedAt is done. It runs at most every ckInterval
// unless forced.
func (w *Wheel) snapshot(force bool) {
	now := time.Now()
	if !force && now.Sub(w.lastCk) < w.ckInterval {
		return
	}
	w.lastCk = now
	if w.firedAt == 0 {
		return // no successful pass yet
	}
	pendingFrom := w.firedLoaded
	for c := range w.chunks {
		pendingFrom = min(pendingFrom, c<<chunkShift)
	}
	ck := Checkpoint{LoadedOffset: w.firedLoaded, PendingOffset: pendingFrom, FiredBefore: w.firedAt + 1}
	if ck.FiredBefore < w.restore.FiredBefore && w.firedLoaded <= w.restore.LoadedOffset {
		ck.FiredBefore = w.restore.FiredBefore // never move backwards within the restored range
	}
	w.mu.Lock()
	if ck != w.ck {
		w.ck = ck
		w.changes++
	}
	if n := len(w.recalled); n > 0 {
		w.pruneRecalledLocked(ck.FiredBefore)
		if len(w.recalled) != n {
			w.changes++
		}
	}
	w.mu.Unlock()
}

// Persist writes the latest checkpoint if it changed since the last write
// (always with force). Stop publishes a final one first.
func (w *Wheel) Persist(force bool) error {
	w.persistMu.Lock()
	defer w.persistMu.Unlock()
	w.mu.Lock()
	p := persisted{Checkpoint: w.ck}
	if len(w.recalled) > 0 {
		p.Recalled = maps.Clone(w.recalled)
	}
	changes := w.changes
	w.mu.Unlock()
	if changes == w.persisted && !force {
		return nil
	}
	data, err := json.Marshal(p)
	if err != nil {
		return fmt.Errorf("timerwheel: encode the checkpoint: %w", err)
	}
	if err := w.host.WriteState(StateFile, data); err != nil {
		return fmt.Errorf("timerwheel: persist %s: %w", StateFile, err)
	}
	w.persisted = changes
	return nil
}

// ---- the heap: a binary min-heap by due time, on the slice itself ----

// push adds a newly loaded entry and counts it in its chunk.
func (w *Wheel) push(e entry) {
	w.chunks[e.qoff>>chunkShift]++
	w.insert(e)
}

// insert adds an entry to the heap (an entry popped and not done is still
// counted in its chunk).
func (w *Wheel) insert(e entry) {
	h := append(w.heap, e)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p].due <= h[i].due {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	w.heap = h
}

// pop removes the earliest entry (its chunk count is kept until done).
func (w *Wheel) pop() entry {
	h := w.heap
	top := h[0]
	n := len(h) - 1
	h[0] = h[n]
	h = h[:n]
	for i := 0; ; {
		l := 2*i + 1
		if l >= n {
			break
		}
		c := l
		if r := l + 1; r < n && h[r].due < h[l].due {
			c = r
		}
		if h[i].due <= h[c].due {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	w.heap = h
	return top
}
