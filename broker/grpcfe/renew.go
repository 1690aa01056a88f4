package grpcfe

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/broker/core"
)

// Renewal: RocketMQ 5's PushConsumers receive with auto_renew and no
// invisible duration; RocketMQ's proxy (ReceiptHandleProcessor,
// DefaultReceiptHandleManager) then hides each message for its
// defaultInvisibleTimeMills (60 s) and keeps renewing the delivery in the
// background while the consumer's handler runs: every
// renewSchedulePeriodMillis (5 s) one scheduler looks at every handle, and
// one within renewAheadTimeMillis (10 s) of becoming visible is made
// invisible again for the next step of its renewal policy (1 min, 3 min,
// 5 min, 10 min, 30 min, then 1 h each time), until renewMaxTimeMillis
// (3 h) after its delivery, when it is made visible after the group's
// retry delay instead (a nack) and dropped. A failed renewal is tried again
// at the next look, at most maxRenewRetryTimes (3) times. The handle is
// dropped when the client acks it or changes its invisible duration (the
// call then uses the delivery's current handle, as the client's is the
// first one), and every handle of a client is released, visible again
// after invisibleTimeMillisWhenClear (1 s), when the client goes: its
// NotifyClientTermination, the core's forgetting it (silent past its
// ClientTimeout), or its connection's loss (its telemetry stream ended and
// none came back within Options.RenewOfflineGrace).
//
// Invariants: one goroutine (run) renews and releases; nothing starts a
// goroutine per handle. A client holds at most Options.MaxRenewPerClient
// handles: a receive that could take it beyond is refused with
// TOO_MANY_REQUESTS before anything is popped (counted: RenewRefused). A
// handle's delivery changes under its own mutex only, so an ack never
// races a renewal of the same handle. Lock order: an entry's mu, then
// renewer.mu, then a client's mu; an entry's mu is never taken under
// renewer.mu (entries are collected under it and worked on after).

// The RocketMQ proxy's defaults (ProxyConfig).
const (
	DefaultAutoRenewInvisible   = 60 * time.Second // defaultInvisibleTimeMills
	DefaultRenewAhead           = 10 * time.Second // renewAheadTimeMillis
	DefaultRenewPeriod          = 5 * time.Second  // renewSchedulePeriodMillis
	DefaultRenewMax             = 3 * time.Hour    // renewMaxTimeMillis
	DefaultRenewClearInvisible  = time.Second      // invisibleTimeMillisWhenClear
	DefaultRenewOfflineGrace    = 30 * time.Second // Apogee's: a telemetry stream's absence that is a connection's loss
	DefaultMaxRenewPerClient    = 16384            // Apogee's bound (RocketMQ's proxy has none)
	maxRenewRetries             = 3                // maxRenewRetryTimes
	renewPolicyLast             = time.Hour
	defaultCustomizedRetryIndex = 2 // RocketMQ's CustomizedRetryPolicy: next[reconsumeTimes+2]
)

// renewPolicy is RocketMQ's RenewStrategyPolicy: the invisible duration of
// a handle's n-th renewal (the last one for every later renewal).
var renewPolicy = [...]time.Duration{time.Minute, 3 * time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute, renewPolicyLast}

func renewStep(n int) time.Duration { return renewPolicy[min(n, len(renewPolicy)-1)] }

// errRenewFull refuses a receive that could take its client beyond
// MaxRenewPerClient renewed handles.
var errRenewFull = errors.New("grpcfe: the client holds too many messages being renewed")

// renewID names a handle: the message and the receipt handle the client
// was given (RocketMQ's ReceiptHandleGroup keys by both).
type renewID struct{ group, msgID, handle string }

// renewEntry is one delivery being renewed.
type renewEntry struct {
	id        renewID
	client    *client
	topic     string
	delivered time.Time // the first delivery (RocketMQ's consumeTimestamp)
	reconsume int32     // the message's reconsume times (attempt - 1)

	mu      sync.Mutex // guards the rest
	rc      receipt    // the delivery as it is now (its pop time changes)
	visible time.Time  // when the delivery becomes visible unless renewed
	renewed int        // renewals done
	retries int        // failed renewals since the last success
	gone    bool       // acked, changed or released: no more renewal
}

// renewer holds the handles being renewed, by client.
type renewer struct {
	s    *Server
	mu   sync.Mutex
	by   map[*client]map[renewID]*renewEntry // guarded by mu
	n    int                                 // handles, guarded by mu
	wake chan struct{}
	done chan struct{} // closed when run returns

	// renewals done, failed, handles released (client gone), refusals
	// (MaxRenewPerClient), handles renewed for RenewMax.
	renewals, failures, released, refused, expired atomic.Int64
}

func newRenewer(s *Server) *renewer {
	return &renewer{s: s, by: make(map[*client]map[renewID]*renewEntry), wake: make(chan struct{}, 1),
		done: make(chan struct{})}
}

// reserve checks that c may take up to batch more handles.
func (r *renewer) reserve(c *client, batch int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.by[c])+batch > r.s.opts.MaxRenewPerClient {
		r.refused.Add(1)
		return errRenewFull
	}
	return nil
}

// add starts renewing a delivery given to c.
func (r *renewer) add(c *client, group, topic, msgID, handle string, rc receipt, invisible time.Duration, reconsume int32) {
	now := time.Now()
	e := &renewEntry{id: renewID{group, msgID, handle}, client: c, topic: topic, delivered: now, reconsume: reconsume,
		rc: rc, visible: now.Add(invisible)}
	r.mu.Lock()
	m := r.by[c]
	if m == nil {
		m = make(map[renewID]*renewEntry)
		r.by[c] = m
	}
	if _, dup := m[e.id]; !dup {
		r.n++
	}
	m[e.id] = e
	r.mu.Unlock()
}

// take stops renewing the handle the client holds and returns the
// delivery as it is now (ok false: it is not being renewed). Called by an
// ack or a change of the invisible duration, which then use the returned
// delivery.
func (r *renewer) take(c *client, group, msgID, handle string) (receipt, bool) {
	if c == nil {
		return receipt{}, false
	}
	id := renewID{group, msgID, handle}
	r.mu.Lock()
	e := r.by[c][id]
	if e != nil {
		r.remove(e)
	}
	r.mu.Unlock()
	if e == nil {
		return receipt{}, false
	}
	e.mu.Lock() // waits for a renewal in flight
	defer e.mu.Unlock()
	e.gone = true
	return e.rc, true
}

// remove drops e from the table; r.mu is held.
func (r *renewer) remove(e *renewEntry) {
	m := r.by[e.client]
	if m[e.id] != e {
		return
	}
	delete(m, e.id)
	r.n--
	if len(m) == 0 {
		delete(r.by, e.client)
	}
}

// release wakes the renewer to release the handles of a client gone (its
// closed flag is set): on the renewer's goroutine.
func (r *renewer) release() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// count returns the handles being renewed.
func (r *renewer) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// run is the renewer's one goroutine, until stop; it then releases every
// handle (RocketMQ's proxy's clearAllHandle at shutdown).
func (r *renewer) run(stop <-chan struct{}) {
	defer close(r.done)
	t := time.NewTicker(r.s.opts.RenewPeriod)
	defer t.Stop()
	for {
		select {
		case <-stop:
			r.releaseAll()
			return
		case <-t.C:
		case <-r.wake:
		}
		r.scan(time.Now())
	}
}

// scan renews the handles due and releases the handles of the clients
// gone.
func (r *renewer) scan(now time.Time) {
	var due, drop []*renewEntry
	r.mu.Lock()
	for c, m := range r.by {
		if r.s.clientGone(c, now) {
			for _, e := range m {
				drop = append(drop, e)
			}
			delete(r.by, c)
			r.n -= len(m)
			continue
		}
		for _, e := range m {
			due = append(due, e)
		}
	}
	r.mu.Unlock()
	for _, e := range drop {
		r.clear(e)
	}
	for _, e := range due {
		r.renew(e, now)
	}
}

// releaseAll releases every handle (Shutdown).
func (r *renewer) releaseAll() {
	r.mu.Lock()
	var drop []*renewEntry
	for c, m := range r.by {
		for _, e := range m {
			drop = append(drop, e)
		}
		delete(r.by, c)
	}
	r.n = 0
	r.mu.Unlock()
	for _, e := range drop {
		r.clear(e)
	}
}

// clear makes a released handle's message visible after
// RenewClearInvisible.
func (r *renewer) clear(e *renewEntry) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone {
		return
	}
	e.gone = true
	r.change(e, r.s.opts.RenewClearInvisible)
	r.released.Add(1)
}

// renew renews e when it is due.
func (r *renewer) renew(e *renewEntry, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gone || e.visible.Sub(now) > r.s.opts.RenewAhead {
		return
	}
	if now.Sub(e.delivered) >= r.s.opts.RenewMax {
		// Renewed long enough: visible again after the group's retry delay.
		r.drop(e)
		r.change(e, r.s.retryDelay(e.id.group, e.reconsume))
		r.expired.Add(1)
		return
	}
	d := renewStep(e.renewed)
	if err := r.change(e, d); err != nil {
		r.failures.Add(1)
		if e.retries++; e.retries >= maxRenewRetries {
			r.drop(e)
			r.s.log.Warn("grpc: a received message is no longer renewed: its renewal failed "+
				"3 times; it is delivered again once its invisible time passes",
				"group", e.id.group, "topic", e.topic, "messageId", e.id.msgID, "err", err)
		}
		return
	}
	e.retries = 0
	e.renewed++
	e.visible = now.Add(d)
	r.renewals.Add(1)
}

// drop stops renewing e (its mu is held).
func (r *renewer) drop(e *renewEntry) {
	e.gone = true
	r.mu.Lock()
	r.remove(e)
	r.mu.Unlock()
}

// change makes e's delivery invisible for d from now (e.mu is held).
func (r *renewer) change(e *renewEntry, d time.Duration) error {
	pt, err := r.s.core.ChangeInvisible([]byte(e.id.group), []byte(e.topic), e.rc.queueID, e.rc.offset,
		core.Receipt{QueueID: e.rc.queueID, PopTime: e.rc.popTime}, max(d.Milliseconds(), 1))
	if err == nil {
		e.rc.popTime = pt
	}
	return err
}

// clientGone reports whether c's handles are to be released: it ended
// (NotifyClientTermination, the core forgot it) or its telemetry stream
// ended more than RenewOfflineGrace ago without another.
func (s *Server) clientGone(c *client, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed || (c.out == nil && !c.streamEnded.IsZero() && now.Sub(c.streamEnded) >= s.opts.RenewOfflineGrace)
}

// retryDelay is the group's retry delay for a message consumed reconsume
// times before (RocketMQ's STOP_RENEW: the group's retry policy).
func (s *Server) retryDelay(group string, reconsume int32) time.Duration {
	cfg, err := s.core.SubscriptionGroup([]byte(group))
	if err == nil {
		if d, ok := core.RetryDelay(cfg, reconsume); ok {
			return d
		}
	}
	return retryLevels[min(int(max(reconsume, 0))+defaultCustomizedRetryIndex, len(retryLevels)-1)]
}

// retryLevels are RocketMQ's default CustomizedRetryPolicy (its delay
// levels).
var retryLevels = [...]time.Duration{time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute, 5 * time.Minute, 6 * time.Minute,
	7 * time.Minute, 8 * time.Minute, 9 * time.Minute, 10 * time.Minute, 20 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour}

// setRenewDefaults fills the renewal options left zero.
func (o *Options) setRenewDefaults() {
	for _, f := range []struct {
		v *time.Duration
		d time.Duration
	}{
		{&o.AutoRenewInvisible, DefaultAutoRenewInvisible}, {&o.RenewAhead, DefaultRenewAhead},
		{&o.RenewPeriod, DefaultRenewPeriod}, {&o.RenewMax, DefaultRenewMax},
		{&o.RenewClearInvisible, DefaultRenewClearInvisible}, {&o.RenewOfflineGrace, DefaultRenewOfflineGrace},
	} {
		if *f.v <= 0 {
			*f.v = f.d
		}
	}
	if o.MaxRenewPerClient <= 0 {
		o.MaxRenewPerClient = DefaultMaxRenewPerClient
	}
}
