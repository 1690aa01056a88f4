package idempotent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/client"
)

// Defaults of the Guard's options.
const (
	DefaultLease   = 30 * time.Second
	DefaultDoneTTL = 24 * time.Hour
)

// Guard wraps listeners so that each message key is consumed at most once
// effectively: see the package documentation. A Guard is safe for concurrent use
// and may wrap any number of listeners; the listeners it wraps share its local
// view of the keys in flight, so wrap the listeners of one consumer group with one
// Guard (and one Store).
type Guard struct {
	cfg   config
	store Store

	mu       sync.Mutex
	inflight map[string]*call // keys held by this Guard's running calls

	calls sync.Pool

	ran, unguarded, duplicates, busy, takenOver, failed, storeErrors, leaseLost, doneErrors atomic.Int64
}

// Stats are a Guard's counters since it was made, in messages (deliveries).
type Stats struct {
	// Ran: deliveries handed to the listener while holding their key.
	Ran int64
	// Unguarded: deliveries handed to the listener without a key (KeyFunc gave "").
	Unguarded int64
	// Duplicates: deliveries acknowledged without calling the listener, because
	// their key was done (or completed by an earlier message of the same batch).
	Duplicates int64
	// Busy: deliveries sent back for a later retry because another owner (another
	// process, or another call of this Guard) was consuming their key.
	Busy int64
	// TakenOver: keys acquired from an owner whose lease had expired (StateExpired).
	TakenOver int64
	// Failed: keys released because the listener failed or panicked.
	Failed int64
	// StoreErrors: store calls that failed. A failed TryBegin retries the message
	// later; a failed Release leaves the key to expire with its lease.
	StoreErrors int64
	// DoneErrors: keys whose Done failed or found another owner after the listener
	// succeeded. The message still counts as consumed, but a later duplicate of it
	// may run again.
	DoneErrors int64
	// LeaseLost: renewals that found the key no longer held (the listener's context
	// was cancelled with ErrLeaseLost).
	LeaseLost int64
}

// config is the Guard's configuration, set by Options and checked once by New.
type config struct {
	key          KeyFunc
	owner        string
	lease        time.Duration
	renewEvery   time.Duration
	doneTTL      time.Duration
	storeTimeout time.Duration
	busyDelay    int
	noCancel     bool
	log          *slog.Logger
}

// Option configures a Guard.
type Option func(*config)

// KeyBy sets how a message's key is chosen. Default ByMsgID().
func KeyBy(fn KeyFunc) Option { return func(c *config) { c.key = fn } }

// Owner sets the name this Guard holds keys under in the Store. It must be
// unique among the processes sharing the store, and must change when the process
// restarts (a new process must not inherit its predecessor's leases). Default
// "<hostname>/<pid>/<16 random hex digits>".
func Owner(name string) Option { return func(c *config) { c.owner = name } }

// Lease sets how long a key stays held after its last renewal: how long a key
// whose consumer died stays blocked before another consumer takes it over. The
// Guard renews it while the listener runs. Default 30 s.
func Lease(d time.Duration) Option { return func(c *config) { c.lease = d } }

// RenewEvery sets how often held keys are renewed while the listener runs. It
// must be shorter than the lease, with room for a slow store call. Default a
// third of the lease.
func RenewEvery(d time.Duration) Option { return func(c *config) { c.renewEvery = d } }

// DoneTTL sets how long a done key is remembered: duplicates delivered within it
// are skipped, later ones run again. It should outlast every way a duplicate can
// arrive (producer retries: seconds; redelivery through the retry topic with the
// default 16 attempts: about 5 hours). Default 24 h. A BrokerStore cannot keep
// records longer than the broker's retention (72 h by default).
func DoneTTL(d time.Duration) Option { return func(c *config) { c.doneTTL = d } }

// StoreTimeout bounds every store call with a context deadline. Default none: the
// Guard passes the listener's context to TryBegin and a context without
// cancellation to Renew, Done and Release (they must complete even after the
// listener's context ended), and relies on the store's own request timeouts
// (BrokerStore's, go-redis's), which saves a timer per call.
func StoreTimeout(d time.Duration) Option { return func(c *config) { c.storeTimeout = d } }

// BusyDelayLevel sets the delay level (1 = 1 s, 2 = 5 s, 3 = 10 s, ...) of the
// redelivery of a concurrent batch retried only because keys were busy or the
// store failed, not because the listener failed: a busy key is usually settled
// within a lease. Default 0: the broker's choice, 3 + the message's reconsume
// times (10 s, 30 s, 1 min, ...).
func BusyDelayLevel(level int) Option { return func(c *config) { c.busyDelay = level } }

// CancelOnLeaseLost sets whether the listener's context is cancelled, with cause
// ErrLeaseLost, when a renewal finds that the key is no longer held. Default on;
// off saves deriving a context per listener call (three small allocations) for
// listeners that never look at their context.
func CancelOnLeaseLost(on bool) Option { return func(c *config) { c.noCancel = !on } }

// Logger sets the logger for store failures and lost leases. Default
// slog.Default().
func Logger(l *slog.Logger) Option { return func(c *config) { c.log = l } }

// New returns a Guard over store. It reports every invalid option at once,
// wrapped in ErrConfig.
func New(store Store, opts ...Option) (*Guard, error) {
	cfg := config{lease: DefaultLease, doneTTL: DefaultDoneTTL}
	for _, o := range opts {
		o(&cfg)
	}
	var errs []string
	if store == nil {
		errs = append(errs, "store is nil")
	}
	if cfg.key == nil {
		cfg.key = ByMsgID()
	}
	if cfg.owner == "" {
		cfg.owner = defaultOwner()
	}
	if cfg.lease <= 0 {
		errs = append(errs, "Lease must be positive")
	}
	if cfg.renewEvery == 0 {
		cfg.renewEvery = cfg.lease / 3
	}
	if cfg.renewEvery <= 0 || cfg.renewEvery >= cfg.lease {
		errs = append(errs, "RenewEvery must be positive and shorter than the lease")
	}
	if cfg.doneTTL <= 0 {
		errs = append(errs, "DoneTTL must be positive")
	}
	if cfg.busyDelay < 0 || cfg.busyDelay > 18 {
		errs = append(errs, "BusyDelayLevel must be 0..18")
	}
	if cfg.storeTimeout < 0 {
		errs = append(errs, "StoreTimeout must not be negative")
	}
	if cfg.log == nil {
		cfg.log = slog.Default()
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrConfig, strings.Join(errs, "; "))
	}
	g := &Guard{cfg: cfg, store: store, inflight: make(map[string]*call)}
	g.calls.New = func() any {
		c := &call{g: g}
		c.timer = time.AfterFunc(time.Hour, c.renewTick)
		c.timer.Stop()
		return c
	}
	return g, nil
}

func defaultOwner() string {
	host, _ := os.Hostname()
	var b [8]byte
	_, _ = rand.Read(b[:])
	return host + "/" + strconv.Itoa(os.Getpid()) + "/" + hex.EncodeToString(b[:])
}

// OwnerName returns the name this Guard holds keys under.
func (g *Guard) OwnerName() string { return g.cfg.owner }

// Stats returns the Guard's counters.
func (g *Guard) Stats() Stats {
	return Stats{
		Ran: g.ran.Load(), Unguarded: g.unguarded.Load(), Duplicates: g.duplicates.Load(),
		Busy: g.busy.Load(), TakenOver: g.takenOver.Load(), Failed: g.failed.Load(),
		StoreErrors: g.storeErrors.Load(), DoneErrors: g.doneErrors.Load(), LeaseLost: g.leaseLost.Load(),
	}
}

// Concurrent wraps a concurrent listener. Messages that must be retried (key
// busy, store error, listener failure) are reported with ConsumeRetryLater and,
// when the batch's ConsumeContext is available, an AckIndex that acknowledges the
// messages before the first of them.
func (g *Guard) Concurrent(l client.ConcurrentListener) client.ConcurrentListener {
	return func(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
		return g.consume(ctx, msgs, l, false)
	}
}

// Orderly wraps an orderly listener. A batch with any message to retry is
// reported with ConsumeSuspend: the queue stops for its suspend time and the
// batch is consumed again, its done keys skipped then.
func (g *Guard) Orderly(l client.OrderlyListener) client.OrderlyListener {
	return func(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
		return g.consume(ctx, msgs, l, true)
	}
}

// outcome is what became of one message of a batch.
type outcome uint8

const (
	outRun       outcome = iota // key held; handed to the listener
	outUnguarded                // no key; handed to the listener
	outSameKey                  // same key as an earlier message of the batch: follows it
	outDuplicate                // key done: skipped
	outRetry                    // key busy or store error: retry later
)

// call is the state of one listener call, pooled. Its renewal timer is created
// once; ticks and stops are balanced by wg so that a pooled call never has a
// tick of its previous use pending.
type call struct {
	g      *Guard
	keys   []string
	out    []outcome
	ok     []bool // per message: consumed (true) or to retry
	run    []*client.MessageExt
	runIdx []int
	held   []string // keys acquired by this call, renewed while the listener runs

	timer   *time.Timer
	renewMu sync.Mutex // held by a renewal tick while it runs
	stopped atomic.Bool
	wg      sync.WaitGroup // one count per armed timer
	cancel  context.CancelCauseFunc
}

func (g *Guard) getCall() *call { return g.calls.Get().(*call) }

func (g *Guard) putCall(c *call) {
	clear(c.keys)
	clear(c.run)
	clear(c.held)
	c.keys, c.out, c.ok, c.run, c.runIdx, c.held = c.keys[:0], c.out[:0], c.ok[:0], c.run[:0], c.runIdx[:0], c.held[:0]
	c.cancel = nil
	g.calls.Put(c)
}

// storeCtx bounds a store call when StoreTimeout is set.
func (g *Guard) storeCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if g.cfg.storeTimeout > 0 {
		return context.WithTimeout(ctx, g.cfg.storeTimeout)
	}
	return ctx, func() {}
}

func (g *Guard) consume(ctx context.Context, msgs []*client.MessageExt, next func(context.Context, []*client.MessageExt) client.ConsumeResult, orderly bool) client.ConsumeResult {
	c := g.getCall()
	defer g.putCall(c)
	n := len(msgs)
	for range n {
		c.keys = append(c.keys, "")
		c.out = append(c.out, outRetry)
		c.ok = append(c.ok, false)
	}

	// Acquire the keys.
	for i, m := range msgs {
		k := g.cfg.key(m)
		c.keys[i] = k
		if k == "" {
			c.out[i] = outUnguarded
			continue
		}
		g.mu.Lock()
		holder, local := g.inflight[k]
		if !local {
			g.inflight[k] = c
		}
		g.mu.Unlock()
		if local {
			if holder == c {
				c.out[i] = outSameKey
			} else {
				c.out[i] = outRetry
				g.busy.Add(1)
			}
			continue
		}
		sctx, cancel := g.storeCtx(ctx)
		st, err := g.store.TryBegin(sctx, k, g.cfg.owner, g.cfg.lease)
		cancel()
		if err != nil || !st.Acquired() {
			g.mu.Lock()
			delete(g.inflight, k)
			g.mu.Unlock()
			switch {
			case err != nil:
				g.storeErrors.Add(1)
				g.cfg.log.Warn("idempotent: TryBegin failed; the message will be retried", "key", k, "err", err)
			case st == StateDone:
				c.out[i] = outDuplicate
				g.duplicates.Add(1)
			default:
				g.busy.Add(1)
			}
			continue
		}
		if st == StateExpired {
			g.takenOver.Add(1)
		}
		c.out[i] = outRun
		c.held = append(c.held, k)
	}

	// Run the listener on the messages it must see.
	all := true
	for i := range n {
		switch c.out[i] {
		case outRun, outUnguarded:
			c.run = append(c.run, msgs[i])
			c.runIdx = append(c.runIdx, i)
		default:
			all = false
		}
	}
	if len(c.run) > 0 {
		run := c.run
		if all {
			run = msgs
		}
		g.runListener(ctx, c, run, next, orderly)
	}

	// Resolve messages that share a key with an earlier one of the batch.
	for i := range n {
		if c.out[i] != outSameKey {
			continue
		}
		for j := range i {
			if c.out[j] == outRun && c.keys[j] == c.keys[i] {
				c.ok[i] = c.ok[j]
				break
			}
		}
		if c.ok[i] {
			g.duplicates.Add(1)
		}
	}

	// The verdict: everything up to the first message to retry is consumed.
	first := -1
	for i := range n {
		if c.out[i] == outDuplicate {
			c.ok[i] = true
		}
		if !c.ok[i] {
			first = i
			break
		}
	}
	if first < 0 {
		return client.ConsumeSuccess
	}
	if orderly {
		return client.ConsumeSuspend
	}
	if cc := client.ConsumeContextFrom(ctx); cc != nil {
		cc.AckIndex = first - 1
		listenerFailed := false
		for _, i := range c.runIdx {
			listenerFailed = listenerFailed || !c.ok[i]
		}
		if !listenerFailed && g.cfg.busyDelay > 0 {
			cc.DelayLevel = g.cfg.busyDelay
		}
	}
	return client.ConsumeRetryLater
}

// runListener calls the listener on run (the messages at c.runIdx), renewing the
// held keys meanwhile, then records each one's result in c.ok and completes or
// releases its key. A panic of the listener releases the keys and is re-raised.
func (g *Guard) runListener(ctx context.Context, c *call, run []*client.MessageExt, next func(context.Context, []*client.MessageExt) client.ConsumeResult, orderly bool) {
	lctx := ctx
	renewing := len(c.held) > 0
	if renewing {
		if !g.cfg.noCancel {
			lctx, c.cancel = context.WithCancelCause(ctx)
		}
		c.stopped.Store(false)
		c.wg.Add(1)
		c.timer.Reset(g.cfg.renewEvery)
	}
	cc := client.ConsumeContextFrom(ctx)
	if cc != nil {
		cc.AckIndex = -1
	}
	panicked := true
	var res client.ConsumeResult
	defer func() {
		if renewing {
			c.stopRenewal()
			if c.cancel != nil {
				c.cancel(context.Canceled)
			}
		}
		acked := -1 // index in run of the last message the listener consumed
		switch {
		case panicked:
		case res == client.ConsumeSuccess:
			acked = len(run) - 1
		case !orderly && cc != nil && cc.AckIndex >= 0:
			acked = min(cc.AckIndex, len(run)-1)
		}
		g.settle(ctx, c, acked)
		if panicked {
			if v := recover(); v != nil {
				panic(v)
			}
		}
	}()
	res = next(lctx, run)
	panicked = false
}

// settle records the listener's result for each message it saw (those up to
// run index acked consumed), and moves their keys to done or releases them.
func (g *Guard) settle(ctx context.Context, c *call, acked int) {
	var bg context.Context
	for r, i := range c.runIdx {
		ok := r <= acked
		c.ok[i] = ok
		if c.out[i] == outUnguarded {
			g.unguarded.Add(1)
			continue
		}
		g.ran.Add(1)
		if bg == nil {
			bg = context.WithoutCancel(ctx)
		}
		k := c.keys[i]
		sctx, cancel := g.storeCtx(bg)
		if ok {
			if err := g.store.Done(sctx, k, g.cfg.owner, g.cfg.doneTTL); err != nil {
				g.doneErrors.Add(1)
				if errors.Is(err, ErrNotOwner) {
					g.cfg.log.Warn("idempotent: the key was taken over while the listener ran; it may have been consumed twice", "key", k, "err", err)
				} else {
					g.storeErrors.Add(1)
					g.cfg.log.Warn("idempotent: Done failed; a later duplicate may run again", "key", k, "err", err)
				}
			}
		} else {
			g.failed.Add(1)
			if err := g.store.Release(sctx, k, g.cfg.owner); err != nil && !errors.Is(err, ErrNotOwner) {
				g.storeErrors.Add(1)
				g.cfg.log.Warn("idempotent: Release failed; the key stays blocked until its lease expires", "key", k, "err", err)
			}
		}
		cancel()
		g.mu.Lock()
		if g.inflight[k] == c {
			delete(g.inflight, k)
		}
		g.mu.Unlock()
	}
}

// renewTick renews every key the call holds, and arms the next tick unless the
// call stopped meanwhile.
func (c *call) renewTick() {
	c.renewMu.Lock()
	defer c.renewMu.Unlock()
	defer c.wg.Done()
	if c.stopped.Load() {
		return
	}
	g := c.g
	for i := 0; i < len(c.held); {
		k := c.held[i]
		ctx, cancel := g.storeCtx(context.Background())
		err := g.store.Renew(ctx, k, g.cfg.owner, g.cfg.lease)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, ErrNotOwner):
			g.leaseLost.Add(1)
			g.cfg.log.Warn("idempotent: lease lost while the listener runs; cancelling its context", "key", k, "err", err)
			if c.cancel != nil {
				c.cancel(ErrLeaseLost)
			}
			// Renewing a lost key is pointless: drop it from the renewals.
			last := len(c.held) - 1
			c.held[i], c.held[last] = c.held[last], ""
			c.held = c.held[:last]
			continue
		default:
			g.storeErrors.Add(1)
			g.cfg.log.Warn("idempotent: renewal failed; trying again at the next tick", "key", k, "err", err)
		}
		i++
	}
	if !c.stopped.Load() && len(c.held) > 0 {
		c.wg.Add(1)
		c.timer.Reset(g.cfg.renewEvery)
	}
}

// stopRenewal stops the timer and waits until no tick of this call runs or is
// pending.
func (c *call) stopRenewal() {
	c.stopped.Store(true)
	c.renewMu.Lock()
	if c.timer.Stop() {
		c.wg.Done() // the armed tick will not run
	}
	c.renewMu.Unlock()
	c.wg.Wait()
}
