package wait

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// fakeT records a Fatalf instead of ending the goroutine.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}
func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
}

func TestPollReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	err := Poll(time.Minute, func() error {
		if n.Add(1) < 5 {
			return errors.New("not yet")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Load(); got != 5 {
		t.Fatalf("cond ran %d times, want 5", got)
	}
}

func TestFailureSaysWhatWasLastSeen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		seen := 0
		err := Poll(time.Second, func() error {
			seen++
			return fmt.Errorf("%d of 12 dispatched", seen)
		})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%d of 12 dispatched", seen)) {
			t.Fatalf("err %v does not carry the last thing seen (%d)", err, seen)
		}

		ft := &fakeT{}
		Equal(ft, "the count", 12, func() int { return 3 })
		if !strings.Contains(ft.msg, "waiting for the count") || !strings.Contains(ft.msg, "got 3, want 12") {
			t.Fatalf("Equal's failure %q lacks what and the last value", ft.msg)
		}
		ft = &fakeT{}
		Until(ft, "never", func() bool { return false })
		if !strings.Contains(ft.msg, "waiting for never") {
			t.Fatalf("Until's failure %q lacks what", ft.msg)
		}
	})
}

func TestValueReturnsTheAcceptedValue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		i := 0
		v := Value(t, "an even number above 4", func() int { i++; return i }, func(v int) bool { return v > 4 && v%2 == 0 })
		if v != 6 {
			t.Fatalf("Value returned %d, want 6", v)
		}
	})
}

// The pauses grow and stop at maxPause: over a virtual minute the condition
// runs about DefaultTimeout/maxPause times, not once per millisecond.
func TestPausesBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		calls := 0
		_ = Poll(DefaultTimeout, func() error { calls++; return errFalse })
		if max := int(DefaultTimeout/maxPause) + 20; calls > max || calls < int(DefaultTimeout/maxPause) {
			t.Fatalf("%d calls in a minute, want about %d", calls, DefaultTimeout/maxPause)
		}
	})
}
