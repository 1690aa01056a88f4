package broker

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// BenchmarkPullLongPoll measures one long-polling round over loopback: a
// pull at the queue's end is parked, a send (handler alone) stores one 1 KiB
// message, the store's arrival wakes the pull, and the holder re-runs and
// answers it. allocs/op include the client's and the connection's;
// wake-ns/op is the time from the send to the pull's answer reaching the
// client (the rest of ns/op is the pull's own round trip and the wait until
// it is parked).
func BenchmarkPullLongPoll(b *testing.B) {
	br := benchBroker(b, b.TempDir())
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go br.Serve(l)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, l.Addr().String(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	const topic = "BenchHeld"
	send := goSendRequest(topic, 0)
	d := &handlerDriver{b: br}
	fillQueue(b, br, topic, 1)
	pull := pullRequest(pullArgs{group: "g", topic: topic, sysFlag: protocol.PullFlagSuspend | protocol.PullFlagSubscription, sub: "*", suspendMs: 20000})
	type answer struct {
		code  int32
		bytes int
		at    time.Time
	}
	done := make(chan answer, 1)
	onAnswer := func(resp *protocol.Command, err error) {
		if err != nil {
			done <- answer{code: -1}
			return
		}
		done <- answer{resp.Code, len(resp.Body), time.Now()}
	}
	b.ReportAllocs()
	b.SetBytes(1024)
	var wake time.Duration
	b.ResetTimer()
	for i := range b.N {
		pull.Ext.SetInt("queueOffset", int64(i+1))
		if err := cl.InvokeAsync(pull, 30*time.Second, onAnswer); err != nil {
			b.Fatal(err)
		}
		for br.holds.Stats().Held == 0 {
			time.Sleep(20 * time.Microsecond) // a spinning goroutine would keep the netpoller from seeing the request
		}
		sent := time.Now()
		if r := d.serve(send); r.Cmd.Code != 0 {
			b.Fatalf("send: %d", r.Cmd.Code)
		}
		a := <-done
		if a.code != 0 || a.bytes == 0 {
			b.Fatalf("woken pull: code %d, %d body bytes", a.code, a.bytes)
		}
		wake += a.at.Sub(sent)
	}
	b.ReportMetric(float64(wake.Nanoseconds())/float64(b.N), "wake-ns/op")
}
