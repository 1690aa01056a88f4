package client

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
)

// TestWorkPoolReusesParkedWorkers checks that tasks submitted one at a time,
// each after the previous one finished (a consumer at a moderate rate), run
// on the same worker instead of a new goroutine each, that no more than max
// run at once, that wait sees every task done, and that stop ends the workers.
func TestWorkPoolReusesParkedWorkers(t *testing.T) {
	var (
		mu      sync.Mutex
		gids    = map[uint64]bool{}
		ran     atomic.Int64
		running atomic.Int64
		peak    atomic.Int64
	)
	var w workPool
	w.init(4, func(consumeTask) {
		mu.Lock()
		gids[goroutineID()] = true
		mu.Unlock()
		ran.Add(1)
	})
	before := runtime.NumGoroutine()
	for i := range 200 {
		w.submit(consumeTask{})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := w.wait(ctx); err != nil {
			t.Fatalf("task %d: %v", i, err)
		}
		cancel()
	}
	if got := ran.Load(); got != 200 {
		t.Fatalf("ran %d tasks, want 200", got)
	}
	mu.Lock()
	distinct := len(gids)
	mu.Unlock()
	if distinct != 1 {
		t.Fatalf("200 tasks one after another ran on %d goroutines, want 1 (a parked worker reused)", distinct)
	}

	// A burst runs on at most max workers.
	block := make(chan struct{})
	w.run = func(consumeTask) {
		n := running.Add(1)
		for {
			p := peak.Load()
			if n <= p || peak.CompareAndSwap(p, n) {
				break
			}
		}
		<-block
		running.Add(-1)
		ran.Add(1)
	}
	peak.Store(0)
	for range 50 {
		w.submit(consumeTask{})
	}
	close(block)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ran.Load(); got != 250 {
		t.Fatalf("ran %d tasks, want 250", got)
	}
	if p := peak.Load(); p > 4 {
		t.Fatalf("%d tasks ran at once, want at most 4", p)
	}

	// stop ends every worker; a task submitted afterwards still runs.
	w.stop()
	w.submit(consumeTask{})
	if err := w.wait(ctx); err != nil {
		t.Fatal(err)
	}
	if got := ran.Load(); got != 251 {
		t.Fatalf("ran %d tasks, want 251", got)
	}
	wait.For(t, "every worker gone after stop", func() error {
		w.mu.Lock()
		alive := w.running
		w.mu.Unlock()
		if n := runtime.NumGoroutine(); alive != 0 || n > before {
			return fmt.Errorf("%d workers alive, %d goroutines (%d before)", alive, n, before)
		}
		return nil
	})
}

// goroutineID returns the calling goroutine's id, parsed from its stack
// header ("goroutine 42 [running]:").
func goroutineID() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	const prefix = "goroutine "
	var id uint64
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + uint64(c-'0')
	}
	return id
}
