package client

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// SendStatus is the broker's verdict on a successful send.
type SendStatus int

// Send statuses: all are successes (the message is stored); the last three say that
// a sync flush or a replica did not confirm in time.
const (
	SendOK SendStatus = iota
	SendFlushDiskTimeout
	SendFlushSlaveTimeout
	SendSlaveNotAvailable
)

func (s SendStatus) String() string {
	switch s {
	case SendFlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case SendFlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case SendSlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	}
	return "SEND_OK"
}

// idBuf holds an id inline, so that a SendResult needs no allocation.
type idBuf struct {
	b [64]byte
	n uint8
	s string // used when the id does not fit
}

func (b *idBuf) set(v []byte) {
	if len(v) <= len(b.b) {
		b.n = uint8(copy(b.b[:], v))
		b.s = ""
		return
	}
	b.n = 0
	b.s = string(v)
}

func (b *idBuf) String() string {
	if b.s != "" {
		return b.s
	}
	return string(b.b[:b.n])
}

// SendResult describes a stored message. It is a value: keep it freely. The id
// methods allocate the string they return.
type SendResult struct {
	Status SendStatus
	// Queue is the queue the message was stored in.
	Queue MessageQueue
	// QueueOffset is the message's offset in Queue (the first message's, for a batch;
	// the half queue's, for a transaction half message).
	QueueOffset int64
	// Messages is the number of messages in the send (1, or the batch's size).
	Messages int

	msgID    idBuf
	offsetID idBuf
	txID     idBuf
}

// MsgID returns the producer's unique id of the message (UNIQ_KEY); for a batch, the
// ids of its messages joined by commas.
func (r *SendResult) MsgID() string { return r.msgID.String() }

// OffsetMsgID returns the broker's offset id of the stored record (for a batch, the
// broker's comma-joined list).
func (r *SendResult) OffsetMsgID() string { return r.offsetID.String() }

// TransactionID returns the transaction id the broker returned, if any.
func (r *SendResult) TransactionID() string { return r.txID.String() }

func (r SendResult) String() string {
	return fmt.Sprintf("SendResult{%s %s offset=%d id=%s}", r.Status, r.Queue, r.QueueOffset, r.MsgID())
}

// Producer sends messages. It is safe for concurrent use. Every Producer and consumer
// of the process with the same client ID shares one connection per broker.
type Producer struct {
	cfg    producerConfig
	in     *instance
	log    *slog.Logger
	comp   *compressor
	faults faultTable
	rrSel  bool

	groupB     []byte
	createKeyB []byte

	sem     chan struct{} // in-flight slots
	closed  atomic.Bool
	closeMu sync.Mutex

	reqs sync.Pool // *sendReq

	// in-flight list for timeouts; the sweeper goroutine runs while it is not empty.
	lmu      sync.Mutex
	head     sendReq // sentinel of a circular list
	sweeping bool
	expired  []*sendReq

	topicMu   sync.Mutex
	topics    map[string]bool
	requested map[string]bool // topics Request has sent to (heartbeat before the first)

	checkOnce sync.Once
	checks    chan struct{} // transaction check slots
}

// NewProducer creates a producer. It validates the options and joins (or creates) the
// client instance; it does not connect until the first send.
func NewProducer(opts ...ProducerOpt) (*Producer, error) {
	cfg := defaultProducerConfig()
	for _, o := range opts {
		o.applyProducer(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	comp, err := newCompressor(cfg.compression, cfg.level)
	if err != nil {
		return nil, err
	}
	in, err := acquireInstance(&cfg.client)
	if err != nil {
		comp.close()
		return nil, err
	}
	p := &Producer{
		cfg:        cfg,
		in:         in,
		log:        cfg.client.logger,
		comp:       comp,
		groupB:     []byte(cfg.group),
		createKeyB: []byte(cfg.createTopicKey),
		sem:        make(chan struct{}, cfg.maxInflight),
		topics:     map[string]bool{},
	}
	_, p.rrSel = cfg.selector.(*roundRobin)
	p.head.next, p.head.prev = &p.head, &p.head
	in.registerProducer(p)
	return p, nil
}

// ClientID returns the client ID the producer's instance uses.
func (p *Producer) ClientID() string { return p.in.id }

// Close waits (until ctx ends) for the sends in flight, leaves the producer group
// (UNREGISTER_CLIENT) and releases the instance; the last client of an instance
// closes its connections.
func (p *Producer) Close(ctx context.Context) error {
	p.closeMu.Lock()
	defer p.closeMu.Unlock()
	if p.closed.Swap(true) {
		return nil
	}
	var err error
	for {
		p.lmu.Lock()
		empty := p.head.next == &p.head
		p.lmu.Unlock()
		if empty {
			break
		}
		select {
		case <-ctx.Done():
			err = fmt.Errorf("client: producer close: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
			continue
		}
		break
	}
	p.in.unregisterProducer(p)
	p.topicMu.Lock()
	for t := range p.topics {
		p.in.dropInterest(t)
	}
	p.topicMu.Unlock()
	uctx, cancel := context.WithTimeout(context.Background(), p.cfg.client.requestTimeout)
	p.in.unregisterClient(uctx, p.cfg.group, "")
	cancel()
	p.in.release()
	p.comp.close()
	return err
}

// sendReq is one send (a message or a sub-batch) from its acceptance to its outcome.
// It is pooled: its buffers and Command make steady-state sends allocation-free.
//
// Ownership: refs counts the parties that still use the request: the send's
// activity chain (the goroutine attempting it, the remoting callback, a retry timer)
// and, for sync sends, the waiting caller. The state moves 1 → 2 exactly once, by
// whoever completes the send (the response, the timeout sweeper, a waiter giving
// up); only that party delivers the outcome. The last party to drop its ref recycles.
type sendReq struct {
	p     *Producer
	cmd   protocol.Command
	hdr   protocol.SendMessageRequest
	props []byte
	body  []byte // compressed body or batch body
	uniq  []byte
	topic []byte
	bname []byte

	msg     *Message
	batch   []*Message
	txn     bool
	sendB   []byte // what goes on the wire as the body
	sysFlag int32

	route      *topicRoute
	queue      MessageQueue
	addr       string
	attempts   int
	busy       int
	lastBroker string
	// refresh: the last attempt failed in a way a route change explains; the next
	// one first refreshes the topic's route (Instance.refreshOnFailure).
	refresh  bool
	deadline int64 // unix nanos
	start    int64 // this attempt's start, unix nanos

	cb     func(SendResult, error)
	done   chan struct{} // sync: signalled once the outcome is set
	sync   bool
	result SendResult
	err    error

	state   atomic.Int32
	refs    atomic.Int32
	onResp  func(*protocol.Command, error)
	retryFn func()

	prev, next *sendReq // in-flight list, under Producer.lmu
}

const (
	reqIdle     = 0
	reqInflight = 1
	reqDone     = 2
)

func (p *Producer) getReq() *sendReq {
	r, _ := p.reqs.Get().(*sendReq)
	if r == nil {
		r = &sendReq{p: p, done: make(chan struct{}, 1)}
		r.onResp = r.handleResponse
		r.retryFn = r.retry
	}
	return r
}

func (r *sendReq) unref() {
	if r.refs.Add(-1) != 0 {
		return
	}
	p := r.p
	r.msg, r.batch, r.cb, r.route, r.err = nil, nil, nil, nil, nil
	r.txn, r.sync = false, false
	r.sendB = nil
	r.result = SendResult{}
	r.state.Store(reqIdle)
	if cap(r.body) > 1<<20 {
		r.body = nil
	}
	p.reqs.Put(r)
}

// SendSync sends msg and waits for the broker's acknowledgement (at most SendTimeout,
// or until ctx ends), retrying as SendRetries says.
func (p *Producer) SendSync(ctx context.Context, msg *Message) (SendResult, error) {
	r, err := p.accept(ctx, msg, nil, true)
	if err != nil {
		return SendResult{}, err
	}
	return p.wait(ctx, r)
}

// SendAsync sends msg and returns once the send has started; fn receives the outcome
// exactly once (if SendAsync returns nil). fn runs on a connection's read goroutine
// (or on the producer's timeout goroutine): it must not block, and should hand long
// work to another goroutine. msg and its Body must not be modified until fn has run
// (a retry sends them again). SendAsync blocks only while MaxInflight sends are
// outstanding, and fails only if msg is invalid, the producer is closed, or ctx ends
// while it waits; every later failure goes to fn. In the steady state it allocates
// nothing of its own (see BenchmarkProducerAsync).
func (p *Producer) SendAsync(ctx context.Context, msg *Message, fn func(SendResult, error)) error {
	if fn == nil {
		return fmt.Errorf("%w: nil callback", ErrBadMessage)
	}
	_, err := p.accept(ctx, msg, fn, false)
	return err
}

// SendFuture is the outcome of a SendAsyncFuture, available once Done is closed.
type SendFuture struct {
	done   chan struct{}
	result SendResult
	err    error
}

// Done is closed when the outcome is known.
func (f *SendFuture) Done() <-chan struct{} { return f.done }

// Result waits for the outcome (or for ctx to end).
func (f *SendFuture) Result(ctx context.Context) (SendResult, error) {
	select {
	case <-f.done:
		return f.result, f.err
	case <-ctx.Done():
		return SendResult{}, ctx.Err()
	}
}

// SendAsyncFuture is SendAsync returning a future instead of taking a callback. It
// allocates the future (and its callback).
func (p *Producer) SendAsyncFuture(ctx context.Context, msg *Message) (*SendFuture, error) {
	f := &SendFuture{done: make(chan struct{})}
	err := p.SendAsync(ctx, msg, func(res SendResult, err error) {
		f.result, f.err = res, err
		close(f.done)
	})
	if err != nil {
		return nil, err
	}
	return f, nil
}

// SendOneway sends msg without waiting for, or asking for, an acknowledgement (the
// request carries the oneway flag). It is not retried.
func (p *Producer) SendOneway(ctx context.Context, msg *Message) error {
	if p.closed.Load() {
		return ErrClosed
	}
	route, err := p.publishRoute(ctx, msg.Topic)
	if err != nil {
		return err
	}
	r := p.getReq()
	r.refs.Store(1)
	defer r.unref()
	r.msg, r.route = msg, route
	if err := r.prepare(); err != nil {
		return err
	}
	now := time.Now().UnixNano()
	if err := r.pickQueue(now); err != nil {
		return err
	}
	r.encode(now)
	cl, err := p.in.pool.Get(ctx, r.addr)
	if err == nil {
		err = cl.InvokeOneway(&r.cmd)
	}
	if err != nil {
		if p.in.gate.gap >= 0 {
			go p.refreshTopic(msg.Topic) // for the next send; this one is not retried
		}
		return fmt.Errorf("client: oneway send to %s: %w", r.addr, err)
	}
	return nil
}

// accept validates and starts a send. For a sync send the returned request holds a
// ref for the caller, who must wait for it.
func (p *Producer) accept(ctx context.Context, msg *Message, fn func(SendResult, error), sync bool) (*sendReq, error) {
	return p.acceptKind(ctx, msg, fn, sync, false)
}

// acceptKind is accept, for a transaction's half message when txn is set
// (always sync, without a callback).
func (p *Producer) acceptKind(ctx context.Context, msg *Message, fn func(SendResult, error), sync, txn bool) (*sendReq, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	if msg == nil || msg.Topic == "" {
		return nil, fmt.Errorf("%w: no topic", ErrBadMessage)
	}
	route, err := p.publishRoute(ctx, msg.Topic)
	if err != nil {
		return nil, err
	}
	r := p.getReq()
	r.msg, r.route, r.cb, r.sync, r.txn = msg, route, fn, sync, txn
	if err := r.prepare(); err != nil {
		r.refs.Store(1)
		r.unref()
		return nil, err
	}
	if err := p.start(ctx, r); err != nil {
		return nil, err
	}
	return r, nil
}

// start takes an in-flight slot and launches the first attempt.
func (p *Producer) start(ctx context.Context, r *sendReq) error {
	select {
	case p.sem <- struct{}{}:
	default:
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			r.refs.Store(1)
			r.unref()
			return fmt.Errorf("client: waiting for an in-flight slot: %w", ctx.Err())
		}
	}
	now := time.Now().UnixNano()
	r.deadline = now + int64(p.cfg.sendTimeout)
	if d, ok := ctx.Deadline(); ok && d.UnixNano() < r.deadline {
		r.deadline = d.UnixNano()
	}
	r.attempts, r.busy, r.lastBroker, r.refresh = 0, 0, "", false
	if r.sync {
		r.refs.Store(2)
	} else {
		r.refs.Store(1)
	}
	r.state.Store(reqInflight)
	p.track(r)
	r.run(now)
	return nil
}

// wait waits for a sync send's outcome and drops the caller's ref.
func (p *Producer) wait(ctx context.Context, r *sendReq) (SendResult, error) {
	select {
	case <-r.done:
		res, err := r.result, r.err
		r.unref()
		return res, err
	case <-ctx.Done():
		if r.complete() {
			p.finishLocked(r)
			r.unref()
			return SendResult{}, fmt.Errorf("client: send: %w", ctx.Err())
		}
		<-r.done
		res, err := r.result, r.err
		r.unref()
		return res, err
	}
}

func (p *Producer) publishRoute(ctx context.Context, topic string) (*topicRoute, error) {
	r := p.in.cachedRoute(topic)
	if r != nil && r.publish != nil {
		return r, nil
	}
	if r != nil && p.in.gate.gap >= 0 {
		// A known topic without a writable queue: its broker has no master now (a
		// failover in progress). Ask the name servers again at most once per gap
		// instead of on every send.
		p.in.refreshOnFailure(ctx, topic, p.cfg.createTopicKey, p.cfg.topicQueueNums)
		if r = p.in.cachedRoute(topic); r != nil && r.publish != nil {
			return r, nil
		}
		return nil, fmt.Errorf("client: topic %q: %w: no writable queue (no master in the route)", topic, ErrNoRoute)
	}
	r, err := p.in.publishRoute(ctx, topic, p.cfg.createTopicKey, p.cfg.topicQueueNums)
	if err != nil {
		return nil, err
	}
	p.topicMu.Lock()
	if !p.topics[topic] {
		p.topics[topic] = true
		p.in.addInterest(topic)
	}
	p.topicMu.Unlock()
	return r, nil
}

// prepare encodes the properties and body once for every attempt.
func (r *sendReq) prepare() error {
	p, m := r.p, r.msg
	var err error
	r.sysFlag = 0
	r.uniq = r.uniq[:0]
	if _, has := m.Properties[message.PropUniqKey]; !has {
		r.uniq = p.in.uniq.AppendNext(r.uniq)
	}
	r.props, err = appendProperties(r.props[:0], m, r.uniq)
	if err != nil {
		return err
	}
	if len(r.uniq) == 0 {
		r.uniq = append(r.uniq, m.Properties[message.PropUniqKey]...)
	}
	if r.txn {
		r.props = message.AppendProperty(r.props, message.PropTranMsg, "true")
		r.props = message.AppendProperty(r.props, message.PropProducerGroup, p.cfg.group)
		r.sysFlag |= message.TxPreparedType
	}
	r.sendB = m.Body
	if p.cfg.compressOver >= 0 && len(m.Body) >= p.cfg.compressOver {
		out, flag, err := p.comp.compress(r.body, m.Body)
		if err != nil {
			return err
		}
		r.body = out
		r.sendB = out
		r.sysFlag |= flag
	}
	if len(r.sendB) > p.cfg.maxMessageSize {
		return fmt.Errorf("%w: body of %d bytes, limit %d", ErrMessageTooLarge, len(r.sendB), p.cfg.maxMessageSize)
	}
	return nil
}

// pickQueue chooses the queue of this attempt.
func (r *sendReq) pickQueue(now int64) error {
	p := r.p
	if r.route.publish == nil || len(r.route.publish.queues) == 0 {
		// The topic's route changed under us: look again.
		nr := p.in.cachedRoute(r.queue.Topic)
		if nr == nil || nr.publish == nil {
			return fmt.Errorf("client: topic %q: %w", r.msg.Topic, ErrNoRoute)
		}
		r.route = nr
	}
	if fresh := p.in.cachedRoute(r.msg.Topic); fresh != nil && fresh.publish != nil {
		r.route = fresh
	}
	pi := r.route.publish
	n := len(pi.queues)
	idx := -1
	if p.rrSel {
		idx = p.roundRobin(pi, r.lastBroker, now)
	} else {
		idx = p.cfg.selector.Select(r.msg, pi.queues)
		if idx < 0 || idx >= n {
			return fmt.Errorf("%w: topic %q", ErrQueueNotFound, r.msg.Topic)
		}
	}
	r.queue = pi.queues[idx]
	r.addr = pi.addrs[idx]
	return nil
}

// roundRobin picks the next queue of the topic, preferring an available broker other
// than the one that just failed, then any broker but that one, then any queue.
func (p *Producer) roundRobin(pi *publishInfo, lastBroker string, now int64) int {
	n := len(pi.queues)
	if n == 1 {
		return 0
	}
	fallback := -1
	for i := 0; i < n; i++ {
		idx := int(pi.next.Add(1)-1) % n
		b := pi.queues[idx].BrokerName
		if lastBroker != "" && b == lastBroker {
			continue
		}
		if !p.cfg.faultTolerance || p.faults.available(b, now) {
			return idx
		}
		if fallback < 0 {
			fallback = idx
		}
	}
	if fallback >= 0 {
		return fallback
	}
	return int(pi.next.Add(1)-1) % n
}

// encode fills the request command for this attempt, made at now (unix nanos).
func (r *sendReq) encode(now int64) {
	p := r.p
	r.topic = append(r.topic[:0], r.msg.Topic...)
	r.bname = append(r.bname[:0], r.queue.BrokerName...)
	h := &r.hdr
	*h = protocol.SendMessageRequest{
		ProducerGroup:         p.groupB,
		Topic:                 r.topic,
		DefaultTopic:          p.createKeyB,
		DefaultTopicQueueNums: int32(p.cfg.topicQueueNums),
		QueueID:               r.queue.QueueID,
		SysFlag:               r.sysFlag,
		BornTimestamp:         now / int64(time.Millisecond),
		Flag:                  r.msg.Flag,
		Properties:            r.props,
		BrokerName:            r.bname,
	}
	if r.batch != nil {
		h.Batch = true
		h.Flag = 0
		h.Properties = nil
		p.in.initRequest(&r.cmd, protocol.ReqSendBatchMessage)
		h.EncodeV2(&r.cmd.Ext)
	} else if isReply(r.msg) {
		// A reply (Reply): SEND_REPLY_MESSAGE_V2, as the Java client sends it.
		p.in.initRequest(&r.cmd, protocol.ReqSendReplyMessageV2)
		h.EncodeV2(&r.cmd.Ext)
	} else {
		p.in.initRequest(&r.cmd, protocol.ReqSendMessage)
		h.Encode(&r.cmd.Ext)
	}
	r.cmd.Body = r.sendB
}

// run makes attempts until one is on the wire (its response will continue the send)
// or the send is over. It runs on the sender's goroutine or a retry goroutine, and
// holds the activity chain's ref. now is the time (unix nanos) if the caller has
// just read it, 0 otherwise: a send reads the clock once for its deadline, its
// first attempt and its born timestamp.
func (r *sendReq) run(now int64) {
	p := r.p
	for {
		if r.state.Load() != reqInflight {
			r.unref()
			return
		}
		if now == 0 {
			now = time.Now().UnixNano()
		}
		if now >= r.deadline {
			r.fail(fmt.Errorf("%w: send to %q after %d attempts", ErrTimeout, r.msg.Topic, r.attempts))
			return
		}
		if r.refresh {
			r.refresh = false
			r.refreshRoute()
			now = time.Now().UnixNano()
			if now >= r.deadline {
				continue
			}
		}
		r.attempts++
		if err := r.pickQueue(now); err != nil {
			r.fail(err)
			return
		}
		r.encode(now)
		r.start = now
		err := r.invoke()
		if err == nil {
			return // the response callback owns the chain now
		}
		now = time.Now().UnixNano() // also the next attempt's
		p.faults.update(r.queue.BrokerName, now, 0, true)
		r.lastBroker = r.queue.BrokerName
		if r.attempts > p.cfg.retries {
			r.fail(fmt.Errorf("client: send to %s (%s): %w", r.addr, r.queue, err))
			return
		}
		if p.in.gate.gap >= 0 {
			// The broker cannot be reached: the next attempt refreshes the route
			// first, on a goroutine of its own (SendAsync's caller does not wait for
			// the name server).
			r.refresh = true
			go r.retry()
			return
		}
	}
}

// refreshTopic refreshes topic's route after a failure nothing waits on (a timed
// out send, a failed oneway send), within the request timeout.
func (p *Producer) refreshTopic(topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.client.requestTimeout)
	defer cancel()
	p.in.refreshOnFailure(ctx, topic, p.cfg.createTopicKey, p.cfg.topicQueueNums)
}

// refreshRoute refreshes the topic's route after a failed attempt, within the
// send's deadline. The next pickQueue reads the route from the table.
func (r *sendReq) refreshRoute() {
	p := r.p
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, r.deadline))
	defer cancel()
	p.in.refreshOnFailure(ctx, r.msg.Topic, p.cfg.createTopicKey, p.cfg.topicQueueNums)
}

func (r *sendReq) invoke() error {
	ctx := context.Background()
	cl, err := r.p.in.pool.Get(ctx, r.addr)
	if err != nil {
		return err
	}
	return cl.InvokeAsync(&r.cmd, 0, r.onResp)
}

// handleResponse is the remoting callback of an attempt. It runs on the connection's
// read goroutine (or the closing goroutine with err set) and must not block.
func (r *sendReq) handleResponse(resp *protocol.Command, err error) {
	p := r.p
	if r.state.Load() != reqInflight {
		r.unref()
		return
	}
	now := time.Now().UnixNano()
	latency := time.Duration(now - r.start)
	if err != nil {
		p.faults.update(r.queue.BrokerName, now, latency, true)
		r.refresh = true
		r.retryOrFail(fmt.Errorf("client: send to %s (%s): %w", r.addr, r.queue, err), false)
		return
	}
	switch resp.Code {
	case protocol.RespSuccess, protocol.RespFlushDiskTimeout, protocol.RespFlushSlaveTimeout, protocol.RespSlaveNotAvailable:
		p.faults.update(r.queue.BrokerName, now, latency, false)
		var h protocol.SendMessageResponse
		if derr := h.Decode(&resp.Ext); derr != nil {
			r.fail(fmt.Errorf("client: send response from %s: %w", r.addr, derr))
			return
		}
		var res SendResult
		switch resp.Code {
		case protocol.RespFlushDiskTimeout:
			res.Status = SendFlushDiskTimeout
		case protocol.RespFlushSlaveTimeout:
			res.Status = SendFlushSlaveTimeout
		case protocol.RespSlaveNotAvailable:
			res.Status = SendSlaveNotAvailable
		default:
			res.Status = SendOK
		}
		res.Queue = MessageQueue{Topic: r.queue.Topic, BrokerName: r.queue.BrokerName, QueueID: h.QueueID}
		res.QueueOffset = h.QueueOffset
		res.Messages = 1
		if r.batch != nil {
			res.Messages = len(r.batch)
		}
		res.msgID.set(r.uniq)
		res.offsetID.set(h.MsgID)
		res.txID.set(h.TransactionID)
		if r.complete() {
			r.result = res
			p.finish(r)
		}
		r.unref()
	case protocol.RespSystemBusy:
		// Also what a slave answers a send (RocketMQ's [REJECTREQUEST]): a master
		// that was demoted is refused by it until the route names the new one.
		p.faults.update(r.queue.BrokerName, now, latency, false)
		r.refresh = true
		r.retryOrFail(brokerError(r.addr, resp), true)
	case protocol.RespTopicNotExist, protocol.RespServiceNotAvailable, protocol.RespSystemError, protocol.RespNoPermission, protocol.RespNotLeaderForQueue:
		// A fenced master in controller mode answers SYSTEM_ERROR, a broker whose
		// store is not writable SERVICE_NOT_AVAILABLE, one made read-only
		// NO_PERMISSION: the route may name another broker by now.
		p.faults.update(r.queue.BrokerName, now, latency, true)
		r.refresh = true
		r.retryOrFail(brokerError(r.addr, resp), false)
	default:
		r.fail(brokerError(r.addr, resp))
	}
}

// retryOrFail continues the chain with another attempt (after a back-off when the
// broker was busy), or fails the send. It never blocks.
func (r *sendReq) retryOrFail(err error, busy bool) {
	p := r.p
	r.lastBroker = r.queue.BrokerName
	if r.attempts > p.cfg.retries {
		r.fail(err)
		return
	}
	if busy {
		d := p.cfg.busyBackoff << r.busy
		if d > p.cfg.maxBusyBackoff || d <= 0 {
			d = p.cfg.maxBusyBackoff
		}
		r.busy++
		if time.Now().UnixNano()+int64(d) >= r.deadline {
			r.fail(err)
			return
		}
		r.lastBroker = "" // a busy broker is not failing: any queue will do
		time.AfterFunc(d, r.retryFn)
		return
	}
	go r.retry()
}

func (r *sendReq) retry() { r.run(0) }

// fail completes the send with err (if nobody completed it yet) and drops the chain's ref.
func (r *sendReq) fail(err error) {
	if r.complete() {
		r.err = err
		r.p.finish(r)
	}
	r.unref()
}

// complete claims the right to deliver the outcome.
func (r *sendReq) complete() bool { return r.state.CompareAndSwap(reqInflight, reqDone) }

// finish delivers the outcome of a completed send: it unlinks it from the in-flight
// list, frees its slot, and calls the callback or wakes the waiter.
func (p *Producer) finish(r *sendReq) {
	p.lmu.Lock()
	p.finishLocked0(r)
	p.lmu.Unlock()
	p.deliver(r)
}

// finishLocked is finish for a waiter that gave up: no delivery.
func (p *Producer) finishLocked(r *sendReq) {
	p.lmu.Lock()
	p.finishLocked0(r)
	p.lmu.Unlock()
	<-p.sem
}

func (p *Producer) finishLocked0(r *sendReq) {
	if r.next != nil {
		r.prev.next = r.next
		r.next.prev = r.prev
		r.prev, r.next = nil, nil
	}
}

func (p *Producer) deliver(r *sendReq) {
	<-p.sem
	if r.sync {
		r.done <- struct{}{}
		return
	}
	if r.err != nil {
		r.result = SendResult{}
	}
	r.cb(r.result, r.err)
}

// track links r into the in-flight list and starts the sweeper if it is not running.
func (p *Producer) track(r *sendReq) {
	p.lmu.Lock()
	r.prev = p.head.prev
	r.next = &p.head
	p.head.prev.next = r
	p.head.prev = r
	if !p.sweeping {
		p.sweeping = true
		go p.sweep()
	}
	p.lmu.Unlock()
}

// sweep fails the sends that passed their deadline. It exits once nothing is in flight.
func (p *Producer) sweep() {
	tick := p.cfg.sendTimeout / 20
	tick = min(max(tick, 5*time.Millisecond), 100*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for range t.C {
		now := time.Now().UnixNano()
		p.lmu.Lock()
		if p.head.next == &p.head {
			p.sweeping = false
			p.lmu.Unlock()
			return
		}
		exp := p.expired[:0]
		for r := p.head.next; r != &p.head; {
			next := r.next
			if r.deadline <= now && r.complete() {
				p.finishLocked0(r)
				exp = append(exp, r)
			}
			r = next
		}
		p.expired = exp
		p.lmu.Unlock()
		prevTopic := ""
		for i, r := range exp {
			if topic := r.msg.Topic; p.in.gate.gap >= 0 && topic != prevTopic {
				prevTopic = topic
				// No answer at all: the master may be paused or cut off while its
				// connection stays open, and a new one elected. Refresh off this
				// goroutine; the gate keeps it to one per topic and gap.
				go p.refreshTopic(topic)
			}
			r.err = fmt.Errorf("%w: no acknowledgement within %v", ErrTimeout, p.cfg.sendTimeout)
			exp[i] = nil
			p.deliver(r)
		}
	}
}

// ---------------------------------------------------------------------------
// Batches.

// SendBatch sends msgs, which must all have the same topic and no delay, as batches
// (SEND_BATCH_MESSAGE with the V2 header), split so that each batch body stays under
// MaxMessageSize. The sub-batches are sent concurrently, each to one queue chosen for
// its first message; it returns one result per sub-batch, in order, and the first
// error. Batch bodies are not compressed. Every message gets a UNIQ_KEY.
func (p *Producer) SendBatch(ctx context.Context, msgs []*Message) ([]SendResult, error) {
	if p.closed.Load() {
		return nil, ErrClosed
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	topic := msgs[0].Topic
	for _, m := range msgs {
		if m == nil || m.Topic != topic || topic == "" {
			return nil, fmt.Errorf("%w: a batch needs one topic for all its messages", ErrBadMessage)
		}
		if m.DelayLevel > 0 || !m.DeliverAt.IsZero() {
			return nil, fmt.Errorf("%w: delayed messages cannot be batched", ErrBadMessage)
		}
		if isRetryTopic(topic) {
			return nil, fmt.Errorf("%w: batches cannot go to a retry topic", ErrBadMessage)
		}
	}
	route, err := p.publishRoute(ctx, topic)
	if err != nil {
		return nil, err
	}
	var reqs []*sendReq
	var ids []string
	var props []byte
	for i := 0; i < len(msgs); {
		r := p.getReq()
		r.msg, r.route, r.sync = msgs[i], route, true
		r.body = r.body[:0]
		r.sysFlag = 0
		ids = ids[:0]
		j := i
		for ; j < len(msgs); j++ {
			m := msgs[j]
			uniq := []byte(nil)
			id := m.Properties[message.PropUniqKey]
			if id == "" {
				uniq = p.in.uniq.AppendNext(nil)
				id = string(uniq)
			}
			props, err = appendProperties(props[:0], m, uniq)
			if err != nil {
				r.refs.Store(1)
				r.unref()
				return nil, err
			}
			size := message.BatchEntrySize(m.Body, props)
			if size > p.cfg.maxMessageSize {
				r.refs.Store(1)
				r.unref()
				return nil, fmt.Errorf("%w: batch message %d is %d bytes, limit %d", ErrMessageTooLarge, j, size, p.cfg.maxMessageSize)
			}
			if j > i && len(r.body)+size > p.cfg.maxMessageSize {
				break
			}
			r.body = message.AppendBatchEntry(r.body, m.Flag, m.Body, props)
			ids = append(ids, id)
		}
		r.batch = msgs[i:j]
		r.sendB = r.body
		r.props = r.props[:0]
		joined := strings.Join(ids, ",")
		r.uniq = append(r.uniq[:0], joined...)
		reqs = append(reqs, r)
		if err := p.start(ctx, r); err != nil {
			// r was released by start; wait for the ones already started.
			reqs = reqs[:len(reqs)-1]
			for _, q := range reqs {
				p.wait(ctx, q)
			}
			return nil, err
		}
		i = j
	}
	results := make([]SendResult, len(reqs))
	var first error
	for k, r := range reqs {
		res, err := p.wait(ctx, r)
		if err != nil && first == nil {
			first = err
		}
		results[k] = res
	}
	return results, first
}

var _ remoting.Handler = (*instance)(nil)
