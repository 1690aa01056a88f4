package benchmark

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// sender sends one request carrying bodies and calls done exactly once with
// the outcome, possibly before send returns. Each in-flight slot of a producer
// has one request outstanding at a time, so implementations may keep
// per-request state in the slot.
type sender interface {
	send(ctx context.Context, slot int, bodies [][]byte, done func(error))
}

// receiver delivers received bodies to onMsg until ctx ends.
type receiver interface {
	receive(ctx context.Context, id int, onMsg func(body []byte)) error
}

// target is what a mode drives: a store or a broker through clients.
type target interface {
	producer(id int) (sender, error)
	consumer(id int) (receiver, error)
	close() error
}

// run is one measured run against t.
type run struct {
	cfg     Config
	t       target
	c       counters
	send    *metric
	e2e     *metric
	delay   *metric
	hdrLog  *hdrLogWriter
	measure atomic.Bool // past the warm-up
	mStart  time.Time
	// noE2E: consumers count what they receive but record no end-to-end
	// latency (consume mode: the messages were sent before the clock started).
	noE2E bool
	// cpu measures CPU per message over the measured part (nil: not at all).
	cpu *cpuMeter
	// With Config.Messages (produce, e2e and store modes) the producers send
	// exactly Messages in all, warm-up included (produce's limit). limitDone
	// is closed once every one of them was answered (acknowledged or
	// failed), which ends the measured part at once rather than at the next
	// once-a-second tick. warmDone is closed once a tenth of them were
	// acknowledged, which ends the warm-up early when it would otherwise
	// take more of them than that. finished counts the answered messages.
	finished            atomic.Int64
	limitDone, warmDone chan struct{}
	limitOnce, warmOnce sync.Once
	// warmAcked is what was acknowledged during the warm-up (set when the
	// measured part starts).
	warmAcked int64
}

func newRun(cfg Config, t target) *run {
	return &run{cfg: cfg, t: t, send: newMetric("send"), e2e: newMetric("e2e"), delay: newMetric("delay"),
		limitDone: make(chan struct{}), warmDone: make(chan struct{})}
}

// produce runs cfg.Producers producers, each with cfg.Inflight requests in
// flight at most, until ctx ends or limit messages were sent (0: no limit).
// rate 0 is closed loop; otherwise each producer follows its share of a
// fixed schedule and latency counts from the scheduled (intended) time.
func (r *run) produce(ctx context.Context, rate float64, limit int64, wg *sync.WaitGroup) error {
	cfg := r.cfg
	perProducer := rate / float64(cfg.Producers)
	start := time.Now()
	for p := 0; p < cfg.Producers; p++ {
		s, err := r.t.producer(p)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.producer(ctx, s, perProducer, start, limit)
		}()
	}
	return nil
}

// producer is one producer's loop: take a free slot, wait for the message's
// scheduled time (fixed rate), stamp the bodies, send; the completion records
// the latency and frees the slot.
func (r *run) producer(ctx context.Context, s sender, rate float64, start time.Time, limit int64) {
	cfg := r.cfg
	sendRec, delayRec := r.send.recorder(), r.delay.recorder()
	free := make(chan int, cfg.Inflight)
	bodies := make([][][]byte, cfg.Inflight)
	intended := make([]time.Time, cfg.Inflight)
	dones := make([]func(error), cfg.Inflight)
	for slot := range bodies {
		bodies[slot] = make([][]byte, cfg.Batch)
		for i := range bodies[slot] {
			bodies[slot][i] = make([]byte, cfg.Size)
			fillBody(bodies[slot][i])
		}
		dones[slot] = func(err error) {
			if err != nil {
				if ctx.Err() == nil {
					r.c.errors.Add(1)
				}
			} else {
				// time.Since reads only the monotonic clock: half of time.Now.
				latency := time.Since(intended[slot])
				acked := r.c.acked.Add(int64(cfg.Batch))
				if cfg.Messages > 0 && acked >= cfg.Messages/10 {
					r.warmOnce.Do(func() { close(r.warmDone) })
				}
				r.c.bytes.Add(int64(cfg.Batch * cfg.Size))
				sendRec.record(latency.Microseconds())
			}
			if cfg.Messages > 0 && r.finished.Add(int64(cfg.Batch)) >= cfg.Messages {
				r.limitOnce.Do(func() { close(r.limitDone) })
			}
			free <- slot
		}
		free <- slot
	}
	defer func() {
		// Wait for the requests still in flight before the run tears down.
		for i := 0; i < cfg.Inflight; i++ {
			<-free
		}
	}()
	var n int64 // this producer's messages so far, for its schedule
	var pace *time.Timer
	for ctx.Err() == nil {
		var slot int
		select {
		case slot = <-free:
		case <-ctx.Done():
			return
		}
		if limit > 0 { // counted only when limited: one contended atomic less per message
			if sent := r.c.sent.Add(int64(cfg.Batch)); sent > limit {
				free <- slot
				return
			}
		}
		now := time.Now()
		when := now
		if rate > 0 {
			when = start.Add(time.Duration(float64(n) / rate * float64(time.Second)))
			n += int64(cfg.Batch)
			if d := when.Sub(now); d > 50*time.Microsecond {
				// One timer per producer, reset for each wait: a new one per
				// message cost a timer and a channel allocated per message.
				if pace == nil {
					pace = time.NewTimer(d)
				} else {
					pace.Reset(d)
				}
				select {
				case <-pace.C:
				case <-ctx.Done():
					pace.Stop()
					free <- slot
					return
				}
				now = time.Now()
			}
			if now.Before(when) {
				// Sent up to 50 µs early (not worth a timer): count from the
				// actual send, so that the message never looks faster than it was.
				when = now
			}
			delayRec.record(now.Sub(when).Microseconds())
		}
		intended[slot] = when
		for _, b := range bodies[slot] {
			binary.BigEndian.PutUint64(b, uint64(when.UnixNano()))
		}
		s.send(ctx, slot, bodies[slot], dones[slot])
	}
}

// fillBody gives the body incompressible-ish content after the timestamp.
func fillBody(b []byte) {
	x := uint32(2463534242)
	for i := 8; i < len(b); i++ {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
}

// consume runs cfg.Consumers receivers until ctx ends.
func (r *run) consume(ctx context.Context, wg *sync.WaitGroup) error {
	for i := 0; i < r.cfg.Consumers; i++ {
		rc, err := r.t.consumer(i)
		if err != nil {
			return err
		}
		rec := r.e2e.recorder()
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			err := rc.receive(ctx, i, func(body []byte) {
				if len(body) < 8 {
					return
				}
				sent := int64(binary.BigEndian.Uint64(body))
				if sent == 0 {
					return // a set-up message, not part of the workload
				}
				r.c.received.Add(1)
				if !r.noE2E {
					rec.record((time.Now().UnixNano() - sent) / 1000)
				}
			})
			if err != nil && ctx.Err() == nil {
				r.c.errors.Add(1)
				fmt.Fprintf(os.Stderr, "consumer %d: %v\n", i, err)
			}
		}(i)
	}
	return nil
}

// report ticks every second until the measured part is over (duration or
// message limit), printing a line per second, and returns the result.
func (r *run) report(ctx context.Context, rate float64, stop func()) *Result {
	cfg := r.cfg
	t := time.NewTicker(time.Second)
	defer t.Stop()
	begin := time.Now()
	warmEnd := begin.Add(cfg.Warmup)
	if cfg.Warmup == 0 {
		r.startMeasuring(begin, r.c.acked.Load())
	}
	consumers := cfg.Mode == ModeE2E || cfg.Mode == ModeStore
	var lastAcked, lastBytes, lastRecv, lastErr int64
	var mAcked, mBytes, mRecv, mErr int64 // counters at the start of measurement
	var backlogSum, backlogEnd, ticks int64
	last := begin
	limitDone := r.limitDone
	var warmDone <-chan struct{}
	if cfg.Messages > 0 && cfg.Warmup > 0 {
		warmDone = r.warmDone
	}
	for {
		var now time.Time
		select {
		case <-ctx.Done():
		case now = <-t.C:
		case <-limitDone:
			limitDone = nil // once: the stop condition below holds from now on
			now = time.Now()
		case <-warmDone:
			warmDone = nil
			now = time.Now()
			if r.measure.Load() {
				continue // the warm-up had ended by its duration
			}
		}
		if !now.IsZero() {
			measured := r.measure.Load()
			sendH, e2eH, delayH := r.send.tick(measured), r.e2e.tick(measured), r.delay.tick(measured)
			acked, bytes, recv, errs := r.c.acked.Load(), r.c.bytes.Load(), r.c.received.Load(), r.c.errors.Load()
			backlog := int64(-1)
			if consumers {
				backlog = max(acked-recv, 0)
			}
			if !cfg.Quiet {
				printLine(cfg.Out, now.Sub(begin), !measured, acked-lastAcked, bytes-lastBytes, recv-lastRecv, errs-lastErr, backlog, sendH, e2eH)
			}
			if measured {
				if r.hdrLog != nil {
					r.hdrLog.write("send", last, now, sendH)
					r.hdrLog.write("e2e", last, now, e2eH)
					r.hdrLog.write("delay", last, now, delayH)
				}
				backlogSum += backlog
				backlogEnd = backlog
				ticks++
			}
			last = now
			lastAcked, lastBytes, lastRecv, lastErr = acked, bytes, recv, errs
			if !measured {
				// Ticks fire a whisker early or late: within 10 ms counts.
				if !now.Add(10*time.Millisecond).Before(warmEnd) || (cfg.Messages > 0 && acked >= cfg.Messages/10) {
					r.startMeasuring(now, acked)
					mAcked, mBytes, mRecv, mErr = acked, bytes, recv, errs
				}
				continue
			}
			if now.Sub(r.mStart) < cfg.Duration-10*time.Millisecond && (cfg.Messages == 0 || r.finished.Load() < cfg.Messages) {
				continue
			}
		}
		break
	}
	// The measured window ends at the last tick; what is acknowledged while
	// the producers stop does not count.
	end := time.Now()
	r.cpu.end()
	if !r.measure.Load() {
		r.startMeasuring(begin, r.c.acked.Load())
	}
	secs := end.Sub(r.mStart).Seconds()
	acked, bytes, recv, errs := r.c.acked.Load()-mAcked, r.c.bytes.Load()-mBytes, r.c.received.Load()-mRecv, r.c.errors.Load()-mErr
	stop()
	res := &Result{
		Mode: cfg.Mode, Messages: acked, Errors: errs, Seconds: secs,
		MsgsPerSec: float64(acked) / secs, MiBPerSec: float64(bytes) / secs / (1 << 20),
		Consumed: recv, ConsumeMsgsPerSec: float64(recv) / secs,
		SendLatency: percentiles(r.send.total), E2ELatency: percentiles(r.e2e.total), SendDelay: percentiles(r.delay.total),
		TargetRate: rate, RateReached: rate == 0 || float64(acked)/secs >= 0.95*rate,
		ClosedLoop: rate == 0, Roles: roles(cfg),
		Config: describe(cfg, rate),
	}
	if cfg.Messages > 0 {
		res.Limit = cfg.Messages
		res.Sent = min(r.c.sent.Load(), cfg.Messages)
		res.WarmupMessages = r.warmAcked
	}
	r.cpu.fill(res, acked)
	if consumers && ticks > 0 {
		res.Backlog = backlogEnd
		res.BacklogMean = backlogSum / ticks
		res.ConsumersBehind = consumersBehind(res)
	}
	return res
}

// consumersBehind says whether the consumers of a run fell behind its
// producers: they received less than 95% of what was acknowledged, or the
// messages waiting for them at the once-a-second samples would, at the rate
// they consumed, take 50 ms or more to drain (Little's law: that is the
// average time a message waited in the queue). The end-to-end figures of
// such a run measure that queue more than the broker.
func consumersBehind(r *Result) bool {
	if r.Consumed < r.Messages*95/100 {
		return true
	}
	return r.ConsumeMsgsPerSec > 0 && float64(r.BacklogMean)/r.ConsumeMsgsPerSec >= 0.050
}

// startMeasuring starts the measured part at t; acked is what the warm-up
// had acknowledged, which the report counts from.
func (r *run) startMeasuring(t time.Time, acked int64) {
	r.mStart = t
	r.warmAcked = acked
	r.cpu.begin()
	r.measure.Store(true)
}
