package client_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/namesrv"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// member is one broker of a group, served in-process over TCP.
type member struct {
	addr string
	b    *broker.Broker
	stop func() // shuts the broker down (once)
}

// startMember runs a broker of group name registering with ns; a master
// also serves its slaves' HA stream.
func startMember(t *testing.T, ns, name string, role core.Role, id int64) *member {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Options{
		DataDir: t.TempDir(), AdvertiseAddr: l.Addr().String(), Logger: quiet,
		Store: store.Options{SegmentSize: 64 << 20, ConsumeQueueEntries: 1 << 16,
			IndexSlots: 1 << 14, IndexMaxEntries: 1 << 16, CleanInterval: -1},
		BrokerName: name, Role: role, BrokerID: id, NamesrvAddrs: []string{ns},
		RegisterInterval: 200 * time.Millisecond, SlaveSyncInterval: 100 * time.Millisecond,
	})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); b.Serve(l) }()
	if role != core.RoleSlave {
		haln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go b.ServeHA(haln)
	}
	var once sync.Once
	m := &member{addr: l.Addr().String(), b: b, stop: func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b.Shutdown(ctx)
			<-done
		})
	}}
	t.Cleanup(m.stop)
	return m
}

// invokeAt sends one request to addr and returns the answer.
func invokeAt(t *testing.T, addr string, req *protocol.Command) *protocol.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := cl.Invoke(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// Apogee's client over two broker groups (a master and a slave each)
// behind a standalone name server (issue 17, item 7): a topic created on
// both masters spreads over both groups, the producer sends to both, and
// two consumers of one group share both groups' queues. One master stops:
// sends go on to the other group, and the consumers consume every
// acknowledged message, most of the stopped group's from its slave.
func TestBrokerTwoGroups(t *testing.T) {
	reg, err := namesrv.OpenRegistry(namesrv.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	nsln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nsCtx, nsStop := context.WithCancel(context.Background())
	nsDone := make(chan struct{})
	go func() { defer close(nsDone); namesrv.Serve(nsCtx, nsln, reg, &remoting.Options{Logger: quiet}) }()
	t.Cleanup(func() { nsStop(); <-nsDone })
	ns := nsln.Addr().String()

	am := startMember(t, ns, "broker-a", core.RoleAsyncMaster, 0)
	startMember(t, ns, "broker-a", core.RoleSlave, 1)
	bm := startMember(t, ns, "broker-b", core.RoleAsyncMaster, 0)
	startMember(t, ns, "broker-b", core.RoleSlave, 1)

	const topic, queues = "TwoGroups", 4
	for _, m := range []*member{am, bm} {
		req := new(protocol.Command)
		req.InitRequest(protocol.ReqUpdateAndCreateTopic, 0)
		(&protocol.CreateTopicRequest{Topic: topic, DefaultTopic: "TBW102", ReadQueueNums: queues, WriteQueueNums: queues,
			Perm: protocol.PermRead | protocol.PermWrite, TopicFilterType: "SINGLE_TAG"}).Encode(&req.Ext)
		if resp := invokeAt(t, m.addr, req); resp.Code != protocol.RespSuccess {
			t.Fatalf("create %s on %s: code %d %q", topic, m.addr, resp.Code, resp.Remark)
		}
	}
	// Both groups with both members in the route.
	waitFor(t, 20*time.Second, "the route over both groups with their slaves", func() bool {
		req := new(protocol.Command)
		req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
		(&protocol.GetRouteInfoRequest{Topic: []byte(topic)}).Encode(&req.Ext)
		resp := invokeAt(t, ns, req)
		var rd protocol.TopicRouteData
		if resp.Code != protocol.RespSuccess || rd.Decode(resp.Body) != nil || len(rd.QueueDatas) != 2 {
			return false
		}
		for _, bd := range rd.BrokerDatas {
			if len(bd.BrokerAddrs) != 2 {
				return false
			}
		}
		return len(rd.BrokerDatas) == 2
	})

	p := realProducer(t, ns, client.RouteRefreshInterval(200*time.Millisecond), client.FaultTolerance(true))
	// Two consumers of one group, whose listener waits until broker-a's
	// master has stopped: they hold at most cache messages per queue, so
	// most of broker-a's messages are pulled after it stopped, from its
	// slave.
	const cache = 8
	col := newCollector()
	gate := make(chan struct{})
	var consumers []*client.PushConsumer
	for i := range 2 {
		listen := col.listener(fmt.Sprintf("c%d", i))
		c := realPush(t, ns, client.ConsumerGroup("two-groups"), client.Subscribe(topic, "*"),
			client.RouteRefreshInterval(200*time.Millisecond), client.WithConsumeFrom(client.ConsumeFromFirstOffset),
			client.PullBatchSize(cache/2), client.QueueCacheLimits(cache, 1<<20),
			client.WithConcurrentListener(func(ctx context.Context, msgs []*client.MessageExt) client.ConsumeResult {
				<-gate
				return listen(ctx, msgs)
			}))
		if err := c.Start(ctxT(t)); err != nil {
			t.Fatal(err)
		}
		consumers = append(consumers, c)
	}
	waitShare(t, topic, 2*queues, consumers...)

	byBroker := map[string]int{}
	var acked []string
	ackedOn := map[string]string{} // body → "broker-a/3"
	send := func(from, n int) {
		for i := from; i < from+n; i++ {
			body := fmt.Sprintf("two-groups-%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err := p.SendSync(ctx, &client.Message{Topic: topic, Body: []byte(body)})
			cancel()
			if err != nil {
				continue // not acknowledged: the stopping group's, while the route still has it
			}
			byBroker[res.Queue.BrokerName]++
			acked = append(acked, body)
			ackedOn[body] = fmt.Sprintf("%s/%d", res.Queue.BrokerName, res.Queue.QueueID)
		}
	}
	send(0, 200)
	if byBroker["broker-a"] <= 2*queues*cache || byBroker["broker-b"] == 0 {
		t.Fatalf("the producer did not use both groups (broker-a needs more than the consumers may cache, %d): %v", 2*queues*cache, byBroker)
	}
	// broker-a's master stops (its slaves get its whole log first).
	am.stop()
	waitFor(t, 20*time.Second, "broker-a's master out of the route", func() bool {
		req := new(protocol.Command)
		req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
		(&protocol.GetRouteInfoRequest{Topic: []byte(topic)}).Encode(&req.Ext)
		var rd protocol.TopicRouteData
		if resp := invokeAt(t, ns, req); resp.Code != protocol.RespSuccess || rd.Decode(resp.Body) != nil {
			return false
		}
		for _, bd := range rd.BrokerDatas {
			if bd.BrokerName == "broker-a" && bd.BrokerAddrs[0] != "" {
				return false
			}
		}
		return true
	})
	close(gate)
	time.Sleep(500 * time.Millisecond) // the clients' routes follow
	before := byBroker["broker-a"]
	send(200, 200)
	if byBroker["broker-a"] != before || byBroker["broker-b"] == 0 {
		t.Fatalf("after broker-a's master stopped: %v (broker-a had %d)", byBroker, before)
	}
	if len(acked) < 390 {
		t.Fatalf("only %d of 400 sends acknowledged", len(acked))
	}
	missing := func() map[string]int { // queue → acknowledged messages not consumed
		col.mu.Lock()
		defer col.mu.Unlock()
		m := map[string]int{}
		for _, body := range acked {
			if col.count[body] == 0 {
				m[ackedOn[body]]++
			}
		}
		return m
	}
	for deadline := time.Now().Add(30 * time.Second); len(missing()) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("acknowledged messages not consumed after 30 s, by queue: %v", missing())
		}
	}
	col.mu.Lock()
	who := map[string]int{}
	for _, w := range col.by {
		who[w]++
	}
	col.mu.Unlock()
	if who["c0"] == 0 || who["c1"] == 0 {
		t.Fatalf("the consumers did not share the queues: %v", who)
	}
	t.Logf("acknowledged %d of 400 (%v), consumed by %v", len(acked), byBroker, who)
}
