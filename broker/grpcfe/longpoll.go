package grpcfe

import (
	"context"
	"errors"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/longpoll"
	"google.golang.org/grpc/metadata"
)

// Long polling: a receive or pull that found nothing is parked in the
// server's long-poll holder (package broker/longpoll), fed by the core's
// arrivals (OnArrival) and POP revives (OnRevive). A receive waits on its
// topic and group: an arrival in any of the topic's queues, a revive of the
// group's messages, or the time the next of them becomes visible again
// (PopResult.NextVisible) wakes it; a pull waits past its offset in its
// queue. The holder's goroutine re-runs it (core.PopAgain, PullAgain) and,
// once it found messages or its time is up, closes its done channel; the
// call's own goroutine, which waited on that channel (or on its context),
// then only shapes the answer. No periodic look.

// heldCall is what the holder parks for a call: its result, which the
// holder's goroutine re-runs, and done, closed once the call may answer.
// Between Park and done (or a successful Cancel) only the holder touches
// the result.
type heldCall struct {
	done chan struct{}
	pop  *core.PopResult  // a receive, or nil
	pull *core.PullResult // a pull, or nil
	lite *liteCall        // a lite receive, or nil (lite.go)
	err  error            // a failed re-run
}

// errHeldFull: the holder parks too many calls (TOO_MANY_REQUESTS).
var errHeldFull = errors.New("grpcfe: too many calls are waiting for messages")

// pollHost is the holder's host.
type pollHost struct{ s *Server }

// newHolder returns the server's long-poll holder, wired to the core's
// arrivals and revives, and started. At most MaxHeldReceives calls wait at
// once, at most MaxHeldPerClient of one connection (Wait.Owner) and of one
// client id over all its connections (Wait.Client).
func newHolder(s *Server) *longpoll.Holder[*heldCall] {
	h := longpoll.New[*heldCall](pollHost{s}, longpoll.Options{
		MaxParked: s.opts.MaxHeldReceives, MaxPerOwner: s.opts.MaxHeldPerClient, MaxPerClient: s.opts.MaxHeldPerClient})
	s.core.OnArrival(h.Arrived)
	s.core.OnRevive(h.Revived)
	s.liteWire(h)
	h.Start()
	return h
}

// Run re-runs a woken call: a receive's pop, or a pull from the offset it
// waits past. It closes done when the call found messages (or failed).
func (h pollHost) Run(cp **heldCall, w *longpoll.Wait) bool {
	c := *cp
	if c.lite != nil {
		return h.runLite(c, w)
	}
	if c.pop != nil {
		if err := h.s.core.PopAgain(c.pop); err != nil || len(c.pop.Msgs) > 0 {
			c.err = err
			close(c.done)
			return false
		}
		w.WakeAt = c.pop.NextVisibleTime()
		return true
	}
	res := c.pull
	res.Release()
	if err := h.s.core.PullAgain(res, w.Offset); err != nil {
		c.err = err
		close(c.done)
		return false
	}
	if res.Status == core.PullNoNewMessage || res.Status == core.PullRetryImmediately {
		// Nothing matched the filter: wait past what the scan reached.
		w.Offset = max(w.Offset, res.NextOffset)
		return true
	}
	close(c.done)
	return false
}

// Expire lets a call whose time is up (or whose server stops) answer with
// what it has: nothing.
func (h pollHost) Expire(cp **heldCall, _ *longpoll.Wait) { close((*cp).done) }

// MaxOffset is the core's (updated before the core's OnArrival reports it).
func (h pollHost) MaxOffset(topic string, queue int32) int64 { return h.s.core.MaxOffset(topic, queue) }

// hold parks c on w for at most wait and blocks the call's goroutine until
// the holder lets it answer or ctx ends (then it takes c back, or waits for
// the holder's answer in progress). w's Owner and Client are set here
// (the call's connection, unless a member forwarded it, and client id). It returns c's error,
// errHeldFull when the holder refuses more calls (counted by cause and
// logged, throttled), nil otherwise (found, or time up).
func (s *Server) hold(ctx context.Context, w longpoll.Wait, wait time.Duration, c *heldCall) error {
	c.done = make(chan struct{})
	w.Client = clientKey(ctx)
	if len(metadata.ValueFromIncomingContext(ctx, metaForwarded)) == 0 {
		// A call a member forwarded counts against its client's bound and
		// the broker's, not the member's one connection, which carries
		// every client of the member (forward.go).
		w.Owner = connKey(ctx)
	}
	hd, err := s.polls.Park(w, time.Now().Add(wait), c)
	switch {
	case errors.Is(err, longpoll.ErrStopped):
		return nil // Expire closed done: answered with nothing
	case err != nil:
		s.heldRefused(ctx, err, &w)
		return errHeldFull
	}
	select {
	case <-c.done:
	case <-ctx.Done():
		if !s.polls.Cancel(hd) {
			<-c.done // being run or answered now
		}
	}
	return c.err
}

// heldRefused counts and logs (throttled) a long poll the holder refused.
func (s *Server) heldRefused(ctx context.Context, err error, w *longpoll.Wait) {
	cause, key := "the broker's bound (MaxHeldReceives)", "held-broker"
	switch {
	case errors.Is(err, longpoll.ErrOwnerFull):
		s.stats.heldConnFull.Add(1)
		cause, key = "the connection's bound (MaxHeldPerClient)", "held-connection"
	case errors.Is(err, longpoll.ErrClientFull):
		s.stats.heldClientFull.Add(1)
		cause, key = "the client's bound (MaxHeldPerClient)", "held-client"
	default:
		s.stats.heldFull.Add(1)
	}
	client, _ := w.Client.(string)
	s.warn(key, "grpc: a receive or pull was refused (TOO_MANY_REQUESTS): too many are waiting for messages; "+
		"a client holding many receives it does not read should be fixed, or the bound raised",
		"cause", cause, "client", client, "peer", peerOf(ctx), "topic", w.Topic, "group", w.Group)
}
