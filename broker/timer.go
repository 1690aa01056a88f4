package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// timerCheckpointFileName is the timer wheel's progress in DataDir/config.
const timerCheckpointFileName = "timerCheckpoint.json"

// Timer tag codes. A timer record's consume-queue tag code packs its
// delivery time (ms, 42 bits: until the year 2109) above its store time in
// seconds modulo 2^22 (48.5 days), so that the wheel can be rebuilt from the
// consume queue alone, without reading a record, and every record's roll
// time is known (deterministically) from its entry.
const (
	timerStoreBits  = 22
	timerStoreMask  = 1<<timerStoreBits - 1
	timerDeliverMax = 1<<42 - 1
	// timerStoreSlack: a record may be stored up to this many seconds after
	// its delivery time (it was routed as a timer just before it came due).
	timerStoreSlack = 60
	// timerMaxDelayLimit bounds TimerMaxDelay so that store time and
	// delivery time are never more than 2^22 s apart.
	timerMaxDelayLimit = 45 * 24 * time.Hour
	// timerChunkShift groups timer queue offsets in chunks of 4096 for the
	// count of pending entries that gives the checkpoint's pending offset.
	timerChunkShift = 12
	// timerLoadBatch is how many entries one load step reads.
	timerLoadBatch = 1024
)

// packTimerTag is the tag code of a timer record stored at storeMs for
// delivery at deliverMs.
func packTimerTag(deliverMs, storeMs int64) int64 {
	return int64(uint64(deliverMs&timerDeliverMax)<<timerStoreBits | uint64(storeMs/1000)&timerStoreMask)
}

// unpackTimerTag returns the delivery time and the store time (in whole
// seconds, as ms) of a timer tag code.
func unpackTimerTag(tag int64) (deliverMs, storeMs int64) {
	deliverMs = int64(uint64(tag) >> timerStoreBits)
	deliverSec := deliverMs / 1000
	d := (deliverSec - int64(uint64(tag)&timerStoreMask)) & timerStoreMask
	if d > timerStoreMask-timerStoreSlack {
		d -= timerStoreMask + 1
	}
	return deliverMs, (deliverSec - d) * 1000
}

// timerEntry is a pending timer: its record and when the wheel acts on it.
type timerEntry struct {
	due  int64 // ms: the delivery time, or the roll time of a record that would outlive retention
	off  int64 // commit-log offset of the record
	qoff int64 // its offset in the timer queue
	size int32
	roll bool // at due the record is written again to the timer topic, not delivered
}

// timerCheckpoint is the wheel's persisted progress: every entry of the
// timer queue below PendingOffset is done, every entry in [PendingOffset,
// LoadedOffset) whose due time is below FiredBefore is done (delivered or
// rolled), and nothing from LoadedOffset on was acted upon.
type timerCheckpoint struct {
	LoadedOffset  int64 `json:"loadedOffset"`
	PendingOffset int64 `json:"pendingOffset"`
	FiredBefore   int64 `json:"firedBefore"`
}

// timerWheel delivers messages at arbitrary times (TIMER_DELIVER_MS,
// TIMER_DELAY_SEC, TIMER_DELAY_MS). A timer message is stored once, in the
// timer topic (rmq_sys_wheel_timer, queue 0), with REAL_TOPIC, REAL_QID and
// TIMER_OUT_MS; its consume-queue entry carries the delivery and store
// times (packTimerTag). The wheel is an index of the pending entries kept by
// one goroutine: a binary min-heap of fixed-size entries without pointers
// (32 bytes each; the garbage collector does not scan it), ordered by due
// time. The goroutine loads new entries as the store dispatches them,
// sleeps until the earliest is due, and re-stores due messages to their real
// topic; inserting and firing cost O(log n), nothing scans the pending
// timers. A record that would be deleted by retention before its time is
// written again to the timer topic (a roll) every TimerRollInterval.
//
// After a restart the heap is rebuilt from the timer queue, from the
// checkpoint's PendingOffset, skipping what the checkpoint says is done (the
// due time of an entry is a function of its tag code alone, so the same
// entries are skipped whatever the restart time).
type timerWheel struct {
	b      *Broker
	path   string
	rollMs int64
	wake   chan struct{}

	// Owned by the loop goroutine (and by start before it runs).
	heap        []timerEntry
	chunks      map[int64]int32 // timer-queue chunk -> pending entries in it
	loaded      int64           // next timer queue offset to load
	restore     timerCheckpoint // what the last run persisted
	lastCk      time.Time
	fired       int64 // ms: every entry below firedLoaded due at or before it is done
	firedLoaded int64
	sc          innerScratch
	batch       []timerEntry

	mu        sync.Mutex
	ck        timerCheckpoint // latest consistent checkpoint, written by persist
	pending   int             // len(heap), for statistics
	changes   uint64
	persistMu sync.Mutex // taken before mu
	persisted uint64
}

func newTimerWheel(b *Broker, cfgDir string, roll time.Duration) *timerWheel {
	return &timerWheel{
		b: b, path: filepath.Join(cfgDir, timerCheckpointFileName), rollMs: roll.Milliseconds(),
		wake: make(chan struct{}, 1), chunks: make(map[int64]int32),
	}
}

// load reads the checkpoint (or its previous version, see loadStateFile)
// if it exists.
func (w *timerWheel) load() error {
	ck, found, _, err := loadStateFile(w.path, w.b.opts.Logger, func(data []byte) (timerCheckpoint, error) {
		var ck timerCheckpoint
		if err := json.Unmarshal(data, &ck); err != nil {
			return ck, err
		}
		if ck.PendingOffset < 0 || ck.LoadedOffset < ck.PendingOffset {
			return ck, fmt.Errorf("inconsistent checkpoint %+v", ck)
		}
		return ck, nil
	})
	if err != nil || !found {
		return err
	}
	w.restore, w.ck = ck, ck
	return nil
}

// tagCode is the consume-queue tag code of a timer record.
func (w *timerWheel) tagCode(v message.View) int64 {
	deliver, _, _ := propInt(v.Properties(), propTimerOutMS)
	return packTimerTag(deliver, v.StoreTimestamp())
}

// dueOf returns when the wheel acts on an entry with this tag code.
func (w *timerWheel) dueOf(tag int64) (due int64, roll bool) {
	deliver, stored := unpackTimerTag(tag)
	// stored is the store time rounded down to the second: roll no earlier
	// than a full interval after the real store time.
	if rollAt := stored + 1000 + w.rollMs; deliver > rollAt {
		return rollAt, true
	}
	return deliver, false
}

func (w *timerWheel) arrived() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// start positions the loader and launches the loop.
func (w *timerWheel) start() {
	max := w.b.store.MaxOffset(timerTopic, 0)
	w.loaded = min(w.restore.PendingOffset, max)
	if w.restore.LoadedOffset > max {
		// An async-flush crash lost the end of the queue: what is left is
		// still governed by the checkpoint.
		w.restore.LoadedOffset = max
	}
	w.b.wg.Add(1)
	go w.run()
}

// timerRetry is how long the wheel waits after a failed read or put.
const timerRetry = time.Second

func (w *timerWheel) run() {
	b := w.b
	defer b.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		more, err := w.loadSome()
		if err != nil {
			b.opts.Logger.Error("broker: timer wheel cannot read the timer queue", "err", err)
		}
		failed := w.fireDue()
		w.mu.Lock()
		w.pending = len(w.heap)
		w.mu.Unlock()
		w.snapshot(false)
		var d time.Duration
		switch {
		case failed || err != nil:
			d = timerRetry
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
		case <-b.stop:
			return
		case <-w.wake:
			if d > 0 && !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

// loadSome reads up to timerLoadBatch new entries of the timer queue into
// the heap; more reports that there may be more to read.
func (w *timerWheel) loadSome() (more bool, err error) {
	ents, err := w.b.store.ReadEntries(timerTopic, 0, w.loaded, w.sc.entries(timerLoadBatch))
	w.sc.ents = ents[:0]
	if err != nil {
		if errors.Is(err, store.ErrOffsetOutOfRange) {
			min := w.b.store.MinOffset(timerTopic, 0)
			w.b.opts.Logger.Warn("broker: timer records removed by retention before their time", "from", w.loaded, "to", min)
			w.loaded = min
			return true, nil
		}
		return false, err
	}
	for _, e := range ents {
		qoff := w.loaded
		w.loaded++
		if e.Size <= 0 || e.Size == blankEntrySize {
			continue
		}
		due, roll := w.dueOf(e.TagCode)
		if qoff < w.restore.LoadedOffset && due < w.restore.FiredBefore {
			continue // done before the restart
		}
		w.push(timerEntry{due: due, off: e.CommitLogOffset, qoff: qoff, size: e.Size, roll: roll})
	}
	return len(ents) == timerLoadBatch, nil
}

// fireDue delivers (or rolls) every entry due by now, in batches; it reports
// whether a put failed (the entries stay pending).
func (w *timerWheel) fireDue() (failed bool) {
	b := w.b
	for {
		now := time.Now().UnixMilli()
		if len(w.heap) == 0 || w.heap[0].due > now {
			w.fired, w.firedLoaded = now, w.loaded
			return false
		}
		w.batch = w.batch[:0]
		bytes := 0
		for len(w.heap) > 0 && w.heap[0].due <= now && len(w.batch) < maxInnerBatchLength &&
			(len(w.batch) == 0 || bytes+int(w.heap[0].size) <= maxInnerBatchBytes) {
			e := w.pop()
			bytes += int(e.size)
			w.batch = append(w.batch, e)
			w.fire(e)
		}
		if len(w.sc.msgs) > 0 {
			w.sc.fix()
			if _, err := b.putInner(w.sc.msgs, w.sc.res[:0]); err != nil {
				w.sc.reset()
				for _, e := range w.batch {
					w.push(e)
				}
				b.opts.Logger.Error("broker: timer messages could not be delivered; retrying", "err", err)
				return true
			}
		}
		w.sc.reset()
		for _, e := range w.batch {
			w.done(e)
		}
	}
}

// fire queues the re-store of one entry's record: to its real topic, or
// (a roll) to the timer topic again. An unreadable record is dropped.
func (w *timerWheel) fire(e timerEntry) {
	b := w.b
	view, err := b.store.ReadMessage(e.off)
	if err != nil {
		b.opts.Logger.Error("broker: timer record unreadable; dropped", "offset", e.off, "err", err)
		return
	}
	v, err := message.Decode(view.Bytes(), false)
	realTopic, okT := v.Property(message.PropRealTopic)
	realQID, _, okQ := propInt(v.Properties(), message.PropRealQueueID)
	if err != nil || !okT || len(realTopic) == 0 || !okQ || realQID < 0 {
		view.Release()
		b.opts.Logger.Error("broker: timer record without a valid REAL_TOPIC/REAL_QID; dropped", "offset", e.off)
		return
	}
	sc := &w.sc
	sc.views = append(sc.views, view)
	m := recordMessage(v)
	start := len(sc.props)
	if e.roll {
		rolls, _, _ := propInt(v.Properties(), propTimerRollTimes)
		sc.props = appendPropsExcept(sc.props, v.Properties(), propTimerRollTimes)
		sc.props = appendPropInt(sc.props, propTimerRollTimes, rolls+1)
		m.Topic, m.QueueID = timerTopic, 0
		b.stats.timerRolls.Add(1)
	} else {
		sc.props = appendPropsExcept(sc.props, v.Properties(), message.PropTimerDeliverMS, message.PropTimerDelaySec,
			message.PropTimerDelayMS, message.PropDelay, message.PropWait)
		sc.props = message.AppendProperty(sc.props, message.PropWait, "false")
		m.Topic, m.QueueID = b.topicName(realTopic), int32(realQID)
		b.stats.timersFired.Add(1)
	}
	sc.add(m, start)
}

// done records that an entry was acted upon.
func (w *timerWheel) done(e timerEntry) {
	c := e.qoff >> timerChunkShift
	if n := w.chunks[c] - 1; n > 0 {
		w.chunks[c] = n
	} else {
		delete(w.chunks, c)
	}
}

// snapshot publishes a consistent checkpoint for persist: it runs right
// after fireDue (or after the loop stopped), when every entry loaded and due
// at or before w.fired is done. It runs at most every half
// ProgressFlushInterval unless forced.
func (w *timerWheel) snapshot(force bool) {
	now := time.Now()
	if !force && now.Sub(w.lastCk) < w.b.opts.ProgressFlushInterval/2 {
		return
	}
	w.lastCk = now
	if w.fired == 0 {
		return // no successful pass yet
	}
	fired := w.fired + 1
	pendingFrom := w.firedLoaded
	for c := range w.chunks {
		pendingFrom = min(pendingFrom, c<<timerChunkShift)
	}
	ck := timerCheckpoint{LoadedOffset: w.firedLoaded, PendingOffset: pendingFrom, FiredBefore: fired}
	if ck.FiredBefore < w.restore.FiredBefore && w.firedLoaded <= w.restore.LoadedOffset {
		ck.FiredBefore = w.restore.FiredBefore // never move backwards within the restored range
	}
	w.mu.Lock()
	if ck != w.ck {
		w.ck = ck
		w.changes++
	}
	w.mu.Unlock()
}

// persist writes the latest checkpoint if it changed (always with force).
func (w *timerWheel) persist(force bool) error {
	w.persistMu.Lock()
	defer w.persistMu.Unlock()
	w.mu.Lock()
	ck, changes := w.ck, w.changes
	w.mu.Unlock()
	if changes == w.persisted && !force {
		return nil
	}
	data, err := json.Marshal(ck)
	if err != nil {
		return fmt.Errorf("broker: encode timer checkpoint: %w", err)
	}
	if err := w.b.opts.WriteConfigFile(w.path, data); err != nil {
		return err
	}
	w.persisted = changes
	return nil
}

// stats returns the number of pending timers and the checkpoint.
func (w *timerWheel) stats() (int, timerCheckpoint) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pending, w.ck
}

// timerProps moves m to the timer topic for delivery at deliverMs: REAL_TOPIC,
// REAL_QID and TIMER_OUT_MS are appended to props.
func (b *Broker) timerProps(props []byte, m *store.Message, deliverMs int64) []byte {
	props = message.AppendProperty(props, message.PropRealTopic, m.Topic)
	props = appendPropInt(props, message.PropRealQueueID, int64(m.QueueID))
	props = appendPropInt(props, propTimerOutMS, deliverMs)
	m.Topic, m.QueueID = timerTopic, 0
	b.stats.timers.Add(1)
	return props
}

// ---- the heap: a binary min-heap by due time, on the slice itself ----

func (w *timerWheel) push(e timerEntry) {
	w.chunks[e.qoff>>timerChunkShift]++
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
func (w *timerWheel) pop() timerEntry {
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

// snapshotIfIdle takes a last checkpoint when the loop has stopped
// (Shutdown); otherwise the loop takes its own.
func (w *timerWheel) snapshotIfIdle(stopped bool) {
	if stopped {
		w.snapshot(true)
	}
}
