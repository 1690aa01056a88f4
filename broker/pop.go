package broker

// Pop consumption: RocketMQ 5's message-granularity model (POP_MESSAGE 3442,
// ACK_MESSAGE 3443, CHANGE_MESSAGE_INVISIBLETIME 3445).
//
// Unlike the Java broker (which writes check-point and ack records to
// internal topics and revives them with PopReviveService), Apogee keeps the
// bookkeeping in memory, per (group, topic, queue), and persists it whole to
// config/popState.json:
//
//   - next: the first queue offset never handed out to the group. Every
//     offset below it is either done (acked, filtered out, dead-lettered) or
//     in flight.
//   - inflight: offset → {visibleAt, popTime, attempts, message group}. A
//     popped message is invisible until visibleAt (wall clock, ms); once
//     that passes without an ack, the next pop of the group delivers it again
//     (attempts + 1, its record's reconsumeTimes raised to match). A message
//     delivered 1 + retryMaxTimes (the group's, 16) times that comes back
//     once more goes to %DLQ%<group> instead.
//   - FIFO: an orderly pop (order=true) of a message group (SHARDING_KEY or
//     __SHARDINGKEY) hands out one message of the group at a time: a message
//     whose group has an earlier message in flight waits (an entry with
//     popTime 0, never delivered) until that one is acked or dead-lettered.
//
// A receipt handle (protocol.ExtraInfo) names the message by queue and offset;
// its popTime says which delivery it belongs to. ACK and CHANGE_INVISIBLETIME
// with the handle of an older delivery (the message was popped again since)
// are refused with NO_MESSAGE (208); an ack of a message already done
// succeeds.
//
// Persistence: the state is written (temporary file, fsync, rename) at most
// every ProgressFlushInterval (1 s) when it changed, and at Shutdown. After a
// crash, what changed since the last write is lost: acks are forgotten (the
// messages are delivered again: at least once) and pops are forgotten (the
// messages become visible again at once). Every acked change also commits
// the group's consumer offset (the lowest offset not yet done) to the offset
// table.
//
// Locking: popManager.mu guards every queue's state and is held while the
// store is read for a pop (the store calls nothing back); it is a leaf
// otherwise. Pops of all groups are serialised by it: simple, and pops are
// not the broker's hot path. Records are copied into the response (one
// buffer per pop), so nothing is pinned after the handler returns.

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/filter"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// Pop limits.
const (
	popStateFileName = "popState.json"
	// maxPopMessages is the most messages one pop returns (the Java broker's limit).
	maxPopMessages = 32
	// maxPopInflight bounds the in-flight (and waiting) messages of one
	// (group, topic, queue): a queue at the limit hands out redeliveries only.
	maxPopInflight = 2000
	// maxPopInvisible bounds invisibleTime (and keeps visibleAt from overflowing).
	maxPopInvisible = int64(30 * 24 * time.Hour / time.Millisecond)
	// maxHeldPops bounds the pops held for long polling; beyond, POLLING_FULL.
	maxHeldPops = 4096
	// popPollInterval is how often a held pop looks again.
	popPollInterval = 20 * time.Millisecond
	// popInitMin and popInitMax are the initMode values (Java's ConsumeInitMode).
	popInitMin = 0
)

type popKey struct {
	group, topic string
	queue        int32
}

// popEntry is one in-flight (or, for FIFO, waiting) message of a group.
type popEntry struct {
	VisibleAt int64  `json:"visibleAt"` // unix ms; 0 for a waiting entry
	PopTime   int64  `json:"popTime"`   // the current delivery's pop time; 0: never delivered
	Attempts  int32  `json:"attempts"`  // deliveries so far
	Key       string `json:"key,omitempty"`
}

type popQueue struct {
	next     int64 // first offset never handed out; -1: not initialised
	inflight map[int64]*popEntry
}

// popManager owns the pop bookkeeping and config/popState.json.
type popManager struct {
	b     *Broker
	path  string
	write func(string, []byte) error

	mu      sync.Mutex
	queues  map[popKey]*popQueue
	changes uint64

	persistMu sync.Mutex // taken before mu
	persisted uint64

	held    atomic.Int64
	holdWG  sync.WaitGroup
	rr      atomic.Uint32
	once    sync.Once
	stop    chan struct{}
	done    chan struct{}
	started atomic.Bool

	stats struct{ pops, popped, acks, changes, redelivered, deadLetters, stale atomic.Int64 }
}

func newPopManager(b *Broker, cfgDir string) (*popManager, error) {
	pm := &popManager{b: b, path: filepath.Join(cfgDir, popStateFileName), write: b.opts.WriteConfigFile,
		queues: make(map[popKey]*popQueue), stop: make(chan struct{}), done: make(chan struct{})}
	if err := pm.load(); err != nil {
		return nil, err
	}
	return pm, nil
}

// popStateFile is the JSON shape of config/popState.json.
type popStateFile struct {
	Queues []popStateQueue `json:"queues"`
}

type popStateQueue struct {
	Group    string              `json:"group"`
	Topic    string              `json:"topic"`
	QueueID  int32               `json:"queueId"`
	Next     int64               `json:"next"`
	Inflight map[string]popEntry `json:"inflight,omitempty"` // by queue offset
}

// load reads popState.json (or its previous version, see loadStateFile)
// if it exists.
func (pm *popManager) load() error {
	f, found, _, err := loadStateFile(pm.path, pm.b.opts.Logger, func(data []byte) (popStateFile, error) {
		var f popStateFile
		return f, json.Unmarshal(data, &f)
	})
	if err != nil || !found {
		return err
	}
	for _, q := range f.Queues {
		if q.Group == "" || q.Topic == "" || q.QueueID < 0 || q.QueueID >= maxOffsetQueueID {
			continue
		}
		pq := &popQueue{next: max(q.Next, 0), inflight: make(map[int64]*popEntry, len(q.Inflight))}
		for k, e := range q.Inflight {
			off, err := strconv.ParseInt(k, 10, 64)
			if err != nil || off < 0 || off >= pq.next {
				continue
			}
			e := e
			pq.inflight[off] = &e
		}
		pm.queues[popKey{q.Group, q.Topic, q.QueueID}] = pq
	}
	return nil
}

// encode returns the state as JSON and the change count it covers.
func (pm *popManager) encode() ([]byte, uint64, error) {
	pm.mu.Lock()
	f := popStateFile{Queues: make([]popStateQueue, 0, len(pm.queues))}
	for k, q := range pm.queues {
		if q.next < 0 {
			continue
		}
		s := popStateQueue{Group: k.group, Topic: k.topic, QueueID: k.queue, Next: q.next}
		if len(q.inflight) > 0 {
			s.Inflight = make(map[string]popEntry, len(q.inflight))
			for off, e := range q.inflight {
				s.Inflight[strconv.FormatInt(off, 10)] = *e
			}
		}
		f.Queues = append(f.Queues, s)
	}
	changes := pm.changes
	pm.mu.Unlock()
	slices.SortFunc(f.Queues, func(a, b popStateQueue) int {
		if a.Group != b.Group {
			return cmpString(a.Group, b.Group)
		}
		if a.Topic != b.Topic {
			return cmpString(a.Topic, b.Topic)
		}
		return int(a.QueueID - b.QueueID)
	})
	data, err := json.Marshal(&f)
	return data, changes, err
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// persist writes popState.json when it changed (always with force).
func (pm *popManager) persist(force bool) error {
	pm.persistMu.Lock()
	defer pm.persistMu.Unlock()
	pm.mu.Lock()
	unchanged := pm.changes == pm.persisted
	pm.mu.Unlock()
	if unchanged && !force {
		return nil
	}
	data, changes, err := pm.encode()
	if err != nil {
		return fmt.Errorf("broker: encode pop state: %w", err)
	}
	if err := pm.write(pm.path, data); err != nil {
		return err
	}
	pm.mu.Lock()
	pm.persisted = changes
	pm.mu.Unlock()
	return nil
}

// start runs the persister (once, at the first pop request).
func (pm *popManager) start() {
	pm.once.Do(func() {
		pm.started.Store(true)
		go pm.loop()
	})
}

func (pm *popManager) loop() {
	defer close(pm.done)
	t := time.NewTicker(pm.b.opts.ProgressFlushInterval)
	defer t.Stop()
	for {
		select {
		case <-pm.stop:
			return
		case <-t.C:
			if err := pm.persist(false); err != nil {
				pm.b.stats.persistErrors.Add(1)
				pm.b.opts.Logger.Error("broker: persist the pop state failed", "err", err)
			}
		}
	}
}

// close stops the persister and writes the state a last time. Shutdown calls
// it once no request runs any more.
func (pm *popManager) close() error {
	pm.once.Do(func() {}) // no persister after this
	pm.holdWG.Wait()      // held pops answer within popPollInterval once closing is set
	if pm.started.Load() {
		close(pm.stop)
		<-pm.done
	}
	if err := pm.persist(false); err != nil {
		pm.b.stats.persistErrors.Add(1)
		return err
	}
	return nil
}

// changedLocked records a change of q (pm.mu held) and commits the group's
// consumer offset: the lowest offset not yet done.
func (pm *popManager) changedLocked(k popKey, q *popQueue) {
	pm.changes++
	low := q.next
	for off := range q.inflight {
		low = min(low, off)
	}
	pm.b.offsets.commit([]byte(k.topic), []byte(k.group), k.queue, low)
}

// queueLocked returns the state of k, initialised (pm.mu held).
func (pm *popManager) queueLocked(k popKey, initMode int32) *popQueue {
	q := pm.queues[k]
	if q == nil {
		q = &popQueue{next: -1, inflight: make(map[int64]*popEntry)}
		pm.queues[k] = q
	}
	if q.next < 0 {
		st := pm.b.store
		if off, ok := pm.b.offsets.query([]byte(k.topic), []byte(k.group), k.queue); ok {
			q.next = off
		} else if initMode == popInitMin {
			q.next = st.MinOffset(k.topic, k.queue)
		} else {
			// From the last message on (the Java broker's initMode MAX).
			q.next = max(st.MaxOffset(k.topic, k.queue)-1, st.MinOffset(k.topic, k.queue), 0)
		}
		pm.changes++
	}
	return q
}

// popRequest is what a pop needs, owned (copied from the request).
type popRequest struct {
	group, topic string
	queueID      int32 // -1: any
	queues       int32 // the topic's read queues
	max          int
	invisible    int64
	initMode     int32
	order        bool
	filter       filter.Filter
	retryMax     int32
}

// popResult is a pop's answer: the records (copied, back to back) and the
// response header.
type popResult struct {
	body []byte
	n    int
	hdr  protocol.PopMessageResponse
	// info strings, built in the scratch buffers below
	start, offs, counts []byte
}

// pop hands out up to r.max messages. now is the pop time (ms).
func (pm *popManager) pop(r *popRequest, now int64, res *popResult) {
	res.body, res.n = res.body[:0], 0
	res.start, res.offs, res.counts = res.start[:0], res.offs[:0], res.counts[:0]
	var rest int64
	pm.mu.Lock()
	if r.queueID >= 0 {
		rest += pm.popQueueLocked(r, r.queueID, now, res)
	} else {
		first := pm.rr.Add(1)
		for i := int32(0); i < r.queues; i++ {
			qid := int32((first + uint32(i)) % uint32(r.queues))
			if res.n >= r.max {
				rest += max(pm.b.store.MaxOffset(r.topic, qid)-pm.nextOf(r, qid), 0)
				continue
			}
			rest += pm.popQueueLocked(r, qid, now, res)
		}
	}
	pm.mu.Unlock()
	reviveQid := int32(0)
	if r.order {
		reviveQid = protocol.PopOrderReviveQueue
	}
	res.hdr = protocol.PopMessageResponse{PopTime: now, InvisibleTime: r.invisible, ReviveQid: reviveQid, RestNum: rest,
		StartOffsetInfo: res.start, MsgOffsetInfo: res.offs, OrderCountInfo: res.counts}
	pm.stats.pops.Add(1)
	pm.stats.popped.Add(int64(res.n))
}

// nextOf returns the group's next offset of a queue (pm.mu held; 0 if unknown).
func (pm *popManager) nextOf(r *popRequest, qid int32) int64 {
	if q := pm.queues[popKey{r.group, r.topic, qid}]; q != nil && q.next > 0 {
		return q.next
	}
	return 0
}

// popQueueLocked pops from one queue into res and returns the queue's rest
// (messages not yet handed out). pm.mu is held.
func (pm *popManager) popQueueLocked(r *popRequest, qid int32, now int64, res *popResult) int64 {
	k := popKey{r.group, r.topic, qid}
	q := pm.queueLocked(k, r.initMode)
	st := pm.b.store
	changed := false
	if minOff := st.MinOffset(r.topic, qid); q.next < minOff {
		q.next = minOff // retention removed them
		changed = true
	}
	var res1 store.GetResult
	defer res1.Release()
	var blocked map[string]bool
	if r.order {
		blocked = make(map[string]bool)
	}
	startN := res.n
	var queueOffs []int64

	// Redeliveries (and FIFO messages waiting for their group), in offset order.
	if len(q.inflight) > 0 {
		offs := make([]int64, 0, len(q.inflight))
		for off := range q.inflight {
			offs = append(offs, off)
		}
		slices.Sort(offs)
		for _, off := range offs {
			e := q.inflight[off]
			if r.order && e.Key != "" {
				if blocked[e.Key] {
					continue
				}
				blocked[e.Key] = true
			}
			if e.VisibleAt > now || res.n >= r.max {
				continue
			}
			if err := st.Get(r.topic, qid, off, 1, 0, nil, &res1); err != nil || res1.Status != store.Found {
				delete(q.inflight, off) // gone (retention)
				changed = true
				if r.order && e.Key != "" {
					delete(blocked, e.Key)
				}
				continue
			}
			rec := res1.Messages[0].Bytes()
			if e.Attempts > r.retryMax {
				pm.deadLetter(r.group, rec)
				delete(q.inflight, off)
				changed = true
				if r.order && e.Key != "" {
					delete(blocked, e.Key)
				}
				continue
			}
			if e.PopTime != 0 {
				pm.stats.redelivered.Add(1)
			}
			e.Attempts++
			e.PopTime, e.VisibleAt = now, now+r.invisible
			pm.appendRecord(res, rec, e.Attempts)
			queueOffs = append(queueOffs, off)
			changed = true
		}
	}

	// New messages.
	for tries := 0; res.n < r.max && len(q.inflight) < maxPopInflight && tries < 4; tries++ {
		var sf store.Filter
		if r.filter != nil {
			sf = r.filter
		}
		want := min(r.max-res.n, maxPopInflight-len(q.inflight))
		if err := st.Get(r.topic, qid, q.next, want, maxPullBytes, sf, &res1); err != nil {
			break
		}
		switch res1.Status {
		case store.Found:
		case store.NoMatchedMessage:
			if res1.NextOffset > q.next {
				q.next = res1.NextOffset
				changed = true
			}
			continue
		default:
			tries = 4
			continue
		}
		for i := range res1.Messages {
			rec := res1.Messages[i].Bytes()
			v, err := message.Decode(rec, false)
			if err != nil {
				continue
			}
			off := v.QueueOffset()
			key := ""
			if kb, ok := v.Property(message.PropShardingKey); ok && len(kb) > 0 {
				key = string(kb)
			} else if kb, ok := v.Property(message.PropJavaShardingKey); ok && len(kb) > 0 {
				key = string(kb)
			}
			if r.order && key != "" && blocked[key] {
				q.inflight[off] = &popEntry{Key: key} // waits for its group
				continue
			}
			if r.order && key != "" {
				blocked[key] = true
			}
			q.inflight[off] = &popEntry{PopTime: now, VisibleAt: now + r.invisible, Attempts: 1, Key: key}
			pm.appendRecord(res, rec, 1)
			queueOffs = append(queueOffs, off)
		}
		q.next = max(q.next, res1.NextOffset)
		changed = true
		res1.Release()
	}
	if changed {
		pm.changedLocked(k, q)
	}
	if res.n > startN {
		res.start = appendInfoSep(res.start)
		res.start = append(res.start, "0 "...)
		res.start = strconv.AppendInt(res.start, int64(qid), 10)
		res.start = append(res.start, ' ')
		res.start = strconv.AppendInt(res.start, slices.Min(queueOffs), 10)
		res.offs = appendInfoSep(res.offs)
		res.offs = append(res.offs, "0 "...)
		res.offs = strconv.AppendInt(res.offs, int64(qid), 10)
		res.offs = append(res.offs, ' ')
		for i, off := range queueOffs {
			if i > 0 {
				res.offs = append(res.offs, ',')
			}
			res.offs = strconv.AppendInt(res.offs, off, 10)
		}
		if r.order {
			for _, off := range queueOffs {
				res.counts = appendInfoSep(res.counts)
				res.counts = append(res.counts, "0 qo"...)
				res.counts = strconv.AppendInt(res.counts, int64(qid), 10)
				res.counts = append(res.counts, '%')
				res.counts = strconv.AppendInt(res.counts, off, 10)
				res.counts = append(res.counts, ' ')
				res.counts = strconv.AppendInt(res.counts, int64(q.inflight[off].Attempts-1), 10)
			}
		}
	}
	return max(st.MaxOffset(r.topic, qid)-q.next, 0)
}

func appendInfoSep(b []byte) []byte {
	if len(b) > 0 {
		b = append(b, ';')
	}
	return b
}

// appendRecord copies a record into the response, its reconsumeTimes raised by
// the deliveries before this one.
func (pm *popManager) appendRecord(res *popResult, rec []byte, attempts int32) {
	start := len(res.body)
	res.body = append(res.body, rec...)
	res.n++
	if attempts <= 1 {
		return
	}
	v, err := message.Decode(res.body[start:], false)
	if err != nil {
		return
	}
	off := start + message.OffBornHost + len(v.BornHostBytes()) + 8 + len(v.StoreHostBytes())
	binary.BigEndian.PutUint32(res.body[off:], uint32(v.ReconsumeTimes()+attempts-1))
}

// deadLetter stores a copy of rec in %DLQ%<group> (pm.mu held; the put does
// not wait for a flush).
func (pm *popManager) deadLetter(group string, rec []byte) {
	b := pm.b
	v, err := message.Decode(rec, false)
	if err != nil {
		return
	}
	dt, err := b.ensureGroupTopic(dlqTopic(group), dlqQueues)
	if err != nil {
		b.opts.Logger.Error("broker: pop: create the dead-letter topic failed", "group", group, "err", err)
		return
	}
	m := recordMessage(v)
	m.Topic, m.QueueID = dt.name, 0
	props := appendPropsExcept(nil, v.Properties())
	if _, ok := v.Property(message.PropRetryTopic); !ok {
		props = message.AppendProperty(props, message.PropRetryTopic, string(v.Topic()))
	}
	if id, ok := v.Property(message.PropOriginMessageID); !ok || len(id) == 0 {
		props = append(props, message.PropOriginMessageID...)
		props = append(props, message.NameValueSeparator)
		props = v.AppendOffsetMsgID(props)
		props = append(props, message.PropertySeparator)
	}
	m.Properties = props
	m.NoWait = true
	if _, err := b.store.PutBatch([]store.Message{m}, nil); err != nil {
		b.opts.Logger.Error("broker: pop: dead-letter put failed", "group", group, "err", err)
		return
	}
	b.stats.innerPuts.Add(1)
	b.stats.deadLetters.Add(1)
	pm.stats.deadLetters.Add(1)
	b.opts.Logger.Info("broker: popped message sent to the dead-letter queue", "group", group,
		"topic", string(v.Topic()), "queue", v.QueueID(), "offset", v.QueueOffset())
}

// Results of ack and changeInvisible.
const (
	popOK      = iota
	popDone    // already done: success
	popStale   // the handle is of an older delivery, or the message is not in flight
	popUnknown // never handed out to the group
)

// ack marks a message done for the group.
func (pm *popManager) ack(group, topic string, qid int32, off, popTime int64) int {
	k := popKey{group, topic, qid}
	pm.mu.Lock()
	defer pm.mu.Unlock()
	q := pm.queues[k]
	if q == nil || q.next < 0 {
		return popUnknown
	}
	e := q.inflight[off]
	if e == nil {
		if off < q.next {
			return popDone
		}
		return popUnknown
	}
	if e.PopTime != popTime {
		pm.stats.stale.Add(1)
		return popStale
	}
	delete(q.inflight, off)
	pm.changedLocked(k, q)
	pm.stats.acks.Add(1)
	return popOK
}

// changeInvisible makes an in-flight message invisible until now+invisible
// and returns its new pop time.
func (pm *popManager) changeInvisible(group, topic string, qid int32, off, popTime, now, invisible int64) (int64, int) {
	k := popKey{group, topic, qid}
	pm.mu.Lock()
	defer pm.mu.Unlock()
	q := pm.queues[k]
	if q == nil || q.next < 0 {
		return 0, popUnknown
	}
	e := q.inflight[off]
	if e == nil {
		if off < q.next {
			return 0, popDone
		}
		return 0, popUnknown
	}
	if e.PopTime != popTime {
		pm.stats.stale.Add(1)
		return 0, popStale
	}
	e.PopTime = max(now, e.PopTime+1)
	e.VisibleAt = e.PopTime + invisible
	pm.changedLocked(k, q)
	pm.stats.changes.Add(1)
	return e.PopTime, popOK
}

// ---------------------------------------------------------------------------
// Handlers.

// handlePop serves POP_MESSAGE (3442).
func (b *Broker) handlePop(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	b.pops.start()
	var h protocol.PopMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	if h.MaxMsgNums <= 0 || h.MaxMsgNums > maxPopMessages {
		return fail(resp, protocol.RespInvalidParameter, fmt.Sprintf("maxMsgNums %d is not in 1..%d", h.MaxMsgNums, maxPopMessages))
	}
	if h.InvisibleTime <= 0 || h.InvisibleTime > maxPopInvisible {
		return fail(resp, protocol.RespInvalidParameter, fmt.Sprintf("invisibleTime %d ms is not in 1..%d", h.InvisibleTime, maxPopInvisible))
	}
	t := b.topics.get(h.Topic)
	if t == nil {
		return fail(resp, protocol.RespTopicNotExist, "topic["+string(h.Topic)+"] not exist, apply first please!")
	}
	if !t.readable() {
		return fail(resp, protocol.RespNoPermission, "the topic["+t.name+"] peeking message is forbidden")
	}
	if h.QueueID >= t.cfg.ReadQueueNums {
		return fail(resp, protocol.RespSystemError, fmt.Sprintf("queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d] consumer:[%s]",
			h.QueueID, t.name, t.cfg.ReadQueueNums, bornHost(c)))
	}
	g := b.groups.get(h.ConsumerGroup)
	if g == nil {
		if !validGroupName(h.ConsumerGroup) {
			return fail(resp, protocol.RespSubscriptionGroupNotExist,
				"subscription group ["+string(h.ConsumerGroup)+"] does not exist and its name is illegal, allowing only ^[%|a-zA-Z0-9_-]+$ up to 255 characters")
		}
		var created bool
		if g, created = b.groups.ensure(h.ConsumerGroup); created {
			b.groupsChanged(false)
		}
	}
	if !g.ConsumeEnable {
		return fail(resp, protocol.RespNoPermission, "subscription group no permission, "+g.GroupName)
	}
	var f filter.Filter
	if len(h.Exp) > 0 {
		var err error
		if f, err = b.filters.get(h.ExpType, h.Exp); err != nil {
			return fail(resp, protocol.RespSubscriptionParseFailed, "parse the consumer's subscription failed: "+err.Error())
		}
	}
	r := &popRequest{group: g.GroupName, topic: t.name, queueID: max(h.QueueID, -1), queues: t.cfg.ReadQueueNums,
		max: int(h.MaxMsgNums), invisible: h.InvisibleTime, initMode: h.InitMode, order: h.Order, filter: f,
		retryMax: g.RetryMaxTimes}
	var res popResult
	b.pops.pop(r, time.Now().UnixMilli(), &res)
	if res.n == 0 && h.PollTime > 0 && c != nil && !b.closing.Load() {
		if b.pops.held.Add(1) > maxHeldPops {
			b.pops.held.Add(-1)
			return fail(resp, protocol.RespPollingFull, "the broker holds too many pops")
		}
		hold := min(time.Duration(h.PollTime)*time.Millisecond, b.opts.LongPollMax)
		rsp := c.Defer(req)
		b.pops.holdWG.Add(1)
		go b.pops.hold(r, rsp, time.Now().Add(hold))
		return remoting.Deferred
	}
	fillPopResponse(resp.Cmd, resp, &res)
	return remoting.Reply
}

// fillPopResponse sets the code (SUCCESS or PULL_NOT_FOUND), headers and body.
func fillPopResponse(cmd *protocol.Command, resp *remoting.Response, res *popResult) {
	if res.n == 0 {
		cmd.Code = protocol.RespPullNotFound
		cmd.SetRemark("no new message")
	}
	res.hdr.Encode(&cmd.Ext)
	if res.n > 0 {
		resp.Body = [][]byte{res.body}
	}
}

// hold re-runs a pop that found nothing every popPollInterval until it finds
// messages, its deadline passes or the broker shuts down, then answers it.
func (pm *popManager) hold(r *popRequest, rsp remoting.Responder, deadline time.Time) {
	defer pm.holdWG.Done()
	defer pm.held.Add(-1)
	var res popResult
	t := time.NewTicker(popPollInterval)
	defer t.Stop()
	for {
		<-t.C
		last := !time.Now().Before(deadline) || pm.b.closing.Load()
		pm.pop(r, time.Now().UnixMilli(), &res)
		if res.n > 0 || last {
			break
		}
	}
	var cmd protocol.Command
	rsp.InitResponse(&cmd, protocol.RespSuccess)
	out := remoting.Response{Cmd: &cmd}
	fillPopResponse(&cmd, &out, &res)
	if err := rsp.Reply(&out); err != nil && res.n > 0 {
		pm.b.opts.Logger.Debug("broker: held pop answered on a closed connection; its messages become visible after their invisible time",
			"group", r.group, "topic", r.topic, "err", err)
	}
}

// receipt decodes and checks the common part of ACK and CHANGE_INVISIBLETIME:
// the topic, the queue and the receipt handle.
func (b *Broker) receipt(resp *remoting.Response, topic, extra []byte, qid int32) (*topicEntry, protocol.ExtraInfo, bool) {
	t := b.topics.get(topic)
	if t == nil {
		fail(resp, protocol.RespTopicNotExist, "topic["+string(topic)+"] not exist, apply first please!")
		return nil, protocol.ExtraInfo{}, false
	}
	if qid < 0 || qid >= t.cfg.ReadQueueNums {
		fail(resp, protocol.RespMessageIllegal, fmt.Sprintf("queueId[%d] is illegal, topic:[%s] topicConfig.readQueueNums:[%d]", qid, t.name, t.cfg.ReadQueueNums))
		return nil, protocol.ExtraInfo{}, false
	}
	x, err := protocol.ParseExtraInfo(extra)
	if err != nil {
		fail(resp, protocol.RespInvalidParameter, "bad receipt handle: "+err.Error())
		return nil, protocol.ExtraInfo{}, false
	}
	if x.QueueID != qid {
		fail(resp, protocol.RespInvalidParameter, fmt.Sprintf("the receipt handle is of queue %d, not %d", x.QueueID, qid))
		return nil, protocol.ExtraInfo{}, false
	}
	return t, x, true
}

func popOutcome(resp *remoting.Response, outcome int) remoting.Action {
	switch outcome {
	case popStale:
		return fail(resp, protocol.RespNoMessage, "the receipt handle is expired: the message was received again since")
	case popUnknown:
		return fail(resp, protocol.RespNoMessage, "the message is not in flight for the group")
	}
	return remoting.Reply
}

// handleAck serves ACK_MESSAGE (3443).
func (b *Broker) handleAck(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.AckMessageRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	t, x, ok := b.receipt(resp, h.Topic, h.ExtraInfo, h.QueueID)
	if !ok {
		return remoting.Reply
	}
	return popOutcome(resp, b.pops.ack(string(h.ConsumerGroup), t.name, h.QueueID, h.Offset, x.PopTime))
}

// handleChangeInvisible serves CHANGE_MESSAGE_INVISIBLETIME (3445).
func (b *Broker) handleChangeInvisible(req *protocol.Command, resp *remoting.Response) remoting.Action {
	var h protocol.ChangeInvisibleTimeRequest
	if err := h.Decode(&req.Ext); err != nil {
		return fail(resp, protocol.RespSystemError, err.Error())
	}
	if h.InvisibleTime <= 0 || h.InvisibleTime > maxPopInvisible {
		return fail(resp, protocol.RespInvalidParameter, fmt.Sprintf("invisibleTime %d ms is not in 1..%d", h.InvisibleTime, maxPopInvisible))
	}
	t, x, ok := b.receipt(resp, h.Topic, h.ExtraInfo, h.QueueID)
	if !ok {
		return remoting.Reply
	}
	popTime, outcome := b.pops.changeInvisible(string(h.ConsumerGroup), t.name, h.QueueID, h.Offset, x.PopTime,
		time.Now().UnixMilli(), h.InvisibleTime)
	if outcome == popDone {
		return fail(resp, protocol.RespNoMessage, "the message was acked already")
	}
	if outcome != popOK {
		return popOutcome(resp, outcome)
	}
	(&protocol.ChangeInvisibleTimeResponse{PopTime: popTime, InvisibleTime: h.InvisibleTime, ReviveQid: x.ReviveQid}).Encode(&resp.Cmd.Ext)
	return remoting.Reply
}

// registerPop registers POP_MESSAGE, ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME.
func (b *Broker) registerPop(t *handlerTable) {
	t.add(b.handlePop, protocol.ReqPopMessage)
	t.add(noConn(b.handleAck), protocol.ReqAckMessage)
	t.add(noConn(b.handleChangeInvisible), protocol.ReqChangeMessageInvisibleTime)
}
