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
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// startMemberIn is startMember with the broker's data directory given, so that
// a slave can be restarted as its group's master over its own log.
func startMemberIn(t *testing.T, ns, name string, role core.Role, id int64, dir string) *member {
	t.Helper()
	logName := fmt.Sprintf("%s-%d-%s", name, id, role)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Options{Core: core.Options{DataDir: dir, AdvertiseAddr: l.Addr().String(), Logger: testlog.New(t, logName), Store: store.Options{SegmentSize: 64 << 20, ConsumeQueueEntries: 1 << 16,
		IndexSlots: 1 << 14, IndexMaxEntries: 1 << 16, CleanInterval: -1}, BrokerName: name, Role: role, BrokerID: id}, NamesrvAddrs: []string{ns}, RegisterInterval: 200 * time.Millisecond, SlaveSyncInterval: 100 * time.Millisecond})
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

// routeAt returns topic's route as the name server ns has it (nil when it has none).
func routeAt(t *testing.T, ns, topic string) *protocol.TopicRouteData {
	t.Helper()
	req := new(protocol.Command)
	req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
	(&protocol.GetRouteInfoRequest{Topic: []byte(topic)}).Encode(&req.Ext)
	resp := invokeAt(t, ns, req)
	var rd protocol.TopicRouteData
	if resp.Code != protocol.RespSuccess || rd.Decode(resp.Body) != nil {
		return nil
	}
	return &rd
}

func masterIn(rd *protocol.TopicRouteData, name string) string {
	if rd == nil {
		return ""
	}
	for _, bd := range rd.BrokerDatas {
		if bd.BrokerName == name {
			return bd.BrokerAddrs[0]
		}
	}
	return ""
}

// A producer sends without pause while its topic's broker group changes master:
// the master (brokerId 0) stops, and its slave, which has every acknowledged
// message (sync replication), comes back as brokerId 0 at another address. The
// clients' route refresh interval is an hour, so only the refresh on failure can
// bring them to the new master: the producer's sends must resume there, and
// every acknowledged message must be consumable from the new master, by a
// consumer that was pulling from the old one.
func TestBrokerMasterReplacedProducerFollows(t *testing.T) {
	ns := startNamesrv(t)

	const name, topic, queues = "broker-fo", "FailoverTopic", 4
	slaveDir := t.TempDir()
	master := startMemberIn(t, ns, name, core.RoleSyncMaster, 0, t.TempDir())
	slave := startMemberIn(t, ns, name, core.RoleSlave, 1, slaveDir)
	req := new(protocol.Command)
	req.InitRequest(protocol.ReqUpdateAndCreateTopic, 0)
	(&protocol.CreateTopicRequest{Topic: topic, DefaultTopic: "TBW102", ReadQueueNums: queues, WriteQueueNums: queues,
		Perm: protocol.PermRead | protocol.PermWrite, TopicFilterType: "SINGLE_TAG"}).Encode(&req.Ext)
	if resp := invokeAt(t, master.addr, req); resp.Code != protocol.RespSuccess {
		t.Fatalf("create %s: code %d %q", topic, resp.Code, resp.Remark)
	}
	wait.Until(t, "the route with master and slave", func() bool {
		rd := routeAt(t, ns, topic)
		return rd != nil && len(rd.BrokerDatas) == 1 && len(rd.BrokerDatas[0].BrokerAddrs) == 2
	})

	p := realProducer(t, ns, client.SendTimeout(3*time.Second), client.RouteRefreshInterval(time.Hour))
	col := newCollector()
	c := realPush(t, ns, client.ConsumerGroup("failover-follow"), client.Subscribe(topic, "*"), client.RouteRefreshInterval(time.Hour),
		client.WithConsumeFrom(client.ConsumeFromFirstOffset), client.WithConcurrentListener(col.listener("c")))
	if err := c.Start(ctxT(t)); err != nil {
		t.Fatal(err)
	}

	type ack struct {
		body  string
		at    time.Time
		store string // the storing broker's address, from the offset message id
	}
	var (
		mu     sync.Mutex
		acks   []ack
		failed int
	)
	stop := make(chan struct{})
	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			body := fmt.Sprintf("fo-%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := p.SendSync(ctx, &client.Message{Topic: topic, Body: []byte(body)})
			cancel()
			now := time.Now()
			mu.Lock()
			if err != nil || res.Status != client.SendOK {
				// SLAVE_NOT_AVAILABLE (the slave not connected yet, on a
				// loaded machine) is stored on the master alone: not one
				// of the acknowledged messages the promoted slave must have.
				failed++
			} else {
				host, _, perr := message.ParseOffsetMsgID(res.OffsetMsgID())
				if perr != nil {
					t.Errorf("offset message id %q: %v", res.OffsetMsgID(), perr)
				}
				acks = append(acks, ack{body, now, host.String()})
			}
			mu.Unlock()
			if err != nil {
				time.Sleep(2 * time.Millisecond) // a client loop that backs off a little
			}
		}
	}()
	t.Cleanup(func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-sendDone
	})
	wait.Until(t, "acknowledgements from the first master", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acks) >= 300
	})

	// The master goes; its slave comes back as brokerId 0 on another address.
	stopped := time.Now()
	master.stop()
	slave.stop()
	promoted := startMemberIn(t, ns, name, core.RoleAsyncMaster, 0, slaveDir)
	var routed time.Time
	wait.Until(t, "the route naming the new master", func() bool {
		if masterIn(routeAt(t, ns, topic), name) == promoted.addr {
			routed = time.Now()
			return true
		}
		return false
	})
	var resumed time.Time
	wait.Until(t, "an acknowledgement from the new master", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range acks {
			if a.store == promoted.addr {
				resumed = a.at
				return true
			}
		}
		return false
	})
	// Keep sending to the new master for a while.
	mu.Lock()
	n0 := len(acks)
	mu.Unlock()
	wait.Until(t, "more acknowledgements from the new master", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acks) >= n0+200
	})
	close(stop)
	<-sendDone

	mu.Lock()
	acked := make([]string, len(acks))
	for i, a := range acks {
		acked[i] = a.body
	}
	nFailed := failed
	mu.Unlock()
	// The consumer's route refresh interval is an hour too: only its failed
	// pulls' refresh brings it to the new master.
	consumeWait := time.Now()
	wait.Until(t, "every acknowledged message consumed from the new master", func() bool {
		col.mu.Lock()
		defer col.mu.Unlock()
		for _, body := range acked {
			if col.count[body] == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("every acknowledged message consumed %v after the sends stopped", time.Since(consumeWait).Round(time.Millisecond))
	t.Logf("%d acknowledged, %d failed sends; master stopped → route names the new one %v, → first SEND_OK there %v (%v after the route changed)",
		len(acked), nFailed, routed.Sub(stopped).Round(time.Millisecond), resumed.Sub(stopped).Round(time.Millisecond),
		resumed.Sub(routed).Round(time.Millisecond))
}
