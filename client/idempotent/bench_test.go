package idempotent_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/client/idempotent"
	"github.com/apogeemq/apogee/internal/wait"
)

func nop(context.Context, []*client.MessageExt) client.ConsumeResult { return client.ConsumeSuccess }

// benchMsgs returns n one-message batches with distinct UNIQ_KEYs.
func benchMsgs(n int) [][]*client.MessageExt {
	out := make([][]*client.MessageExt, n)
	for i := range out {
		out[i] = []*client.MessageExt{msg(fmt.Sprintf("C0A80001%024X", i))}
	}
	return out
}

// BenchmarkGuard measures the decorator's overhead per message with the memory
// store: a bare listener call for reference; a new key each time (TryBegin, the
// listener with renewal armed, Done); a duplicate (TryBegin finds it done, the
// listener is not called); and new keys from all Ps at once.
func BenchmarkGuard(b *testing.B) {
	ctx := context.Background()
	batches := benchMsgs(1 << 14)
	b.Run("bare", func(b *testing.B) {
		var l client.ConcurrentListener = nop
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			l(ctx, batches[i&(len(batches)-1)])
		}
	})
	for _, cancel := range []bool{true, false} {
		b.Run(fmt.Sprintf("new-key/cancel=%v", cancel), func(b *testing.B) {
			// A done TTL of 1 ns: every key is new again when its turn comes back.
			g := newGuard(b, idempotent.NewMemoryStore(), idempotent.DoneTTL(time.Nanosecond), idempotent.CancelOnLeaseLost(cancel))
			l := g.Concurrent(nop)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if l(ctx, batches[i&(len(batches)-1)]) != client.ConsumeSuccess {
					b.Fatal("not consumed")
				}
			}
		})
	}
	b.Run("duplicate", func(b *testing.B) {
		g := newGuard(b, idempotent.NewMemoryStore())
		l := g.Concurrent(nop)
		l(ctx, batches[0])
		b.ReportAllocs()
		for b.Loop() {
			l(ctx, batches[0])
		}
		if g.Stats().Ran != 1 {
			b.Fatal("ran again")
		}
	})
	b.Run("new-key/parallel", func(b *testing.B) {
		g := newGuard(b, idempotent.NewMemoryStore(), idempotent.DoneTTL(time.Nanosecond))
		l := g.Concurrent(nop)
		var next atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := next.Add(1)
				l(ctx, batches[i&int64(len(batches)-1)])
			}
		})
	})
}

// BenchmarkBrokerStoreGuard measures a guarded listener call with the broker
// store against an in-process broker: a new key (query, begin record, queries
// until it is indexed, done record) and a duplicate (one query).
func BenchmarkBrokerStoreGuard(b *testing.B) {
	addr := startBroker(b)
	s := newBrokerStore(b, addr, "bench")
	g := newGuard(b, s)
	l := g.Concurrent(nop)
	ctx := context.Background()
	b.Run("new-key", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if l(ctx, []*client.MessageExt{msg(fmt.Sprintf("new-%d", i))}) != client.ConsumeSuccess {
				b.Fatal("not consumed")
			}
		}
	})
	b.Run("duplicate", func(b *testing.B) {
		dup := []*client.MessageExt{msg("dup")}
		wait.For(b, "the key's done record visible", func() error {
			if res := l(ctx, dup); res != client.ConsumeSuccess || g.Stats().Duplicates == 0 {
				return fmt.Errorf("listener %v, stats %+v", res, g.Stats())
			}
			return nil
		})
		b.ReportAllocs()
		for b.Loop() {
			l(ctx, dup)
		}
	})
}
