package grpcfe

import (
	"context"
	"sync"
	"time"
)

// Long polling: a receive or pull that found nothing waits on its topic's
// arrivals (the core's OnArrival listener, on the store's dispatcher) and
// looks again when woken, at every RecheckInterval (for messages whose
// invisible time passed: no arrival announces them), until it finds
// messages, its time is up, the call is cancelled or the server shuts
// down. Each call waits on its own gRPC goroutine; nothing else is held.

// waiters are the held calls by topic: each a channel of capacity one that
// an arrival fills without blocking.
type waiters struct {
	mu sync.Mutex
	m  map[string]map[chan struct{}]struct{} // guarded by mu
}

func (w *waiters) init() { w.m = make(map[string]map[chan struct{}]struct{}) }

func (w *waiters) add(topic string) chan struct{} {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	set := w.m[topic]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		w.m[topic] = set
	}
	set[ch] = struct{}{}
	w.mu.Unlock()
	return ch
}

func (w *waiters) remove(topic string, ch chan struct{}) {
	w.mu.Lock()
	if set := w.m[topic]; set != nil {
		delete(set, ch)
		if len(set) == 0 {
			delete(w.m, topic)
		}
	}
	w.mu.Unlock()
}

// arrived is the core's arrival listener: it wakes the calls held on the
// topic. It does not block (the mutex is held only to walk the set).
func (w *waiters) arrived(topic string, _ int32, _ int64) {
	w.mu.Lock()
	for ch := range w.m[topic] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
}

// hold runs try (at once, then on every wake-up) until it reports found or
// fails, for at most wait. It returns try's error, or nil when the time
// ran out, the call was cancelled or the server is shutting down.
func (s *Server) hold(ctx context.Context, topic string, _ int32, wait time.Duration, try func() (bool, error)) error {
	ch := s.waits.add(topic)
	defer s.waits.remove(topic, ch)
	timer := time.NewTimer(wait)
	defer timer.Stop()
	tick := time.NewTicker(s.opts.RecheckInterval)
	defer tick.Stop()
	for {
		found, err := try()
		if err != nil || found {
			return err
		}
		select {
		case <-ch:
		case <-tick.C:
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return nil
		case <-s.shutdown:
			return nil
		}
	}
}
