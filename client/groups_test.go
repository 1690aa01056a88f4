package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/namesrv"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
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
	return startMemberIn(t, ns, name, role, id, t.TempDir())
}

// startNamesrv runs a standalone name server on 127.0.0.1:0 for the test
// and returns its address.
func startNamesrv(t *testing.T) string {
	t.Helper()
	log := testlog.New(t, "namesrv")
	reg, err := namesrv.OpenRegistry(namesrv.Options{Logger: log})
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
	go func() { defer close(nsDone); namesrv.Serve(nsCtx, nsln, reg, &remoting.Options{Logger: log}) }()
	t.Cleanup(func() { nsStop(); <-nsDone })
	return nsln.Addr().String()
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
	ns := startNamesrv(t)

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
	wait.For(t, "the route over both groups with their slaves", func() error {
		rd := routeAt(t, ns, topic)
		if rd == nil {
			return errors.New("no route")
		}
		members := map[string]int{}
		for _, bd := range rd.BrokerDatas {
			members[bd.BrokerName] = len(bd.BrokerAddrs)
		}
		if len(rd.QueueDatas) != 2 || len(members) != 2 || members["broker-a"] != 2 || members["broker-b"] != 2 {
			return fmt.Errorf("%d queue datas, members by group %v", len(rd.QueueDatas), members)
		}
		return nil
	})

	p := realProducer(t, ns, client.RouteRefreshInterval(200*time.Millisecond), client.FaultTolerance(true))
	// Two consumers of one group, whose listener waits until broker-a's
	// master has stopped: they hold at most cache messages per queue, so
	// most of broker-a's messages are pulled after it stopped, from its
	// slave.
	const cache = 8
	col := newCollector()
	gate := make(chan struct{})
	var openGate sync.Once
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
	// A test that fails before the gate opens must not leave the listeners
	// blocked: the consumers' Close (an earlier cleanup, so a later one to
	// run) waits for them.
	t.Cleanup(func() { openGate.Do(func() { close(gate) }) })
	waitShare(t, topic, 2*queues, consumers...)

	byBroker := map[string]int{}
	var acked []string
	ackedOn := map[string]string{} // body → "broker-a/3"
	next := 0
	send := func(n int) (ok int) {
		for range n {
			body := fmt.Sprintf("two-groups-%d", next)
			next++
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			res, err := p.SendSync(ctx, &client.Message{Topic: topic, Body: []byte(body)})
			cancel()
			if err != nil {
				t.Logf("send %s: %v", body, err)
				continue // not acknowledged: the stopping group's, while the route still has it
			}
			ok++
			byBroker[res.Queue.BrokerName]++
			acked = append(acked, body)
			ackedOn[body] = fmt.Sprintf("%s/%d", res.Queue.BrokerName, res.Queue.QueueID)
		}
		return ok
	}
	// broker-a needs more messages than the consumers may cache. The
	// producer's fault tolerance skips a group whose send was slow (on a
	// loaded machine, any), so the split between the groups is not even:
	// send until both have their share.
	wait.For(t, "both groups used, broker-a beyond what the consumers may cache", func() error {
		send(20)
		if byBroker["broker-a"] <= 2*queues*cache || byBroker["broker-b"] == 0 {
			return fmt.Errorf("acknowledged by group %v; broker-a needs more than %d", byBroker, 2*queues*cache)
		}
		return nil
	})
	// broker-a's master stops (its slaves get its whole log first).
	am.stop()
	wait.For(t, "broker-a's master out of the route", func() error {
		if m := masterIn(routeAt(t, ns, topic), "broker-a"); m != "" {
			return fmt.Errorf("the route names %s", m)
		}
		return nil
	})
	openGate.Do(func() { close(gate) })
	// Sends go on to broker-b: those the producer still routes to broker-a
	// (until its route follows) fail over to broker-b on their retry.
	before := byBroker["broker-a"]
	if n := send(200); n < 190 || byBroker["broker-a"] != before {
		t.Fatalf("after broker-a's master stopped: %d of 200 sends acknowledged, by group %v (broker-a had %d)", n, byBroker, before)
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
	wait.For(t, "every acknowledged message consumed", func() error {
		if m := missing(); len(m) > 0 {
			return fmt.Errorf("not consumed, by queue: %v", m)
		}
		return nil
	})
	col.mu.Lock()
	who := map[string]int{}
	for _, w := range col.by {
		who[w]++
	}
	col.mu.Unlock()
	if who["c0"] == 0 || who["c1"] == 0 {
		t.Fatalf("the consumers did not share the queues: %v", who)
	}
	t.Logf("acknowledged %d of %d (%v), consumed by %v", len(acked), next, byBroker, who)
}

// A consumer group whose queues are assigned while their group's master is
// down (a consumer started then, or one that takes a queue over in a
// rebalance) reads its offsets from the slave, consumes every acknowledged
// message from it, and commits its offsets there, for the master to take on
// its return. The client asked the master alone for the group's members and
// offsets: such a queue never started (TestBrokerTwoGroups, once in CI: the
// 16 of 25 messages of each broker-a queue that were not cached when its
// master stopped were never consumed).
func TestBrokerConsumeFromSlaveWhileMasterDown(t *testing.T) {
	ns := startNamesrv(t)
	am := startMember(t, ns, "broker-a", core.RoleAsyncMaster, 0)
	slave := startMember(t, ns, "broker-a", core.RoleSlave, 1)
	const topic, queues, n = "SlaveOnly", 2, 20
	req := new(protocol.Command)
	req.InitRequest(protocol.ReqUpdateAndCreateTopic, 0)
	(&protocol.CreateTopicRequest{Topic: topic, DefaultTopic: "TBW102", ReadQueueNums: queues, WriteQueueNums: queues,
		Perm: protocol.PermRead | protocol.PermWrite, TopicFilterType: "SINGLE_TAG"}).Encode(&req.Ext)
	if resp := invokeAt(t, am.addr, req); resp.Code != protocol.RespSuccess {
		t.Fatalf("create %s: code %d %q", topic, resp.Code, resp.Remark)
	}
	wait.For(t, "the route with master and slave", func() error {
		rd := routeAt(t, ns, topic)
		if rd == nil || len(rd.BrokerDatas) != 1 || len(rd.BrokerDatas[0].BrokerAddrs) != 2 {
			return fmt.Errorf("route %+v", rd)
		}
		return nil
	})
	p := realProducer(t, ns)
	for i := range n {
		if _, err := p.SendSync(ctxT(t), &client.Message{Topic: topic, Body: []byte(fmt.Sprint("slave-only-", i))}); err != nil {
			t.Fatal(err)
		}
	}
	am.stop() // its slave gets its whole log first
	wait.For(t, "the master out of the route", func() error {
		if m := masterIn(routeAt(t, ns, topic), "broker-a"); m != "" {
			return fmt.Errorf("the route names %s", m)
		}
		return nil
	})

	col := newCollector()
	c := realPush(t, ns, client.ConsumerGroup("slave-only"), client.Subscribe(topic, "*"),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.WithConcurrentListener(col.listener("c")))
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "every acknowledged message consumed from the slave", func() error {
		if got := col.distinct(); got != n {
			return fmt.Errorf("%d of %d consumed; assigned %v", got, n, c.Assignment())
		}
		return nil
	})
	wait.For(t, "the offsets committed to the slave", func() error {
		var sum int64
		for q := range int32(queues) {
			sum += max(brokerOffset(t, slave.addr, "slave-only", topic, q), 0)
		}
		if sum != n {
			return fmt.Errorf("the slave's offsets sum to %d of %d", sum, n)
		}
		return nil
	})
}
