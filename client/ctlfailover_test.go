package client_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// TestControllerModeFailoverMeasure measures what issue 18's failover costs a
// producer of this client: real processes (three apogee-controller with their
// default timings, an apogee-namesrv, three apogee-broker of one group in
// controller mode with allAckInSyncStateSet=true), a producer sending without
// pause, and per round the master SIGKILLed: the time from the kill to the
// route naming the new master and to the first SEND_OK stored by it, and every
// acknowledged message on the new master. The killed broker then restarts and
// rejoins as a slave. It builds the three binaries, so it runs only when
// APOGEE_CLIENT_FAILOVER_ROUNDS is set (to the number of rounds); the
// in-process TestBrokerMasterReplacedProducerFollows runs always.
func TestControllerModeFailoverMeasure(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("APOGEE_CLIENT_FAILOVER_ROUNDS"))
	if rounds <= 0 {
		t.Skip("set APOGEE_CLIENT_FAILOVER_ROUNDS=n to run n SIGKILL rounds with real processes")
	}
	bin := t.TempDir()
	for _, name := range []string{"apogee-controller", "apogee-namesrv", "apogee-broker"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(bin, name), "../cmd/"+name).CombinedOutput()
		if err != nil {
			t.Fatalf("go build %s: %v\n%s", name, err, out)
		}
	}
	// Every process binds its ports from :0 and says them in its ready
	// file (package proctest); a restarted broker keeps the addresses its
	// first run bound.
	ctls := proctest.StartControllers(t, filepath.Join(bin, "apogee-controller"), 3)
	ctl := strings.Split(proctest.ControllerAddrs(ctls), ";")
	ns := proctest.Start(t, "apogee-namesrv", filepath.Join(bin, "apogee-namesrv"),
		"--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "ns")).Ready.Listen
	conf := filepath.Join(t.TempDir(), "g1.conf")
	if err := os.WriteFile(conf, []byte("brokerClusterName=DefaultCluster\nbrokerName=g1\nallAckInSyncStateSet=true\nhaMaxTimeSlaveNotCatchup=3000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	procs := make([]*proctest.Proc, 3)
	brokerAddrs := make([]string, 3)
	brokerArgs := make([][]string, 3)
	for i := range procs {
		brokerArgs[i] = []string{"--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--grpc-listen", "",
			"--namesrv-listen", "", "--data-dir", t.TempDir(), "--namesrv", ns,
			"--enable-controller-mode", "--controller-addr", strings.Join(ctl, ";"), "-c", conf}
		procs[i] = proctest.Start(t, fmt.Sprintf("apogee-broker-%d", i), filepath.Join(bin, "apogee-broker"), brokerArgs[i]...)
		brokerAddrs[i] = procs[i].Ready.Advertise
		// Restarts on the addresses this run bound.
		brokerArgs[i][1], brokerArgs[i][3] = procs[i].Ready.Listen, procs[i].Ready.HA
	}
	const topic, queues = "CtlFailover", 4
	var master string
	wait.Until(t, "a master in the route", func() bool {
		master = masterIn(routeAtQuiet(ns, "TBW102"), "g1")
		return master != ""
	})
	req := new(protocol.Command)
	req.InitRequest(protocol.ReqUpdateAndCreateTopic, 0)
	(&protocol.CreateTopicRequest{Topic: topic, DefaultTopic: "TBW102", ReadQueueNums: queues, WriteQueueNums: queues,
		Perm: protocol.PermRead | protocol.PermWrite, TopicFilterType: "SINGLE_TAG"}).Encode(&req.Ext)
	if resp := invokeAt(t, master, req); resp.Code != protocol.RespSuccess {
		t.Fatalf("create %s: code %d %q", topic, resp.Code, resp.Remark)
	}
	wait.Until(t, "the topic on every broker", func() bool {
		for _, a := range brokerAddrs {
			r := new(protocol.Command)
			r.InitRequest(protocol.ReqGetAllTopicConfig, 0)
			resp, err := invokeQuiet(a, r)
			if err != nil || resp.Code != protocol.RespSuccess || !strings.Contains(string(resp.Body), `"`+topic+`"`) {
				return false
			}
		}
		return true
	})

	p := realProducer(t, ns, client.SendTimeout(3*time.Second))
	type ack struct {
		body, store string
		at          time.Time
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
			body := fmt.Sprintf("ctl-%07d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			res, err := p.SendSync(ctx, &client.Message{Topic: topic, Body: []byte(body)})
			cancel()
			now := time.Now()
			mu.Lock()
			if err == nil && res.Status == client.SendOK {
				host, _, _ := message.ParseOffsetMsgID(res.OffsetMsgID())
				acks = append(acks, ack{body, host.String(), now})
			} else {
				failed++
			}
			mu.Unlock()
			if err != nil {
				time.Sleep(2 * time.Millisecond) // a client loop that backs off a little
			}
		}
	}()
	stopSending := sync.OnceFunc(func() { close(stop); <-sendDone })
	t.Cleanup(stopSending)
	acksOn := func(addr string, since time.Time) (n int, first time.Time) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range acks {
			if a.store == addr && !a.at.Before(since) {
				if n == 0 {
					first = a.at
				}
				n++
			}
		}
		return n, first
	}

	var toRoute, toSend []time.Duration
	for round := 0; round < rounds; round++ {
		old := masterIn(routeAtQuiet(ns, topic), "g1")
		wait.Until(t, "sends acknowledged by the master", func() bool {
			n, _ := acksOn(old, time.Time{})
			return n >= 200
		})
		wait.Until(t, "a SyncStateSet of three", func() bool { return len(syncStateSet(ctl, "g1")) == 3 })
		i := slices.Index(brokerAddrs, old)
		if i < 0 {
			t.Fatalf("master %s is none of the brokers %v", old, brokerAddrs)
		}
		killed := time.Now()
		procs[i].Kill()
		var nm string
		var routed time.Time
		wait.Until(t, "the route naming a new master", func() bool {
			nm = masterIn(routeAtQuiet(ns, topic), "g1")
			routed = time.Now()
			return nm != "" && nm != old
		})
		var first time.Time
		wait.Until(t, "a SEND_OK stored by the new master", func() bool {
			_, first = acksOn(nm, killed)
			return !first.IsZero()
		})
		toRoute, toSend = append(toRoute, routed.Sub(killed)), append(toSend, first.Sub(killed))
		t.Logf("round %d: master %s SIGKILLed; route names %s after %v, first SEND_OK stored by it after %v (%v after the route)",
			round, old, nm, routed.Sub(killed).Round(time.Millisecond), first.Sub(killed).Round(time.Millisecond),
			first.Sub(routed).Round(time.Millisecond))
		procs[i].Run(brokerArgs[i]...)
	}
	final := masterIn(routeAtQuiet(ns, topic), "g1")
	wait.Until(t, "sends acknowledged by the final master", func() bool {
		n, _ := acksOn(final, time.Time{})
		return n >= 200
	})
	stopSending()
	on := bodiesAt(t, final, topic, queues)
	mu.Lock()
	lost := 0
	for _, a := range acks {
		if !on[a.body] {
			lost++
		}
	}
	n, nf := len(acks), failed
	mu.Unlock()
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged messages are not on the final master %s", lost, n, final)
	}
	slices.Sort(toRoute)
	slices.Sort(toSend)
	t.Logf("%d rounds, %d acknowledged (all on the final master), %d sends failed; kill → route min %v median %v max %v; kill → first SEND_OK on the new master min %v median %v max %v",
		rounds, n, nf, toRoute[0].Round(time.Millisecond), toRoute[len(toRoute)/2].Round(time.Millisecond), toRoute[len(toRoute)-1].Round(time.Millisecond),
		toSend[0].Round(time.Millisecond), toSend[len(toSend)/2].Round(time.Millisecond), toSend[len(toSend)-1].Round(time.Millisecond))
}

// invokeQuiet is invokeAt that returns its error instead of failing the test
// (for addresses that may be down).
func invokeQuiet(addr string, req *protocol.Command) (*protocol.Command, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, nil)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return cl.Invoke(ctx, req)
}

func routeAtQuiet(ns, topic string) *protocol.TopicRouteData {
	req := new(protocol.Command)
	req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
	(&protocol.GetRouteInfoRequest{Topic: []byte(topic)}).Encode(&req.Ext)
	resp, err := invokeQuiet(ns, req)
	var rd protocol.TopicRouteData
	if err != nil || resp.Code != protocol.RespSuccess || rd.Decode(resp.Body) != nil {
		return nil
	}
	return &rd
}

// syncStateSet is the group's SyncStateSet as the controller leader has it.
func syncStateSet(ctls []string, group string) []int64 {
	for _, a := range ctls {
		req := new(protocol.Command)
		req.InitRequest(wire.ReqGetReplicaInfo, 0)
		req.Ext.SetString("brokerName", group)
		resp, err := invokeQuiet(a, req)
		if err != nil || resp.Code != protocol.RespSuccess || len(resp.Body) == 0 {
			continue
		}
		if set, err := wire.DecodeSyncStateSet(resp.Body); err == nil {
			return set.Set
		}
	}
	return nil
}

// bodiesAt reads every message of topic's queues on the broker at addr
// (PULL_MESSAGE from offset 0 to each queue's end).
func bodiesAt(t *testing.T, addr, topic string, queues int) map[string]bool {
	t.Helper()
	on := map[string]bool{}
	for q := range queues {
		for off := int64(0); ; {
			req := new(protocol.Command)
			req.InitRequest(protocol.ReqPullMessage, 0)
			(&protocol.PullMessageRequest{ConsumerGroup: []byte("ctl-failover-check"), Topic: []byte(topic), QueueID: int32(q),
				QueueOffset: off, MaxMsgNums: 256, ExpressionType: []byte("TAG"), Subscription: []byte("*"),
				SysFlag: protocol.PullFlagSubscription}).Encode(&req.Ext)
			resp := invokeAt(t, addr, req)
			var h protocol.PullMessageResponse
			if err := h.Decode(&resp.Ext); err != nil {
				t.Fatalf("pull %s/%d at %d from %s: code %d %q: %v", topic, q, off, addr, resp.Code, resp.Remark, err)
			}
			if resp.Code != protocol.RespSuccess {
				if off < h.MaxOffset {
					t.Fatalf("pull %s/%d at %d from %s (max %d): code %d %q", topic, q, off, addr, h.MaxOffset, resp.Code, resp.Remark)
				}
				break
			}
			err := message.ForEachRecord(resp.Body, false, func(v message.View) error {
				if v.QueueOffset() != off {
					return fmt.Errorf("queue %d: offset %d where %d was expected (not dense)", q, v.QueueOffset(), off)
				}
				on[string(v.Body())] = true
				off++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if off != h.NextBeginOffset {
				t.Fatalf("queue %d: read up to %d, next begin offset %d", q, off, h.NextBeginOffset)
			}
		}
	}
	return on
}
