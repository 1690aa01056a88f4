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

// popBench is a broker with a listener and a client for the POP
// benchmarks. held reports whether a pop is held, from the runtime info
// (the same key before and after issue 28's long-poll service).
type popBench struct {
	br *Broker
	cl *remoting.Client
}

func newPopBench(b *testing.B, topic string, queues int32) *popBench {
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
	b.Cleanup(func() { cl.Close() })
	mustCreateTopic(b, br, topic, queues)
	return &popBench{br: br, cl: cl}
}

func (p *popBench) held() bool { return p.br.RuntimeInfo()["popHeldNow"] == "1" }

type popAnswer struct {
	code    int32
	bytes   int
	popTime int64
	at      time.Time
}

func (p *popBench) popAsync(b *testing.B, a popArgs, done chan popAnswer) {
	err := p.cl.InvokeAsync(popCmd(a), 30*time.Second, func(resp *protocol.Command, err error) {
		if err != nil {
			done <- popAnswer{code: -1}
			return
		}
		var h protocol.PopMessageResponse
		_ = h.Decode(&resp.Ext)
		done <- popAnswer{resp.Code, len(resp.Body), h.PopTime, time.Now()}
	})
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPopLongPoll measures one held POP woken by an arrival: a pop of
// every queue of an 8-queue topic finds nothing and is held, a send
// (handler alone) stores one 1 KiB message, and the held pop is answered
// with it. wake-ns/op is the time from the send to the answer reaching
// the client.
func BenchmarkPopLongPoll(b *testing.B) {
	const topic = "BenchPop"
	p := newPopBench(b, topic, 8)
	d := &handlerDriver{b: p.br}
	done := make(chan popAnswer, 1)
	a := popArgs{group: "g", topic: topic, queue: -1, max: 1, invisible: time.Hour, poll: 20 * time.Second}
	b.ReportAllocs()
	b.SetBytes(1024)
	var wake time.Duration
	b.ResetTimer()
	for i := range b.N {
		p.popAsync(b, a, done)
		for !p.held() {
			time.Sleep(20 * time.Microsecond)
		}
		sent := time.Now()
		if r := d.serve(goSendRequest(topic, int32(i%8))); r.Cmd.Code != 0 {
			b.Fatalf("send: %d", r.Cmd.Code)
		}
		ans := <-done
		if ans.code != 0 || ans.bytes == 0 {
			b.Fatalf("woken pop: code %d, %d body bytes", ans.code, ans.bytes)
		}
		wake += ans.at.Sub(sent)
	}
	b.ReportMetric(float64(wake.Nanoseconds())/float64(b.N), "wake-ns/op")
}

// BenchmarkPopRevive measures one held POP woken by a revive: the only
// message of the topic, not acked, becomes visible again 5 ms after its
// last delivery, and a pop held meanwhile gets it. late-us/op is how long
// after that moment the answer reached the client (ms-granular: the pop
// time is in ms).
func BenchmarkPopRevive(b *testing.B) {
	const topic = "BenchRevive"
	const invisible = 5 * time.Millisecond
	p := newPopBench(b, topic, 1)
	g := protocol.DefaultSubscriptionGroupConfig("g")
	g.RetryMaxTimes = 1 << 30 // no dead letter however many deliveries
	if err := p.br.core.Admin().UpdateSubscriptionGroup(g); err != nil {
		b.Fatal(err)
	}
	fillQueue(b, p.br, topic, 1)
	done := make(chan popAnswer, 1)
	a := popArgs{group: "g", topic: topic, queue: -1, max: 1, invisible: invisible, poll: 20 * time.Second}
	p.popAsync(b, a, done)
	last := <-done
	if last.code != 0 {
		b.Fatalf("first pop: %d", last.code)
	}
	b.ReportAllocs()
	var late time.Duration
	b.ResetTimer()
	for range b.N {
		p.popAsync(b, a, done)
		ans := <-done
		if ans.code != 0 || ans.bytes == 0 {
			b.Fatalf("revived pop: code %d, %d body bytes", ans.code, ans.bytes)
		}
		late += ans.at.Sub(time.UnixMilli(last.popTime).Add(invisible))
		last = ans
	}
	b.ReportMetric(float64(late.Microseconds())/float64(b.N), "late-us/op")
}
