package namesrv

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// checkInvariants verifies the invariants the package documentation states.
func (r *Registry) checkInvariants() error {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for addr, lb := range r.live {
		g := r.groups[lb.name]
		if g == nil || g.addrs[lb.id] != addr {
			return fmt.Errorf("live %s (%s/%d) not in its group", addr, lb.name, lb.id)
		}
	}
	for name, g := range r.groups {
		if len(g.addrs) == 0 {
			return fmt.Errorf("group %s without addresses", name)
		}
		for id, addr := range g.addrs {
			if lb := r.live[addr]; lb == nil || lb.name != name || lb.id != id {
				return fmt.Errorf("group %s id %d addr %s not live as such", name, id, addr)
			}
		}
		if _, ok := r.clusters[g.cluster][name]; !ok {
			return fmt.Errorf("group %s missing from cluster %s", name, g.cluster)
		}
		for topic := range g.topics {
			e := r.topics[topic]
			if e == nil {
				return fmt.Errorf("group %s hosts %s, which does not exist", name, topic)
			}
			if _, found := slices.BinarySearch(e.names, name); !found {
				return fmt.Errorf("topic %s does not list host %s", topic, name)
			}
		}
	}
	for cluster, names := range r.clusters {
		if len(names) == 0 {
			return fmt.Errorf("empty cluster %s", cluster)
		}
		for name := range names {
			if g := r.groups[name]; g == nil || g.cluster != cluster {
				return fmt.Errorf("cluster %s lists %s wrongly", cluster, name)
			}
		}
	}
	for topic, e := range r.topics {
		if len(e.names) == 0 || !slices.IsSorted(e.names) {
			return fmt.Errorf("topic %s hosts %v", topic, e.names)
		}
		for _, name := range e.names {
			g := r.groups[name]
			if g == nil {
				return fmt.Errorf("topic %s hosted by unknown %s", topic, name)
			}
			if _, ok := g.topics[topic]; !ok {
				return fmt.Errorf("topic %s lists %s, which does not host it", topic, name)
			}
		}
	}
	for ns, m := range r.kv {
		if len(m) == 0 {
			return fmt.Errorf("kv namespace %q without keys", ns)
		}
	}
	return nil
}

func mustInvariants(t testing.TB, r *Registry) {
	t.Helper()
	if err := r.checkInvariants(); err != nil {
		t.Fatal(err)
	}
}

// embeddedA is the single broker of a minimal deployment, as the broker registers it.
var embeddedA = BrokerRegistration{ClusterName: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911",
	Topics:      []protocol.TopicConfig{topicConf("T", 8, 6), topicConf("TBW102", 8, 7), topicConf("%RETRY%g", 1, 6)},
	DataVersion: protocol.DataVersion{Timestamp: 1700000000000, Counter: 3}}

func TestRouteGoldenForGoClient(t *testing.T) {
	s := startServer(t, Options{})
	s.r.RegisterBroker(embeddedA)
	cl := dial(t, s.addr)

	const legacy = `{"queueDatas":[{"brokerName":"broker-a","readQueueNums":8,"writeQueueNums":8,"perm":6,"topicSysFlag":0}],` +
		`"brokerDatas":[{"cluster":"DefaultCluster","brokerName":"broker-a","brokerAddrs":{0:"127.0.0.1:10911"}}],"filterServerTable":{}}`
	standard := strings.Replace(legacy, `{0:`, `{"0":`, 1)

	cases := []struct {
		name    string
		version int32
		ext     map[string]string
		want    string
	}{
		{"goc-317", protocol.VersionV4_5_2, map[string]string{"topic": "T"}, legacy},
		{"goc-317-bname", protocol.VersionV4_5_2, map[string]string{"topic": "T", "bname": ""}, legacy},
		{"v4.9.4", protocol.VersionV4_9_4, map[string]string{"topic": "T"}, standard},
		{"accept-standard", protocol.VersionV4_5_2, map[string]string{"topic": "T", "acceptStandardJsonOnly": "true"}, standard},
		{"accept-standard-false", protocol.VersionV4_5_2, map[string]string{"topic": "T", "acceptStandardJsonOnly": "false"}, legacy},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := gocRequest(protocol.ReqGetRouteInfoByTopic, tc.ext, nil)
			req.Version = tc.version
			resp := call(t, cl, req)
			if resp.Code != protocol.RespSuccess || !resp.IsResponse() {
				t.Fatalf("code %d remark %q", resp.Code, resp.Remark)
			}
			if got := string(resp.Body); got != tc.want {
				t.Fatalf("route body\n got %s\nwant %s", got, tc.want)
			}
			for _, strip := range []bool{false, true} {
				if tc.want == standard && !strip {
					continue // old GoC versions never get the standard form
				}
				gr := gocParseRoute(t, resp.Body, strip)
				want := gocRoute{Queues: []gocQueueData{{BrokerName: "broker-a", ReadQueueNums: 8, WriteQueueNums: 8, Perm: 6}},
					Brokers: []gocBrokerData{{Cluster: "DefaultCluster", BrokerName: "broker-a", Addrs: map[int64]string{0: "127.0.0.1:10911"}}}}
				if !reflect.DeepEqual(gr, want) {
					t.Fatalf("GoC (strip=%v) reads %+v", strip, gr)
				}
			}
		})
	}
}

func TestTopicNotExist(t *testing.T) {
	s := startServer(t, Options{})
	s.r.RegisterBroker(embeddedA)
	cl := dial(t, s.addr)
	resp := call(t, cl, routeReq("NoSuchTopic"))
	if resp.Code != protocol.RespTopicNotExist {
		t.Fatalf("code %d, want 17", resp.Code)
	}
	if got, want := string(resp.Remark), "No topic route info in name server for the topic: NoSuchTopic"; got != want {
		t.Fatalf("remark %q, want %q", got, want)
	}
	if len(resp.Body) != 0 || resp.Ext.Len() != 0 {
		t.Fatalf("unexpected body %q / ext", resp.Body)
	}
}

// The producer auto-create path: GoC asks for TBW102 when its topic has no route and
// sends with its queues; retry topics are routed like any other.
func TestTBW102AndRetryTopics(t *testing.T) {
	s := startServer(t, Options{})
	cl := dial(t, s.addr)
	if resp := call(t, cl, routeReq("TBW102")); resp.Code != protocol.RespTopicNotExist {
		t.Fatalf("TBW102 before any broker: code %d", resp.Code)
	}
	s.r.RegisterBroker(embeddedA)
	for _, tc := range []struct {
		topic        string
		queues, perm int
	}{{"TBW102", 8, 7}, {"%RETRY%g", 1, 6}} {
		resp := call(t, cl, routeReq(tc.topic))
		if resp.Code != protocol.RespSuccess {
			t.Fatalf("%s: code %d", tc.topic, resp.Code)
		}
		gr := gocParseRoute(t, resp.Body, false)
		if len(gr.Queues) != 1 || gr.Queues[0].Perm != tc.perm || gr.Queues[0].WriteQueueNums != tc.queues ||
			gr.Brokers[0].Addrs[0] != "127.0.0.1:10911" {
			t.Fatalf("%s: GoC reads %+v", tc.topic, gr)
		}
		if tc.perm&int(protocol.PermWrite) == 0 {
			t.Fatalf("%s not writable", tc.topic)
		}
	}
}

func TestTwoBrokersHostOneTopic(t *testing.T) {
	s := startServer(t, Options{})
	r := s.r
	// broker-b first: routes are sorted by broker name whatever the order of arrival.
	r.RegisterBroker(BrokerRegistration{ClusterName: "c1", BrokerName: "broker-b", BrokerAddr: "10.0.0.3:10911",
		Topics: []protocol.TopicConfig{topicConf("T", 4, 6)}})
	r.RegisterBroker(BrokerRegistration{ClusterName: "c1", BrokerName: "broker-a", BrokerAddr: "10.0.0.1:10911",
		HAServerAddr: "10.0.0.1:10912", Topics: []protocol.TopicConfig{topicConf("T", 8, 6), topicConf("OnlyA", 2, 6)}})
	// A slave: its address joins broker-a; its topics are ignored.
	r.RegisterBroker(BrokerRegistration{ClusterName: "c1", BrokerName: "broker-a", BrokerAddr: "10.0.0.2:10911", BrokerID: 1,
		Topics: []protocol.TopicConfig{topicConf("T", 1, 2), topicConf("SlaveOnly", 1, 6)}})
	mustInvariants(t, r)

	cl := dial(t, s.addr)
	resp := call(t, cl, routeReq("T"))
	const want = `{"queueDatas":[{"brokerName":"broker-a","readQueueNums":8,"writeQueueNums":8,"perm":6,"topicSysFlag":0},` +
		`{"brokerName":"broker-b","readQueueNums":4,"writeQueueNums":4,"perm":6,"topicSysFlag":0}],` +
		`"brokerDatas":[{"cluster":"c1","brokerName":"broker-a","brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}},` +
		`{"cluster":"c1","brokerName":"broker-b","brokerAddrs":{0:"10.0.0.3:10911"}}],"filterServerTable":{}}`
	if string(resp.Body) != want {
		t.Fatalf("route\n got %s\nwant %s", resp.Body, want)
	}
	gr := gocParseRoute(t, resp.Body, false)
	if got := gr.Brokers[0].Addrs; !maps.Equal(got, map[int64]string{0: "10.0.0.1:10911", 1: "10.0.0.2:10911"}) {
		t.Fatalf("GoC reads broker-a addrs %v", got)
	}
	if hasRoute(r, "SlaveOnly") {
		t.Fatal("a slave's topic was routed")
	}

	// The slave registering over REGISTER_BROKER learns its master.
	resp = call(t, cl, registerReq(t, BrokerRegistration{ClusterName: "c1", BrokerName: "broker-a",
		BrokerAddr: "10.0.0.2:10911", BrokerID: 1}, nil))
	var rr protocol.RegisterBrokerResponse
	if err := rr.Decode(&resp.Ext); err != nil || resp.Code != 0 {
		t.Fatalf("slave register: code %d %v", resp.Code, err)
	}
	if rr.MasterAddr != "10.0.0.1:10911" || rr.HAServerAddr != "10.0.0.1:10912" {
		t.Fatalf("slave register answer %+v", rr)
	}

	// The master leaves: its queues stay while the slave remains (consumers read it).
	r.UnregisterBroker("c1", "broker-a", "10.0.0.1:10911", 0)
	mustInvariants(t, r)
	route, ok := r.Route("T")
	if !ok || len(route.QueueDatas) != 2 || !maps.Equal(route.BrokerDatas[0].BrokerAddrs, map[int64]string{1: "10.0.0.2:10911"}) {
		t.Fatalf("after master left: %+v", route)
	}
	// Then the slave: broker-a is gone, OnlyA with it.
	r.UnregisterBroker("c1", "broker-a", "10.0.0.2:10911", 1)
	mustInvariants(t, r)
	route, ok = r.Route("T")
	if !ok || len(route.QueueDatas) != 1 || route.QueueDatas[0].BrokerName != "broker-b" || len(route.BrokerDatas) != 1 {
		t.Fatalf("after broker-a left: %+v", route)
	}
	if hasRoute(r, "OnlyA") {
		t.Fatal("OnlyA outlived its only broker")
	}
	if resp := call(t, cl, routeReq("OnlyA")); resp.Code != protocol.RespTopicNotExist {
		t.Fatalf("OnlyA served from a stale cache: code %d", resp.Code)
	}
}

func TestRegistrationReplacesTopicSet(t *testing.T) {
	s := startServer(t, Options{})
	cl := dial(t, s.addr)
	reg := BrokerRegistration{ClusterName: "c", BrokerName: "b", BrokerAddr: "10.0.0.1:10911",
		Topics: []protocol.TopicConfig{topicConf("X", 4, 6), topicConf("Y", 4, 6)}}
	if resp := call(t, cl, registerReq(t, reg, nil)); resp.Code != 0 {
		t.Fatalf("register: %d %s", resp.Code, resp.Remark)
	}
	if got := s.r.Topics(); !slices.Equal(got, []string{"X", "Y"}) {
		t.Fatalf("topics %v", got)
	}
	first := call(t, cl, routeReq("X")).Body

	reg.Topics = []protocol.TopicConfig{topicConf("X", 16, 4), topicConf("Z", 1, 6)}
	if resp := call(t, cl, registerReq(t, reg, nil)); resp.Code != 0 {
		t.Fatalf("register: %d %s", resp.Code, resp.Remark)
	}
	if got := s.r.Topics(); !slices.Equal(got, []string{"X", "Z"}) {
		t.Fatalf("topics after re-register %v", got)
	}
	second := call(t, cl, routeReq("X")).Body
	if string(first) == string(second) || !strings.Contains(string(second), `"readQueueNums":16,"writeQueueNums":16,"perm":4`) {
		t.Fatalf("route not updated: %s", second)
	}
	if resp := call(t, cl, routeReq("Y")); resp.Code != protocol.RespTopicNotExist {
		t.Fatalf("Y still routed: %d", resp.Code)
	}

	// A registration without a body refreshes liveness and keeps the topics.
	empty := registerReq(t, reg, nil)
	empty.Body = nil
	empty.Ext.SetInt("bodyCrc32", 0)
	if resp := call(t, cl, empty); resp.Code != 0 {
		t.Fatalf("bodiless register: %d %s", resp.Code, resp.Remark)
	}
	if got := s.r.Topics(); !slices.Equal(got, []string{"X", "Z"}) {
		t.Fatalf("topics after bodiless register %v", got)
	}
	mustInvariants(t, s.r)
}

func TestExpiryAfterBrokerTimeout(t *testing.T) {
	s := startServer(t, Options{BrokerTimeout: 500 * time.Millisecond, ScanInterval: 20 * time.Millisecond})
	s.r.RegisterBroker(embeddedA) // embedded: never expires
	cl := dial(t, s.addr)
	reg := BrokerRegistration{ClusterName: "c", BrokerName: "net", BrokerAddr: "10.0.0.9:10911",
		Topics: []protocol.TopicConfig{topicConf("N", 4, 6)}}

	// Registering again keeps it alive well past the timeout. A check
	// made more than the timeout after the last registration was sent (a
	// loaded machine) cannot tell: it is not made.
	start := time.Now()
	var lastSent time.Time
	for time.Since(start) < time.Second {
		lastSent = time.Now()
		if resp := call(t, cl, registerReq(t, reg, nil)); resp.Code != 0 {
			t.Fatalf("register: %d", resp.Code)
		}
		time.Sleep(50 * time.Millisecond) // the broker's registration interval
		if !hasRoute(s.r, "N") && time.Since(lastSent) < 500*time.Millisecond {
			t.Fatal("dropped while registering")
		}
	}
	// Silent (the connection stays open): dropped after the timeout, not
	// before. The timeout runs from the last registration, which the server
	// handled after lastSent (the sleep above can last much longer than
	// 50 ms on a loaded machine, so the loop's end is no reference).
	wait.Until(t, "expiry", func() bool { return !hasRoute(s.r, "N") })
	if d := time.Since(lastSent); d < 500*time.Millisecond {
		t.Fatalf("dropped after %v, before the 500 ms timeout", d)
	}
	if resp := call(t, cl, routeReq("N")); resp.Code != protocol.RespTopicNotExist {
		t.Fatalf("expired topic answered %d", resp.Code)
	}
	if !hasRoute(s.r, "T") {
		t.Fatal("the embedded broker expired")
	}

	// heartbeatTimeoutMillis overrides the default timeout for that broker.
	s2 := startServer(t, Options{BrokerTimeout: time.Hour, ScanInterval: 20 * time.Millisecond})
	cl2 := dial(t, s2.addr)
	if resp := call(t, cl2, registerReq(t, reg, map[string]string{"heartbeatTimeoutMillis": "100"})); resp.Code != 0 {
		t.Fatalf("register: %d", resp.Code)
	}
	wait.Until(t, "expiry by heartbeatTimeoutMillis", func() bool { return !hasRoute(s2.r, "N") })
	mustInvariants(t, s.r)
	mustInvariants(t, s2.r)
}

func TestDroppedWhenConnectionCloses(t *testing.T) {
	// Served as Serve does (the registry learns of every closed connection),
	// plus a signal after it has: the test knows when the registry has seen a
	// close.
	r := NewRegistry(Options{Logger: testlog.New(t, "namesrv")})
	t.Cleanup(r.Close)
	srv := remoting.NewServer(r, &remoting.Options{Logger: testlog.New(t, "namesrv")})
	srv.OnClose(r.ConnClosed)
	closed := make(chan struct{}, 8)
	srv.OnClose(func(*remoting.Conn) { closed <- struct{}{} })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	s := &testServer{r: r, addr: l.Addr().String()}
	s.r.RegisterBroker(embeddedA)
	reg := BrokerRegistration{ClusterName: "c", BrokerName: "net", BrokerAddr: "10.0.0.9:10911",
		Topics: []protocol.TopicConfig{topicConf("N", 4, 6)}}

	cl := dial(t, s.addr)
	if resp := call(t, cl, registerReq(t, reg, nil)); resp.Code != 0 {
		t.Fatalf("register: %d", resp.Code)
	}
	// The broker re-registers over a second connection: closing the first changes nothing.
	cl2 := dial(t, s.addr)
	if resp := call(t, cl2, registerReq(t, reg, nil)); resp.Code != 0 {
		t.Fatalf("register: %d", resp.Code)
	}
	cl.Close()
	<-cl.Done()
	select {
	case <-closed:
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("the server did not see the first connection close")
	}
	if !hasRoute(s.r, "N") {
		t.Fatal("dropped when an older connection closed")
	}
	// A client that only asks for routes closing changes nothing either.
	q := dial(t, s.addr)
	call(t, q, routeReq("N"))
	q.Close()

	cl2.Close()
	wait.Until(t, "drop on close", func() bool { return !hasRoute(s.r, "N") })
	if !hasRoute(s.r, "T") {
		t.Fatal("embedded broker dropped")
	}
	mustInvariants(t, s.r)
}

func TestEmbeddedNeverExpires(t *testing.T) {
	r := NewRegistry(Options{BrokerTimeout: 10 * time.Millisecond, ScanInterval: 5 * time.Millisecond, Logger: testlog.New(t, "namesrv")})
	defer r.Close()
	r.RegisterBroker(embeddedA)
	// What is tested is a time: ten broker timeouts and twenty scans pass.
	time.Sleep(100 * time.Millisecond)
	if !hasRoute(r, "T") {
		t.Fatal("embedded registration expired")
	}
	r.ConnClosed(nil)
	r.UnregisterBroker("other", "broker-a", "127.0.0.1:10911", 1) // wrong id: ignored
	if !hasRoute(r, "T") {
		t.Fatal("unregister with the wrong id removed the broker")
	}
	r.UnregisterBroker("DefaultCluster", "broker-a", "127.0.0.1:10911", 0)
	if hasRoute(r, "T") || len(r.Topics()) != 0 || len(r.ClusterInfo().BrokerAddrTable) != 0 {
		t.Fatal("unregister left state behind")
	}
	mustInvariants(t, r)
}

func TestUnregisterOverNetwork(t *testing.T) {
	s := startServer(t, Options{})
	s.r.RegisterBroker(embeddedA)
	cl := dial(t, s.addr)
	h := protocol.UnregisterBrokerRequest{ClusterName: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: "127.0.0.1:10911"}
	var req protocol.Command
	req.InitRequest(protocol.ReqUnregisterBroker, 0)
	h.Encode(&req.Ext)
	if resp := call(t, cl, &req); resp.Code != 0 {
		t.Fatalf("unregister: %d %s", resp.Code, resp.Remark)
	}
	if hasRoute(s.r, "T") {
		t.Fatal("still routed")
	}
}

func TestClusterInfo(t *testing.T) {
	s := startServer(t, Options{})
	r := s.r
	r.RegisterBroker(BrokerRegistration{ClusterName: "c1", BrokerName: "broker-a", BrokerAddr: "10.0.0.1:10911"})
	r.RegisterBroker(BrokerRegistration{ClusterName: "c1", BrokerName: "broker-a", BrokerAddr: "10.0.0.2:10911", BrokerID: 1})
	r.RegisterBroker(BrokerRegistration{ClusterName: "c2", BrokerName: "broker-c", BrokerAddr: "10.0.0.5:10911"})
	cl := dial(t, s.addr)

	const legacy = `{"brokerAddrTable":{"broker-a":{"cluster":"c1","brokerName":"broker-a","brokerAddrs":{0:"10.0.0.1:10911",1:"10.0.0.2:10911"}},` +
		`"broker-c":{"cluster":"c2","brokerName":"broker-c","brokerAddrs":{0:"10.0.0.5:10911"}}},` +
		`"clusterAddrTable":{"c1":["broker-a"],"c2":["broker-c"]}}`
	req := gocRequest(protocol.ReqGetBrokerClusterInfo, nil, nil)
	if resp := call(t, cl, req); resp.Code != 0 || string(resp.Body) != legacy {
		t.Fatalf("cluster info (317): code %d\n got %s\nwant %s", resp.Code, resp.Body, legacy)
	}
	req.Version = protocol.VersionV5_3_3
	resp := call(t, cl, req)
	var ci protocol.ClusterInfo
	if err := ci.Decode(resp.Body); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ci, r.ClusterInfo()) || !strings.Contains(string(resp.Body), `{"0":"10.0.0.1:10911","1":"10.0.0.2:10911"}`) {
		t.Fatalf("cluster info (479): %s", resp.Body)
	}
}

func TestTopicList(t *testing.T) {
	s := startServer(t, Options{})
	cl := dial(t, s.addr)
	req := gocRequest(protocol.ReqGetAllTopicListFromNameSrv, nil, nil)
	if resp := call(t, cl, req); resp.Code != 0 || string(resp.Body) != `{"topicList":[]}` {
		t.Fatalf("empty list: %d %s", resp.Code, resp.Body)
	}
	s.r.RegisterBroker(embeddedA)
	s.r.RegisterBroker(BrokerRegistration{ClusterName: "c", BrokerName: "broker-b", BrokerAddr: "10.0.0.3:10911",
		Topics: []protocol.TopicConfig{topicConf("T", 4, 6), topicConf("B", 4, 6)}})
	if resp := call(t, cl, req); resp.Code != 0 || string(resp.Body) != `{"topicList":["%RETRY%g","B","T","TBW102"]}` {
		t.Fatalf("list: %d %s", resp.Code, resp.Body)
	}
	// GET_TOPICS_BY_CLUSTER: only that cluster's brokers' topics.
	for cluster, want := range map[string]string{"c": `{"topicList":["B","T"]}`, "none": `{"topicList":[]}`} {
		resp := call(t, cl, gocRequest(protocol.ReqGetTopicsByCluster, map[string]string{"cluster": cluster}, nil))
		if resp.Code != 0 || string(resp.Body) != want {
			t.Fatalf("cluster %s: %d %s", cluster, resp.Code, resp.Body)
		}
	}
}

func TestDeleteTopic(t *testing.T) {
	s := startServer(t, Options{})
	r := s.r
	r.RegisterBroker(embeddedA)
	r.RegisterBroker(BrokerRegistration{ClusterName: "other", BrokerName: "broker-b", BrokerAddr: "10.0.0.3:10911",
		Topics: []protocol.TopicConfig{topicConf("T", 4, 6), topicConf("B", 4, 6)}})
	cl := dial(t, s.addr)
	call(t, cl, routeReq("T")) // cache it

	// Only the named cluster's brokers lose the topic (5.x clusterName).
	resp := call(t, cl, gocRequest(protocol.ReqDeleteTopicInNameSrv, map[string]string{"topic": "T", "clusterName": "other"}, nil))
	if resp.Code != 0 {
		t.Fatalf("delete: %d %s", resp.Code, resp.Remark)
	}
	route, ok := r.Route("T")
	if !ok || len(route.QueueDatas) != 1 || route.QueueDatas[0].BrokerName != "broker-a" {
		t.Fatalf("after cluster delete: %+v", route)
	}
	if b := call(t, cl, routeReq("T")).Body; strings.Contains(string(b), "broker-b") {
		t.Fatalf("stale cached route %s", b)
	}
	resp = call(t, cl, gocRequest(protocol.ReqDeleteTopicInNameSrv, map[string]string{"topic": "T"}, nil))
	if resp.Code != 0 {
		t.Fatalf("delete: %d %s", resp.Code, resp.Remark)
	}
	if resp := call(t, cl, routeReq("T")); resp.Code != protocol.RespTopicNotExist {
		t.Fatalf("deleted topic answered %d", resp.Code)
	}
	r.DeleteTopic("B")
	r.DeleteTopic("never-existed")
	if got := r.Topics(); !slices.Equal(got, []string{"%RETRY%g", "TBW102"}) {
		t.Fatalf("topics %v", got)
	}
	// The broker registering the topic again brings it back.
	r.RegisterBroker(embeddedA)
	if !hasRoute(r, "T") {
		t.Fatal("re-registration did not restore T")
	}
	mustInvariants(t, r)
}

func TestKVConfigAndOrderTopicConf(t *testing.T) {
	s := startServer(t, Options{})
	s.r.RegisterBroker(embeddedA)
	cl := dial(t, s.addr)
	kv := func(code int32, ext map[string]string) *protocol.Command {
		return call(t, cl, gocRequest(code, ext, nil))
	}
	if resp := kv(protocol.ReqGetKVConfig, map[string]string{"namespace": NamespaceOrderTopicConfig, "key": "T"}); resp.Code != protocol.RespQueryNotFound {
		t.Fatalf("get missing: %d", resp.Code)
	}
	if resp := kv(protocol.ReqPutKVConfig, map[string]string{"namespace": NamespaceOrderTopicConfig, "key": "T", "value": "broker-a:8"}); resp.Code != 0 {
		t.Fatalf("put: %d %s", resp.Code, resp.Remark)
	}
	resp := kv(protocol.ReqGetKVConfig, map[string]string{"namespace": NamespaceOrderTopicConfig, "key": "T"})
	if v, _ := resp.Ext.GetString("value"); resp.Code != 0 || v != "broker-a:8" {
		t.Fatalf("get: %d %q", resp.Code, v)
	}
	body := call(t, cl, routeReq("T")).Body
	if !strings.HasPrefix(string(body), `{"orderTopicConf":"broker-a:8","queueDatas":[`) {
		t.Fatalf("route without orderTopicConf: %s", body)
	}
	resp = kv(protocol.ReqGetKVListByNamespace, map[string]string{"namespace": NamespaceOrderTopicConfig})
	if resp.Code != 0 || string(resp.Body) != `{"table":{"T":"broker-a:8"}}` {
		t.Fatalf("list: %d %s", resp.Code, resp.Body)
	}
	// A registering broker gets the order config back, as from Java.
	resp = call(t, cl, registerReq(t, BrokerRegistration{ClusterName: "c", BrokerName: "x", BrokerAddr: "10.0.0.7:1"}, nil))
	if resp.Code != 0 || string(resp.Body) != `{"table":{"T":"broker-a:8"}}` {
		t.Fatalf("register answer: %d %s", resp.Code, resp.Body)
	}
	if resp := kv(protocol.ReqDeleteKVConfig, map[string]string{"namespace": NamespaceOrderTopicConfig, "key": "T"}); resp.Code != 0 {
		t.Fatalf("delete: %d", resp.Code)
	}
	if body := call(t, cl, routeReq("T")).Body; strings.Contains(string(body), "orderTopicConf") {
		t.Fatalf("stale orderTopicConf: %s", body)
	}
	if resp := kv(protocol.ReqGetKVListByNamespace, map[string]string{"namespace": NamespaceOrderTopicConfig}); resp.Code != protocol.RespQueryNotFound {
		t.Fatalf("list after delete: %d", resp.Code)
	}
}

func TestRegisterBrokerChecks(t *testing.T) {
	s := startServer(t, Options{})
	cl := dial(t, s.addr)
	reg := BrokerRegistration{ClusterName: "c", BrokerName: "b", BrokerAddr: "10.0.0.1:10911",
		Topics: []protocol.TopicConfig{topicConf("X", 4, 6)}}

	cases := []struct {
		name     string
		mutate   func(*protocol.Command)
		code     int32
		remark   string
		register bool
	}{
		{"good", func(*protocol.Command) {}, 0, "", true},
		{"crc-mismatch", func(c *protocol.Command) { c.Ext.SetInt("bodyCrc32", int64(crcOf(c.Body)^1)) }, 1, "crc32 not match", false},
		{"crc-zero-skips-check", func(c *protocol.Command) { c.Ext.SetInt("bodyCrc32", 0) }, 0, "", true},
		{"body-flipped", func(c *protocol.Command) { c.Body = append([]byte(nil), c.Body...); c.Body[10] ^= 0x20 }, 1, "crc32 not match", false},
		{"compressed", func(c *protocol.Command) { c.Ext.SetBool("compressed", true) }, 1, "compressed REGISTER_BROKER bodies are not supported", false},
		{"bad-json", func(c *protocol.Command) {
			c.Body = []byte(`{"topicConfigSerializeWrapper":`)
			c.Ext.SetInt("bodyCrc32", 0)
		}, 1, "malformed body", false},
		{"missing-brokerName", func(c *protocol.Command) { c.Ext.Delete("brokerName") }, 1, "brokerName", false},
		{"bad-brokerId", func(c *protocol.Command) { c.Ext.SetString("brokerId", "zero") }, 1, "brokerId", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s.r.UnregisterBroker("c", "b", "10.0.0.1:10911", 0)
			req := registerReq(t, reg, nil)
			tc.mutate(req)
			resp := call(t, cl, req)
			if resp.Code != tc.code || !strings.Contains(string(resp.Remark), tc.remark) {
				t.Fatalf("code %d remark %q, want %d %q", resp.Code, resp.Remark, tc.code, tc.remark)
			}
			if got := hasRoute(s.r, "X"); got != tc.register {
				t.Fatalf("registered=%v, want %v", got, tc.register)
			}
			if tc.code == 0 {
				if _, ok := resp.Ext.Get("masterAddr"); !ok {
					t.Fatal("no masterAddr key in the answer")
				}
			}
		})
	}
}

func TestUnknownCode(t *testing.T) {
	s := startServer(t, Options{})
	cl := dial(t, s.addr)
	for _, code := range []int32{protocol.ReqSendMessage, protocol.ReqHeartBeat, 9999, protocol.ReqQueryDataVersion} {
		resp := call(t, cl, gocRequest(code, map[string]string{"topic": "T"}, []byte("x")))
		want := fmt.Sprintf(" request type %d not supported", code)
		if resp.Code != protocol.RespRequestCodeNotSupported || string(resp.Remark) != want {
			t.Fatalf("code %d: answered %d %q", code, resp.Code, resp.Remark)
		}
		if IsNamesrvCode(code) {
			t.Fatalf("IsNamesrvCode(%d)", code)
		}
	}
	for _, code := range []int32{100, 101, 102, 103, 104, 105, 106, 206, 216, 219, 224} {
		if !IsNamesrvCode(code) {
			t.Fatalf("!IsNamesrvCode(%d)", code)
		}
	}
}

func TestMalformedHeaders(t *testing.T) {
	s := startServer(t, Options{})
	s.r.RegisterBroker(embeddedA)
	cl := dial(t, s.addr)
	cases := []struct {
		name string
		code int32
		ext  map[string]string
	}{
		{"route-no-topic", protocol.ReqGetRouteInfoByTopic, nil},
		{"route-empty-topic", protocol.ReqGetRouteInfoByTopic, map[string]string{"topic": ""}},
		{"route-bad-standard-flag", protocol.ReqGetRouteInfoByTopic, map[string]string{"topic": "T", "acceptStandardJsonOnly": "maybe"}},
		{"register-empty", protocol.ReqRegisterBroker, nil},
		{"register-bad-crc", protocol.ReqRegisterBroker, map[string]string{"brokerName": "b", "brokerAddr": "a:1", "clusterName": "c", "brokerId": "0", "bodyCrc32": "x"}},
		{"register-bad-timeout", protocol.ReqRegisterBroker, map[string]string{"brokerName": "b", "brokerAddr": "a:1", "clusterName": "c", "brokerId": "0", "heartbeatTimeoutMillis": "1e3"}},
		{"unregister-empty", protocol.ReqUnregisterBroker, nil},
		{"unregister-bad-id", protocol.ReqUnregisterBroker, map[string]string{"brokerName": "b", "brokerAddr": "a:1", "clusterName": "c", "brokerId": "-"}},
		{"delete-no-topic", protocol.ReqDeleteTopicInNameSrv, nil},
		{"kv-no-namespace", protocol.ReqGetKVConfig, map[string]string{"key": "k"}},
		{"kv-no-key", protocol.ReqPutKVConfig, map[string]string{"namespace": "n", "value": "v"}},
		{"kv-no-value", protocol.ReqPutKVConfig, map[string]string{"namespace": "n", "key": "k"}},
		{"kvlist-no-namespace", protocol.ReqGetKVListByNamespace, nil},
		{"topics-by-cluster-no-cluster", protocol.ReqGetTopicsByCluster, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := call(t, cl, gocRequest(tc.code, tc.ext, nil))
			if resp.Code != protocol.RespSystemError || len(resp.Remark) == 0 {
				t.Fatalf("answered %d %q", resp.Code, resp.Remark)
			}
			// The connection still serves.
			if resp := call(t, cl, routeReq("T")); resp.Code != 0 {
				t.Fatalf("route after a malformed request: %d", resp.Code)
			}
		})
	}
	mustInvariants(t, s.r)
}

// Route is the caller's copy: changing it changes nothing in the registry.
func TestRouteIsACopy(t *testing.T) {
	r := NewRegistry(Options{Logger: testlog.New(t, "namesrv")})
	defer r.Close()
	r.RegisterBroker(embeddedA)
	route, _ := r.Route("T")
	route.BrokerDatas[0].BrokerAddrs[0] = "evil"
	route.QueueDatas[0].Perm = 0
	again, _ := r.Route("T")
	if again.BrokerDatas[0].BrokerAddrs[0] != "127.0.0.1:10911" || again.QueueDatas[0].Perm != 6 {
		t.Fatalf("registry changed through a returned route: %+v", again)
	}
	ci := r.ClusterInfo()
	ci.BrokerAddrTable["broker-a"].BrokerAddrs[0] = "evil"
	if r.ClusterInfo().BrokerAddrTable["broker-a"].BrokerAddrs[0] != "127.0.0.1:10911" {
		t.Fatal("registry changed through ClusterInfo")
	}
}

// A broker that moves (same name and id, new address) or changes identity (same
// address, new id) leaves no stale address behind.
func TestAddressAndIdentityChanges(t *testing.T) {
	r := NewRegistry(Options{Logger: testlog.New(t, "namesrv")})
	defer r.Close()
	reg := BrokerRegistration{ClusterName: "c", BrokerName: "b", BrokerAddr: "10.0.0.1:1", Topics: []protocol.TopicConfig{topicConf("T", 4, 6)}}
	r.RegisterBroker(reg)
	reg.BrokerAddr = "10.0.0.2:1"
	r.RegisterBroker(reg)
	mustInvariants(t, r)
	route, _ := r.Route("T")
	if !maps.Equal(route.BrokerDatas[0].BrokerAddrs, map[int64]string{0: "10.0.0.2:1"}) {
		t.Fatalf("after move: %v", route.BrokerDatas[0].BrokerAddrs)
	}
	// A slave at 10.0.0.3 becomes the master's address under id 1, then is renamed.
	r.RegisterBroker(BrokerRegistration{ClusterName: "c", BrokerName: "b", BrokerAddr: "10.0.0.3:1", BrokerID: 1})
	r.RegisterBroker(BrokerRegistration{ClusterName: "c2", BrokerName: "b2", BrokerAddr: "10.0.0.3:1"})
	mustInvariants(t, r)
	route, _ = r.Route("T")
	if !maps.Equal(route.BrokerDatas[0].BrokerAddrs, map[int64]string{0: "10.0.0.2:1"}) {
		t.Fatalf("after rename: %v", route.BrokerDatas[0].BrokerAddrs)
	}
	// The group changes cluster.
	reg.ClusterName = "c3"
	r.RegisterBroker(reg)
	mustInvariants(t, r)
	if got := r.ClusterInfo().ClusterAddrTable; !reflect.DeepEqual(got, map[string][]string{"c2": {"b2"}, "c3": {"b"}}) {
		t.Fatalf("clusters %v", got)
	}
}

// Registrations, unregistrations, deletes, connection closes and route queries from
// many goroutines; the invariants hold throughout and -race finds nothing.
func TestConcurrentUse(t *testing.T) {
	r := NewRegistry(Options{BrokerTimeout: 20 * time.Millisecond, ScanInterval: time.Millisecond, Logger: testlog.New(t, "namesrv")})
	defer r.Close()
	names := []string{"a", "b", "c"}
	topics := []string{"T0", "T1", "T2", "T3"}
	const ops = 5000 // per goroutine: a count, so a loaded machine runs all of them too
	var wg sync.WaitGroup
	var failed sync.Once
	var failure error
	report := func(err error) { failed.Do(func() { failure = err }) }
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			var req protocol.Command
			var cmd protocol.Command
			for range ops {
				name := names[rng.IntN(len(names))]
				id := int64(rng.IntN(2))
				addr := fmt.Sprintf("10.0.0.%d:%d", rng.IntN(4), id)
				switch rng.IntN(6) {
				case 0, 1:
					var tcs []protocol.TopicConfig
					for _, tp := range topics {
						if rng.IntN(2) == 0 {
							tcs = append(tcs, topicConf(tp, int32(1+rng.IntN(8)), 6))
						}
					}
					reg := BrokerRegistration{ClusterName: "c" + name, BrokerName: name, BrokerAddr: addr, BrokerID: id, Topics: tcs}
					if rng.IntN(2) == 0 {
						r.RegisterBroker(reg)
					} else {
						r.mu.Lock()
						r.registerLocked(&reg, &remoting.Conn{}, 0, true) //nolint:errcheck // ids are distinct
						r.mu.Unlock()
					}
				case 2:
					r.UnregisterBroker("c"+name, name, addr, id)
				case 3:
					if rng.IntN(10) == 0 {
						r.DeleteTopic(topics[rng.IntN(len(topics))])
					}
				default:
					req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
					req.Ext.SetString("topic", topics[rng.IntN(len(topics))])
					cmd.InitResponse(&req, protocol.RespSuccess)
					r.ServeRemoting(nil, &req, &remoting.Response{Cmd: &cmd})
					if cmd.Code == 0 {
						var route protocol.TopicRouteData
						if err := route.Decode(cmd.Body); err != nil || len(route.QueueDatas) == 0 || len(route.QueueDatas) != len(route.BrokerDatas) {
							report(fmt.Errorf("bad route %s: %v", cmd.Body, err))
						}
					} else if cmd.Code != protocol.RespTopicNotExist {
						report(fmt.Errorf("route answered %d", cmd.Code))
					}
				}
				if rng.IntN(50) == 0 {
					if err := r.checkInvariants(); err != nil {
						report(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if failure != nil {
		t.Fatal(failure)
	}
	mustInvariants(t, r)
}

func TestServeReturnsOnListenerError(t *testing.T) {
	r := NewRegistry(Options{Logger: testlog.New(t, "namesrv")})
	defer r.Close()
	l := &failingListener{}
	err := Serve(t.Context(), l, r, &remoting.Options{Logger: testlog.New(t, "namesrv")})
	if err == nil || !errors.Is(err, errAccept) {
		t.Fatalf("Serve returned %v", err)
	}
}

var errAccept = fmt.Errorf("test listener: %w", net.ErrClosed)

// failingListener fails every Accept as a closed listener does.
type failingListener struct{}

func (*failingListener) Accept() (net.Conn, error) { return nil, errAccept }
func (*failingListener) Close() error              { return nil }
func (*failingListener) Addr() net.Addr            { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

// Stopping a standalone server closes its connections, which drops the brokers that
// registered over them.
func TestServeShutdownDropsNetworkBrokers(t *testing.T) {
	r := NewRegistry(Options{Logger: testlog.New(t, "namesrv")})
	defer r.Close()
	r.RegisterBroker(embeddedA)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, r, &remoting.Options{Logger: testlog.New(t, "namesrv")}) }()
	cl := dial(t, l.Addr().String())
	reg := BrokerRegistration{ClusterName: "c", BrokerName: "net", BrokerAddr: "10.0.0.9:10911",
		Topics: []protocol.TopicConfig{topicConf("N", 4, 6)}}
	if resp := call(t, cl, registerReq(t, reg, nil)); resp.Code != 0 {
		t.Fatalf("register: %d", resp.Code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("Serve did not return")
	}
	if hasRoute(r, "N") || !hasRoute(r, "T") {
		t.Fatal("after shutdown: network broker kept or embedded one dropped")
	}
}

// The exact frame rocketmq-client-go writes for a route query, over a bare TCP socket;
// the answer must be a JSON-header response echoing the opaque, with string-only
// extFields, and the route body the client's parser reads.
func TestRawGoClientFrame(t *testing.T) {
	s := startServer(t, Options{})
	s.r.RegisterBroker(embeddedA)
	nc, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(5 * time.Second))

	for i, topic := range []string{"T", "Unknown"} {
		header := fmt.Sprintf(`{"code":105,"language":"GO","version":317,"opaque":%d,"flag":0,"remark":"","extFields":{"topic":"%s"}}`, 7+i, topic)
		frame := binary.BigEndian.AppendUint32(nil, uint32(4+len(header)))
		frame = binary.BigEndian.AppendUint32(frame, uint32(len(header)))
		frame = append(frame, header...)
		if topic == "T" && !bytes.HasPrefix(frame, []byte{0, 0, 0, 0x68, 0, 0, 0, 0x64, '{'}) {
			t.Fatalf("fixture is not GoC's 100-byte header: % x", frame[:9])
		}
		if _, err := nc.Write(frame); err != nil {
			t.Fatal(err)
		}
		var prefix [8]byte
		if _, err := io.ReadFull(nc, prefix[:]); err != nil {
			t.Fatal(err)
		}
		total := binary.BigEndian.Uint32(prefix[:4])
		typ, hlen := prefix[4], binary.BigEndian.Uint32(prefix[4:])&0xFFFFFF
		rest := make([]byte, total-4)
		if _, err := io.ReadFull(nc, rest); err != nil {
			t.Fatal(err)
		}
		if typ != 0 {
			t.Fatalf("response header type %d, want JSON", typ)
		}
		var h struct {
			Code      int                        `json:"code"`
			Opaque    int32                      `json:"opaque"`
			Flag      int32                      `json:"flag"`
			Version   int                        `json:"version"`
			ExtFields map[string]json.RawMessage `json:"extFields"`
		}
		if err := json.Unmarshal(rest[:hlen], &h); err != nil {
			t.Fatalf("response header %s: %v", rest[:hlen], err)
		}
		for k, v := range h.ExtFields {
			if len(v) == 0 || (v[0] != '"' && string(v) != "null") {
				t.Fatalf("extFields %s is not a string: %s", k, v)
			}
		}
		if h.Opaque != int32(7+i) || h.Flag&1 == 0 || h.Version < 0 || h.Version > 32767 {
			t.Fatalf("response header %s", rest[:hlen])
		}
		body := rest[hlen:]
		switch topic {
		case "T":
			if h.Code != 0 {
				t.Fatalf("code %d", h.Code)
			}
			if gr := gocParseRoute(t, body, false); gr.Brokers[0].Addrs[0] != "127.0.0.1:10911" || gr.Queues[0].WriteQueueNums != 8 {
				t.Fatalf("GoC reads %+v", gr)
			}
		default:
			if h.Code != 17 || len(body) != 0 {
				t.Fatalf("unknown topic: code %d body %q", h.Code, body)
			}
		}
	}
}

// A second master of a group (same broker name and id 0, another address)
// is refused while the first is live, with an error naming both; once the
// first's connection closes it may take the place.
func TestSecondMasterRefusedWhileFirstLives(t *testing.T) {
	s := startServer(t, Options{})
	first := dial(t, s.addr)
	reg := BrokerRegistration{ClusterName: "c", BrokerName: "b", BrokerAddr: "10.0.0.1:10911", Topics: []protocol.TopicConfig{topicConf("T", 4, 6)}}
	if resp := call(t, first, registerReq(t, reg, nil)); resp.Code != protocol.RespSuccess {
		t.Fatalf("first master: %d %s", resp.Code, resp.Remark)
	}
	second := dial(t, s.addr)
	reg2 := reg
	reg2.BrokerAddr = "10.0.0.2:10911"
	resp := call(t, second, registerReq(t, reg2, nil))
	if resp.Code != protocol.RespSystemError || !strings.Contains(string(resp.Remark), "10.0.0.1:10911") || !strings.Contains(string(resp.Remark), "10.0.0.2:10911") {
		t.Fatalf("second master: %d %q, want SYSTEM_ERROR naming both addresses", resp.Code, resp.Remark)
	}
	route, _ := s.r.Route("T")
	if got := route.BrokerDatas[0].BrokerAddrs[0]; got != "10.0.0.1:10911" {
		t.Fatalf("the route moved to %s", got)
	}
	// A slave of the group is welcome, and learns its master's address.
	slave := reg
	slave.BrokerAddr, slave.BrokerID, slave.HAServerAddr = "10.0.0.3:10911", 1, "10.0.0.3:10912"
	resp = call(t, second, registerReq(t, slave, nil))
	var out protocol.RegisterBrokerResponse
	if err := out.Decode(&resp.Ext); err != nil || resp.Code != protocol.RespSuccess || out.MasterAddr != "10.0.0.1:10911" {
		t.Fatalf("slave: %d %q master %q (%v)", resp.Code, resp.Remark, out.MasterAddr, err)
	}
	// The first master's connection closes: the second may register.
	first.Close()
	wait.Until(t, "the first master dropped", func() bool {
		r, _ := s.r.Route("T")
		return r.BrokerDatas[0].BrokerAddrs[0] != "10.0.0.1:10911"
	})
	if resp := call(t, second, registerReq(t, reg2, nil)); resp.Code != protocol.RespSuccess {
		t.Fatalf("second master after the first left: %d %s", resp.Code, resp.Remark)
	}
}

// An elected master (controller mode) registers with a higher stateVersion
// (its master epoch): it takes broker id 0 from a deposed master whose
// registration has not expired (paused, or cut off); the deposed one,
// registering again with its older stateVersion, is refused.
func TestHigherStateVersionTakesTheMasterID(t *testing.T) {
	s := startServer(t, Options{})
	old := dial(t, s.addr)
	reg := BrokerRegistration{ClusterName: "c", BrokerName: "b", BrokerAddr: "10.0.0.1:10911",
		Topics: []protocol.TopicConfig{topicConf("T", 4, 6)}, DataVersion: protocol.DataVersion{StateVersion: 1}}
	if resp := call(t, old, registerReq(t, reg, nil)); resp.Code != protocol.RespSuccess {
		t.Fatalf("first master: %d %s", resp.Code, resp.Remark)
	}
	elected := dial(t, s.addr)
	reg2 := reg
	reg2.BrokerAddr, reg2.DataVersion.StateVersion = "10.0.0.2:10911", 2
	if resp := call(t, elected, registerReq(t, reg2, nil)); resp.Code != protocol.RespSuccess {
		t.Fatalf("elected master with stateVersion 2: %d %s", resp.Code, resp.Remark)
	}
	route, _ := s.r.Route("T")
	if got := route.BrokerDatas[0].BrokerAddrs[0]; got != "10.0.0.2:10911" {
		t.Fatalf("master id 0 at %s, want the elected one", got)
	}
	// The refusal says what happened (a later election), not "use another
	// broker name or id", which is for two brokers configured alike.
	if resp := call(t, old, registerReq(t, reg, nil)); resp.Code != protocol.RespSystemError ||
		!strings.Contains(string(resp.Remark), "deposed by a later election") || strings.Contains(string(resp.Remark), "another broker name") {
		t.Fatalf("deposed master registering again: %d %s, want refused as deposed", resp.Code, resp.Remark)
	}
	route, _ = s.r.Route("T")
	if got := route.BrokerDatas[0].BrokerAddrs[0]; got != "10.0.0.2:10911" {
		t.Fatalf("the deposed master took id 0 back: %s", got)
	}
	mustInvariants(t, s.r)
}
