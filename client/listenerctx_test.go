package client

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
)

func TestListenerCtx(t *testing.T) {
	t.Run("value and live", func(t *testing.T) {
		cc := &ConsumeContext{AckIndex: -1}
		ctx := newListenerCtx(context.Background(), time.Minute, cc)
		if ConsumeContextFrom(ctx) != cc {
			t.Fatal("ConsumeContextFrom does not return the call's ConsumeContext")
		}
		if d, ok := ctx.Deadline(); !ok || time.Until(d) < 50*time.Second {
			t.Fatalf("deadline %v %v", d, ok)
		}
		if err := ctx.Err(); err != nil {
			t.Fatalf("Err during the call = %v", err)
		}
		if ctx.finish() {
			t.Fatal("finish reported a timeout")
		}
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("Err after the call = %v, want Canceled", ctx.Err())
		}
		select {
		case <-ctx.Done():
		default:
			t.Fatal("Done made after the call is not closed")
		}
	})
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { // virtual time: the deadline passes without a wall-clock wait
			ctx := newListenerCtx(context.Background(), 20*time.Millisecond, &ConsumeContext{})
			select {
			case <-ctx.Done():
			case <-time.After(wait.DefaultTimeout):
				t.Fatal("Done not closed at the deadline")
			}
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("Err = %v, want DeadlineExceeded", ctx.Err())
			}
			if !ctx.finish() {
				t.Fatal("finish did not report the timeout")
			}
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("Err after finish = %v, want DeadlineExceeded kept", ctx.Err())
			}
		})
	})
	t.Run("deadline without Done", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { // virtual time: the deadline passes without a wall-clock wait
			ctx := newListenerCtx(context.Background(), time.Millisecond, &ConsumeContext{})
			time.Sleep(5 * time.Millisecond)
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("Err = %v, want DeadlineExceeded", ctx.Err())
			}
			if !ctx.finish() {
				t.Fatal("finish did not report the timeout")
			}
		})
	})
	t.Run("deadline passed, nobody asked", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { // virtual time: the deadline passes without a wall-clock wait
			ctx := newListenerCtx(context.Background(), time.Millisecond, &ConsumeContext{})
			time.Sleep(5 * time.Millisecond)
			if !ctx.finish() {
				t.Fatal("finish did not report the timeout")
			}
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				t.Fatalf("Err after finish = %v, want DeadlineExceeded", ctx.Err())
			}
		})
	})
	t.Run("parent canceled", func(t *testing.T) {
		parent, cancel := context.WithCancel(context.WithValue(context.Background(), testKey{}, "v"))
		ctx := newListenerCtx(parent, time.Minute, &ConsumeContext{})
		if ctx.Value(testKey{}) != "v" {
			t.Fatal("parent's values are not visible")
		}
		done := ctx.Done()
		cancel()
		select {
		case <-done:
		case <-time.After(wait.DefaultTimeout):
			t.Fatal("Done not closed when the parent ended")
		}
		if !errors.Is(ctx.Err(), context.Canceled) {
			t.Fatalf("Err = %v, want Canceled", ctx.Err())
		}
		if ctx.finish() {
			t.Fatal("finish reported a timeout")
		}
	})
}

type testKey struct{}

func BenchmarkListenerCtx(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		cc := &ConsumeContext{AckIndex: -1}
		ctx := newListenerCtx(context.Background(), 15*time.Minute, cc)
		_ = ConsumeContextFrom(ctx)
		ctx.finish()
	}
}
