package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
)

// TestPutWaitsForALaggingDispatcher holds the dispatcher (its run lock) so it
// falls behind: a Put that finds it more than MaxDispatchLag behind waits,
// and goes on once dispatch catches up. A store whose gate is off never waits.
func TestPutWaitsForALaggingDispatcher(t *testing.T) {
	const limit = 64 << 10
	body := strings.Repeat("x", 1000)
	for _, tc := range []struct {
		name string
		lag  int64
		wait bool
	}{{"bounded", limit, true}, {"unbounded", -1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t.TempDir())
			o.MaxDispatchLag = tc.lag
			s := openStore(t, o)
			defer s.Close()

			s.dispatch.mu.Lock() // the dispatcher's next run blocks here
			held := true
			defer func() { // before Close, which needs the dispatcher, on a failure
				if held {
					s.dispatch.mu.Unlock()
				}
			}()
			done := make(chan int, 1)
			go func() {
				n := 0
				for ; n < 200; n++ { // 200 KB: three times the bound
					if _, err := s.Put(msg("T", 0, body)); err != nil {
						t.Error(err)
						break
					}
				}
				done <- n
			}()
			finished := -1
			if tc.wait {
				// A Put must come to wait (LagWaits counts it before it
				// blocks), and none may finish the loop while dispatch is held.
				wait.For(t, "a Put waiting for dispatch", func() error {
					select {
					case finished = <-done:
						t.Fatalf("all %d puts returned while dispatch was held and %d bytes behind", finished, s.Stats().DispatchLag)
					default:
					}
					if st := s.Stats(); st.LagWaits == 0 {
						return fmt.Errorf("no Put waited; lag %d bytes, bound %d", st.DispatchLag, limit)
					}
					return nil
				})
				if lag := s.Stats().DispatchLag; lag <= limit || lag > limit+2*int64(len(body))+200 {
					t.Fatalf("producer blocked at a lag of %d bytes, bound %d", lag, limit)
				}
			} else {
				select {
				case finished = <-done:
				case <-time.After(wait.DefaultTimeout):
					t.Fatal("puts blocked with the bound disabled")
				}
				if w := s.Stats().LagWaits; w != 0 {
					t.Fatalf("%d Puts waited with the bound disabled", w)
				}
			}
			s.dispatch.mu.Unlock()
			held = false
			if finished < 0 {
				select {
				case finished = <-done:
				case <-time.After(wait.DefaultTimeout):
					t.Fatal("the waiting Put did not resume after dispatch caught up")
				}
			}
			if finished != 200 {
				t.Fatalf("%d puts done", finished)
			}
			waitVisible(t, s, "T", 0, 200)
		})
	}
}

// TestCloseReleasesLagWaiters: a Put waiting for the dispatcher returns when
// the store closes, even though dispatch never caught up.
func TestCloseReleasesLagWaiters(t *testing.T) {
	o := testOptions(t.TempDir())
	o.MaxDispatchLag = 16 << 10
	s := openStore(t, o)
	s.dispatch.mu.Lock()
	held := true
	defer func() { // a failure must not leave Close waiting for the dispatcher
		if held {
			s.dispatch.mu.Unlock()
			s.Close()
		}
	}()
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Put(msg("T", 0, strings.Repeat("y", 1000))); err != nil {
				done <- err
				return
			}
		}
	}()
	wait.Until(t, "the producer waiting for dispatch", func() bool { return s.Stats().LagWaits > 0 })
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("the released Put loop ended with %v, want ErrClosed", err)
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("a waiting Put was not released by Close")
	}
	s.dispatch.mu.Unlock() // let Close's final dispatch run
	held = false
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
}
