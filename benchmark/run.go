package benchmark

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"
)

// Run executes the workload cfg describes, printing a line per second and a
// summary to cfg.Out, and returns the result.
func Run(ctx context.Context, cfg Config) (res *Result, retErr error) {
	return runWith(ctx, cfg, openTarget)
}

func runWith(ctx context.Context, cfg Config, open func(context.Context, Config) (target, error)) (res *Result, retErr error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	t, err := open(ctx, c)
	if err != nil {
		return nil, err
	}
	defer t.close()
	var hdrLog *hdrLogWriter
	if c.HdrOut != "" {
		f, err := os.Create(c.HdrOut)
		if err != nil {
			return nil, fmt.Errorf("benchmark: --hdr-out: %w", err)
		}
		defer f.Close()
		hdrLog = newHdrLogWriter(f, time.Now(), fmt.Sprintf("apogee-bench %s: %s; values in nanoseconds, Interval_Max in milliseconds; "+
			"tags: send (intended send to ack), e2e (send to receipt), delay (intended to actual send)", c.Mode, describe(c, c.Rate)))
		defer func() {
			if err := hdrLog.close(); err != nil && retErr == nil {
				res, retErr = nil, fmt.Errorf("benchmark: --hdr-out: %w", err)
			}
		}()
	}
	if c.FindMax {
		return findMax(ctx, c, t, hdrLog)
	}
	res, err = measure(ctx, c, t, c.Rate, hdrLog)
	if err != nil {
		return nil, err
	}
	printSummary(c.Out, res)
	return res, nil
}

func openTarget(ctx context.Context, c Config) (target, error) {
	if c.Mode == ModeStore {
		return openStoreTarget(c)
	}
	if c.Protocol == ProtocolGRPC {
		return openGRPCTarget(ctx, c)
	}
	return openBrokerTarget(ctx, c)
}

// measure is one run at rate (0: closed loop).
func measure(ctx context.Context, c Config, t target, rate float64, hdrLog *hdrLogWriter) (*Result, error) {
	if c.Mode == ModeConsume {
		return measureBacklog(ctx, c, t, hdrLog)
	}
	r := newRun(c, t)
	r.hdrLog = hdrLog
	r.cpu = newCPUMeter(c, t)
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var pwg, cwg sync.WaitGroup
	if c.Mode == ModeE2E || c.Mode == ModeStore {
		if err := r.consume(ctx, &cwg); err != nil {
			return nil, err
		}
	}
	// The lag probe outlives ctx, which the end of the measured part
	// cancels: it still has to see the slave reach the master's last
	// samples.
	var lag *lagProbe
	var lwg sync.WaitGroup
	lctx, lcancel := context.WithCancel(parent)
	defer func() { lcancel(); lwg.Wait() }()
	if c.SlaveAddr != "" {
		var err error
		if lag, err = startLagProbe(lctx, c.SlaveAddr, c.Topic, c.LagInterval, r.measure.Load, &lwg); err != nil {
			return nil, err
		}
	}
	base := countBefore(ctx, t)
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	if err := r.produce(pctx, rate, c.Messages, &pwg); err != nil {
		return nil, err
	}
	res := r.report(ctx, rate, func() {
		pcancel()
		pwg.Wait()
		// Let consumers catch the tail of what was sent (bounded).
		deadline := time.Now().Add(2 * time.Second)
		for (c.Mode == ModeE2E || c.Mode == ModeStore) && c.Consumers > 0 &&
			r.c.received.Load() < r.c.acked.Load() && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		cwg.Wait()
	})
	fillStored(context.WithoutCancel(parent), t, base, res)
	if lag != nil {
		// Let the slave reach what the master held at the end (bounded).
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, pending, _ := lag.result()
			if pending == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		lcancel()
		lwg.Wait()
		p, pending, errs := lag.result()
		res.SlaveLag, res.SlaveLagPending, res.SlaveLagErrors = &p, pending, errs
		res.LagIntervalUs = c.LagInterval.Microseconds()
	}
	return res, nil
}

// measureBacklog produces c.Messages first, then times the consumers
// draining them from the first offset. It measures the drain rate only: the
// messages were all sent before the clock started, so their send time says
// how old they are, not how long the broker took.
func measureBacklog(ctx context.Context, c Config, t target, _ *hdrLogWriter) (*Result, error) {
	fmt.Fprintf(c.Out, "producing a backlog of %d messages of %d bytes...\n", c.Messages, c.Size)
	base := countBefore(ctx, t)
	pr := newRun(c, t)
	var pwg sync.WaitGroup
	start := time.Now()
	if err := pr.produce(ctx, 0, c.Messages, &pwg); err != nil {
		return nil, err
	}
	pwg.Wait()
	if n := pr.c.acked.Load(); n < c.Messages {
		return nil, fmt.Errorf("benchmark: backlog: only %d of %d messages acknowledged (%d errors)", n, c.Messages, pr.c.errors.Load())
	}
	fmt.Fprintf(c.Out, "backlog ready in %.1fs; draining it\n", time.Since(start).Seconds())
	startBacklog(t)
	r := newRun(c, t)
	r.noE2E = true
	r.cpu = newCPUMeter(c, t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cwg sync.WaitGroup
	r.startMeasuring(time.Now(), 0)
	if err := r.consume(ctx, &cwg); err != nil {
		return nil, err
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	limit := max(c.Duration, 60*time.Second)
	var last int64
	for r.c.received.Load() < c.Messages && time.Since(r.mStart) < limit && ctx.Err() == nil {
		select {
		case now := <-tick.C:
			recv := r.c.received.Load()
			if !c.Quiet {
				fmt.Fprintf(c.Out, "%5.0fs  recv %9d msgs/s  %8.1f MiB/s  left %d  errors %d\n", now.Sub(r.mStart).Seconds(), recv-last,
					float64((recv-last)*int64(c.Size))/(1<<20), max(c.Messages-recv, 0), r.c.errors.Load())
			}
			last = recv
		case <-time.After(time.Millisecond):
		}
	}
	secs := time.Since(r.mStart).Seconds()
	r.cpu.end()
	cancel()
	cwg.Wait()
	recv := r.c.received.Load()
	res := &Result{
		Mode: c.Mode, Messages: recv, Errors: r.c.errors.Load() + pr.c.errors.Load(), Seconds: secs,
		MsgsPerSec: float64(recv) / secs, MiBPerSec: float64(recv*int64(c.Size)) / secs / (1 << 20),
		Consumed: recv, ConsumeMsgsPerSec: float64(recv) / secs, Backlog: c.Messages,
		RateReached: true, Roles: roles(c), Config: describe(c, 0),
	}
	res.Limit, res.Sent = c.Messages, min(pr.c.sent.Load(), c.Messages)
	fillStored(context.WithoutCancel(ctx), t, base, res)
	r.cpu.fill(res, recv)
	return res, nil
}

// startBacklog tells consumers to start from the first offset.
func startBacklog(t target) {
	if b, ok := t.(interface{ setFromStart() }); ok {
		b.setFromStart()
	}
}

func (t *storeTarget) setFromStart() { t.fromStart.Store(true) }

// findMax searches for the highest rate whose p99 send latency stays under
// c.MaxP99: a closed-loop run finds the ceiling, then a binary search over
// fixed-rate runs narrows it down.
func findMax(ctx context.Context, c Config, t target, _ *hdrLogWriter) (*Result, error) {
	probe := c
	probe.Quiet = true
	probe.Duration = min(c.Duration, 5*time.Second)
	probe.Warmup = min(c.Warmup, time.Second)
	ceiling, err := measure(ctx, probe, t, 0, nil)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c.Out, "closed loop: %.0f msgs/s, p99 send %s\n", ceiling.MsgsPerSec, usString(ceiling.SendLatency.P99))
	lo, hi := 0.0, ceiling.MsgsPerSec
	best := &Result{}
	bound := c.MaxP99.Microseconds()
	if ceiling.SendLatency.P99 <= bound {
		best = ceiling
		lo = hi
	}
	for i := 0; i < 6 && hi-lo > 0.02*ceiling.MsgsPerSec; i++ {
		rate := (lo + hi) / 2
		if lo == 0 {
			rate = hi / 2
		}
		res, err := measure(ctx, probe, t, rate, nil)
		if err != nil {
			return nil, err
		}
		ok := res.RateReached && res.SendLatency.P99 <= bound
		fmt.Fprintf(c.Out, "rate %.0f: got %.0f msgs/s, p99 send %s -> %v\n", rate, res.MsgsPerSec, usString(res.SendLatency.P99), map[bool]string{true: "under the bound", false: "over"}[ok])
		if ok {
			lo, best = rate, res
		} else {
			hi = rate
		}
	}
	best.MaxRate = lo
	best.Mode = c.Mode
	printSummary(c.Out, best)
	return best, nil
}
