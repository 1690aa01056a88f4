package client_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// ackServer is a broker stand-in that acknowledges every send at once without
// allocating, so that a benchmark's allocations are the client's (and remoting's).
type ackServer struct {
	srv   *remoting.Server
	addr  string
	route []byte
	n     atomic.Int64
}

func newAckServer(tb testing.TB) *ackServer {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	a := &ackServer{addr: l.Addr().String()}
	rd := protocol.TopicRouteData{
		QueueDatas:  []protocol.QueueData{{BrokerName: "b", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}},
		BrokerDatas: []protocol.BrokerData{{Cluster: "c", BrokerName: "b", BrokerAddrs: map[int64]string{0: a.addr}}},
	}
	a.route = rd.AppendJSON(nil, true)
	a.srv = remoting.NewServer(a, nil)
	go a.srv.Serve(l)
	tb.Cleanup(func() { a.srv.Close() })
	return a
}

func (a *ackServer) ServeRemoting(_ *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	switch req.Code {
	case protocol.ReqGetRouteInfoByTopic:
		resp.Cmd.Body = a.route
	case protocol.ReqSendMessage, protocol.ReqSendBatchMessage:
		n := a.n.Add(1)
		resp.Cmd.Ext.SetString("msgId", "7F00000100002A9F0000000000000000")
		resp.Cmd.Ext.SetString("queueId", "0")
		resp.Cmd.Ext.SetInt("queueOffset", n)
	}
	return remoting.Reply
}

// BenchmarkProducerAsync sends 1 KiB messages with SendAsync, keeping up to
// MaxInflight in flight, and reports acknowledged messages per second. The "ack"
// case runs against a stand-in that acknowledges without storing (the client's own
// cost and allocations); the "fake" case against the in-memory test broker; the
// "broker" case against an Apogee broker in-process (async flush), where the broker
// shares the machine's cores with the client.
func BenchmarkProducerAsync(b *testing.B) {
	b.Run("ack", func(b *testing.B) {
		a := newAckServer(b)
		benchAsync(b, a.addr)
	})
	b.Run("fake", func(b *testing.B) {
		fb := newFakeBroker(b)
		benchAsync(b, fb.addr)
	})
	b.Run("broker", func(b *testing.B) {
		benchAsync(b, startBroker(b))
	})
}

func benchAsync(b *testing.B, addr string) {
	p, err := client.NewProducer(client.NameServer(addr), uniqueInstance(b), client.MaxInflight(1024))
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	msg := &client.Message{Topic: "BENCH", Body: make([]byte, 1024)}
	if _, err := p.SendSync(ctx, msg); err != nil {
		b.Fatal(err)
	}
	var acked, failed atomic.Int64
	done := make(chan struct{})
	var target int64
	cb := func(_ client.SendResult, err error) {
		if err != nil {
			failed.Add(1)
		}
		if acked.Add(1) == atomic.LoadInt64(&target) {
			close(done)
		}
	}
	atomic.StoreInt64(&target, int64(b.N))
	b.SetBytes(1024)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := p.SendAsync(ctx, msg, cb); err != nil {
			b.Fatal(err)
		}
	}
	<-done
	el := time.Since(start)
	b.StopTimer()
	if failed.Load() != 0 {
		b.Fatalf("%d sends failed", failed.Load())
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "msgs/s")
}

// TestSendAsyncAllocs checks the steady-state allocations of one acknowledged async
// send: none in the client. remoting's InvokeAsync allocates its call record (one
// allocation), which this test allows.
func TestSendAsyncAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are meaningless under -race")
	}
	a := newAckServer(t)
	p, err := client.NewProducer(client.NameServer(a.addr), uniqueInstance(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx := context.Background()
	msg := &client.Message{Topic: "ALLOC", Body: make([]byte, 1024), Tags: "t", Keys: []string{"k"}}
	done := make(chan struct{}, 1)
	cb := func(_ client.SendResult, err error) {
		if err != nil {
			t.Error(err)
		}
		done <- struct{}{}
	}
	for i := 0; i < 100; i++ {
		p.SendAsync(ctx, msg, cb)
		<-done
	}
	allocs := testing.AllocsPerRun(2000, func() {
		if err := p.SendAsync(ctx, msg, cb); err != nil {
			t.Fatal(err)
		}
		<-done
	})
	t.Logf("allocations per acknowledged async send: %.2f", allocs)
	if allocs > 0.05 {
		t.Fatalf("%.2f allocations per async send, want 0", allocs)
	}
}
