package core

import (
	"fmt"
	"testing"

	"github.com/apogeemq/apogee/broker/lite"
	"github.com/apogeemq/apogee/internal/benchcpu"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// Lite topics against a normal topic through the core alone (no front
// end): the cost of a send, and of a receive + ack per message
// (docs/benchmarks.md, "Lite topics (issue 30)").
//
//	go test -run '^$' -bench 'Lite' -benchmem ./broker/core/

// newLiteBenchCore is a core with a LITE parent "BenchLite" (4 queues), a
// NORMAL topic "BenchNormal" (4 queues) and the lite group "BenchLiteG".
func newLiteBenchCore(b *testing.B) *Core {
	c := newTestCore(b, func(o *Options) { o.Store.SegmentSize = 256 << 20; o.Store.ConsumeQueueEntries = 1 << 20 })
	for _, tc := range []struct{ topic, attrs string }{{"BenchLite", "+message.type=LITE"}, {"BenchNormal", "+message.type=NORMAL"}} {
		if err := c.Admin().CreateTopic(&TopicRequest{Topic: tc.topic, ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6,
			Attributes: tc.attrs}); err != nil {
			b.Fatal(err)
		}
	}
	g := protocol.DefaultSubscriptionGroupConfig("BenchLiteG")
	g.Attributes = map[string]string{"+lite.bind.topic": "BenchLite"}
	if err := c.Admin().UpdateSubscriptionGroup(g); err != nil {
		b.Fatal(err)
	}
	return c
}

// liteSendReqs are sends of a 1 KiB body to n lite topics of BenchLite,
// one request per lite topic (prebuilt: the benchmark measures the core).
func liteSendReqs(n int) []*SendRequest {
	reqs := make([]*SendRequest, n)
	for i := range reqs {
		r := sendReq("BenchLite", int32(i%4), 1024)
		r.Properties = message.AppendProperty(r.Properties, message.PropertyLiteTopic, fmt.Sprintf("session-%07d", i))
		r.CheckTopicType = true
		reqs[i] = r
	}
	return reqs
}

// BenchmarkLiteSend: one 1 KiB send, to a normal topic and to a lite topic
// of a LITE parent, with 1 and 10,000 lite topics in rotation.
func BenchmarkLiteSend(b *testing.B) {
	b.Run("normal", func(b *testing.B) {
		c := newLiteBenchCore(b)
		req := sendReq("BenchNormal", 0, 1024)
		req.CheckTopicType = true
		var res SendResult
		b.ReportAllocs()
		b.SetBytes(1024)
		b.ResetTimer()
		done := benchcpu.Report(b)
		for range b.N {
			if err := c.Send(req, &res); err != nil {
				b.Fatal(err)
			}
		}
		done()
	})
	for _, n := range []int{1, 10000} {
		b.Run(fmt.Sprintf("lite-%d", n), func(b *testing.B) {
			c := newLiteBenchCore(b)
			reqs := liteSendReqs(n)
			var res SendResult
			b.ReportAllocs()
			b.SetBytes(1024)
			b.ResetTimer()
			done := benchcpu.Report(b)
			for i := range b.N {
				if err := c.Send(reqs[i%n], &res); err != nil {
					b.Fatal(err)
				}
			}
			done()
		})
	}
}

// BenchmarkLitePopAck: a receive of up to 32 messages and an ack of each,
// per message: a normal topic's POP (any queue) against a lite topic's
// PopLite of one subscribed client (events driving it). The messages are
// sent before the timer starts.
func BenchmarkLitePopAck(b *testing.B) {
	b.Run("normal", func(b *testing.B) {
		c := newLiteBenchCore(b)
		req := sendReq("BenchNormal", -1, 256)
		var res SendResult
		for i := range b.N {
			req.QueueID = int32(i % 4)
			if err := c.Send(req, &res); err != nil {
				b.Fatal(err)
			}
		}
		wait.Until(b, "every message dispatched", func() bool {
			var n int64
			for q := range int32(4) {
				n += c.MaxOffset("BenchNormal", q)
			}
			return n == int64(b.N)
		})
		pr := &PopRequest{Group: []byte("BenchNormalG"), Topic: []byte("BenchNormal"), QueueID: -1, MaxMsgs: 32,
			InvisibleTime: 60000, FromFirst: true}
		var out PopResult
		b.ReportAllocs()
		b.ResetTimer()
		done := benchcpu.Report(b)
		defer done()
		for got := 0; got < b.N; {
			if err := c.Pop(pr, &out); err != nil {
				b.Fatal(err)
			}
			for _, m := range out.Msgs {
				if err := c.Ack(pr.Group, pr.Topic, m.QueueID, m.Offset, Receipt{QueueID: m.QueueID, PopTime: out.PopTime}); err != nil {
					b.Fatal(err)
				}
			}
			if len(out.Msgs) == 0 {
				b.Fatalf("nothing popped after %d of %d", got, b.N)
			}
			got += len(out.Msgs)
		}
	})
	b.Run("lite", func(b *testing.B) {
		c := newLiteBenchCore(b)
		if err := c.SyncLiteSubscription(&LiteSyncRequest{Client: "bench", Group: "BenchLiteG", Parent: "BenchLite",
			Action: lite.PartialAdd, Lites: []string{"L1"}}); err != nil {
			b.Fatal(err)
		}
		req := sendReq("BenchLite", 0, 256)
		req.Properties = message.AppendProperty(req.Properties, message.PropertyLiteTopic, "L1")
		var res SendResult
		for i := range b.N {
			req.QueueID = int32(i % 4)
			if err := c.Send(req, &res); err != nil {
				b.Fatal(err)
			}
		}
		wait.Until(b, "every message dispatched, the client told", func() bool {
			_, max, _ := c.store.LiteOffsets("BenchLite", "L1")
			return max == int64(b.N) && c.LiteHasEvents("bench")
		})
		pr := &LitePopRequest{Client: "bench", Group: "BenchLiteG", Parent: "BenchLite", MaxMsgs: 32, Invisible: 60e9}
		var out LitePopResult
		b.ReportAllocs()
		b.ResetTimer()
		done := benchcpu.Report(b)
		defer done()
		for got := 0; got < b.N; {
			if err := c.PopLite(pr, &out); err != nil {
				b.Fatal(err)
			}
			for _, m := range out.Msgs {
				if err := c.AckLite("BenchLiteG", "BenchLite", m.Lite, m.Offset, out.PopTime); err != nil {
					b.Fatal(err)
				}
			}
			if len(out.Msgs) == 0 {
				b.Fatalf("nothing popped after %d of %d", got, b.N)
			}
			got += len(out.Msgs)
		}
	})
}
