package namesrv

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// lookup is a Registrar's LookupTopic over the source's table.
func (s *brokerSource) lookup(name string) (protocol.TopicConfig, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, tc := range s.reg.Topics {
		if tc.TopicName == name {
			return tc, true
		}
	}
	return protocol.TopicConfig{}, false
}

func (s *brokerSource) removeTopic(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, tc := range s.reg.Topics {
		if tc.TopicName == name {
			s.reg.Topics = append(s.reg.Topics[:i], s.reg.Topics[i+1:]...)
			s.reg.DataVersion.Counter++
			return
		}
	}
}

// registerTopicReq is REGISTER_TOPIC_IN_NAMESRV as a Java 5 broker sends it.
func registerTopicReq(topic string, queues ...protocol.QueueData) *protocol.Command {
	rd := protocol.TopicRouteData{QueueDatas: queues}
	var c protocol.Command
	c.InitRequest(protocol.ReqRegisterTopicInNameSrv, 0)
	c.Language = protocol.LangJava
	c.Ext.SetString("topic", topic)
	c.Body = rd.AppendJSON(nil, true)
	return &c
}

// cachedBody returns the address of topic's cached legacy route body.
func cachedBody(t testing.TB, r *Registry, topic string) uintptr {
	t.Helper()
	b, ok := r.routeJSON([]byte(topic), false)
	if !ok {
		t.Fatalf("no route for %s", topic)
	}
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))
}

func TestRegisterTopicInNamesrv(t *testing.T) {
	s := startServer(t, Options{})
	cl := dial(t, s.addr)
	reg := BrokerRegistration{ClusterName: "c", BrokerName: "broker-x", BrokerAddr: "10.1.1.1:10911",
		Topics: []protocol.TopicConfig{topicConf("TBW102", 8, 7), topicConf("T", 4, 6)}}
	if r := call(t, cl, registerReq(t, reg, nil)); r.Code != protocol.RespSuccess {
		t.Fatalf("register: %d %s", r.Code, r.Remark)
	}
	before := cachedBody(t, s.r, "T")

	// A new topic: routed with its queues, the other topics' cached routes kept.
	if r := call(t, cl, registerTopicReq("New", protocol.QueueData{BrokerName: "broker-x", ReadQueueNums: 2, WriteQueueNums: 3, Perm: 6})); r.Code != protocol.RespSuccess {
		t.Fatalf("217: %d %s", r.Code, r.Remark)
	}
	route, ok := s.r.Route("New")
	if !ok || len(route.QueueDatas) != 1 || route.QueueDatas[0].ReadQueueNums != 2 || route.QueueDatas[0].WriteQueueNums != 3 ||
		len(route.BrokerDatas) != 1 || route.BrokerDatas[0].BrokerAddrs[0] != "10.1.1.1:10911" {
		t.Fatalf("route of New: %+v %v", route, ok)
	}
	if cachedBody(t, s.r, "T") != before {
		t.Fatal("registering one topic rebuilt another topic's cached route")
	}

	// An update of an existing topic replaces its queues on that broker name.
	call(t, cl, registerTopicReq("T", protocol.QueueData{BrokerName: "broker-x", ReadQueueNums: 16, WriteQueueNums: 16, Perm: 6}))
	if route, _ := s.r.Route("T"); route.QueueDatas[0].WriteQueueNums != 16 {
		t.Fatalf("route of T: %+v", route)
	}

	// A broker name that is not registered is skipped, as in Java.
	if r := call(t, cl, registerTopicReq("Ghost", protocol.QueueData{BrokerName: "nobody", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6})); r.Code != protocol.RespSuccess {
		t.Fatalf("217 for an unknown broker: %d", r.Code)
	}
	if hasRoute(s.r, "Ghost") {
		t.Fatal("routed a topic of an unregistered broker name")
	}
	// No topic: refused.
	noTopic := registerTopicReq("")
	noTopic.Ext.Reset()
	if r := call(t, cl, noTopic); r.Code != protocol.RespSystemError {
		t.Fatalf("217 without topic: %d", r.Code)
	}

	// A full registration still replaces the broker's topic set.
	if r := call(t, cl, registerReq(t, reg, nil)); r.Code != protocol.RespSuccess {
		t.Fatal(r.Code)
	}
	if hasRoute(s.r, "New") {
		t.Fatal("a full registration without New kept it")
	}
}

func TestUnregisterTopic(t *testing.T) {
	r := NewRegistry(Options{Logger: testlog.New(t, "namesrv")})
	defer r.Close()
	for _, name := range []string{"a", "b"} {
		r.RegisterBroker(BrokerRegistration{ClusterName: "c", BrokerName: name, BrokerAddr: name + ":1",
			Topics: []protocol.TopicConfig{topicConf("X", 4, 6), topicConf("Y", 4, 6)}})
	}
	y := cachedBody(t, r, "Y")
	if !r.UnregisterTopic("a", "X") || r.UnregisterTopic("a", "X") || r.UnregisterTopic("nobody", "X") {
		t.Fatal("UnregisterTopic's result")
	}
	route, ok := r.Route("X")
	if !ok || len(route.QueueDatas) != 1 || route.QueueDatas[0].BrokerName != "b" {
		t.Fatalf("route of X after a left: %+v", route)
	}
	r.UnregisterTopic("b", "X")
	if hasRoute(r, "X") {
		t.Fatal("X routed with no host")
	}
	if cachedBody(t, r, "Y") != y {
		t.Fatal("unregistering X rebuilt Y's cached route")
	}
	// The embedded path: RegisterTopic brings it back on one name.
	if !r.RegisterTopic("X", []protocol.QueueData{{BrokerName: "a", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}}) {
		t.Fatal("RegisterTopic reported no change")
	}
	if r.RegisterTopic("X", []protocol.QueueData{{BrokerName: "a", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}}) {
		t.Fatal("the same queues reported as a change")
	}
	if route, _ := r.Route("X"); len(route.QueueDatas) != 1 || route.QueueDatas[0].BrokerName != "a" {
		t.Fatalf("route of X: %+v", route)
	}
}

// countingServer serves a registry and counts REGISTER_BROKER and
// REGISTER_TOPIC_IN_NAMESRV requests; with noSingle it answers the latter as a name
// server that predates it.
type countingServer struct {
	r                *Registry
	addr             string
	full, single     atomic.Int32
	mu               sync.Mutex
	lastFullTopicSet int
}

func startCountingServer(t *testing.T, noSingle bool) *countingServer {
	t.Helper()
	cs := &countingServer{r: NewRegistry(Options{Logger: testlog.New(t, "namesrv")})}
	h := remoting.HandlerFunc(func(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
		switch req.Code {
		case protocol.ReqRegisterBroker:
			var body protocol.RegisterBrokerBody
			if err := body.Decode(req.Body); err == nil {
				cs.mu.Lock()
				cs.lastFullTopicSet = len(body.TopicConfigSerializeWrapper.TopicConfigTable)
				cs.mu.Unlock()
			}
			cs.full.Add(1)
		case protocol.ReqRegisterTopicInNameSrv:
			cs.single.Add(1)
			if noSingle {
				resp.Cmd.Code = protocol.RespRequestCodeNotSupported
				resp.Cmd.SetRemark(" request type 217 not supported")
				return remoting.Reply
			}
		}
		return cs.r.ServeRemoting(c, req, resp)
	})
	srv := remoting.NewServer(h, &remoting.Options{Logger: testlog.New(t, "server")})
	srv.OnClose(cs.r.ConnClosed)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close(); cs.r.Close() })
	cs.addr = l.Addr().String()
	return cs
}

func TestRegistrarSendsSingleTopics(t *testing.T) {
	cs := startCountingServer(t, false)
	src := newSource()
	g := NewRegistrar([]string{cs.addr}, newPool(t), src.get, testlog.New(t, "registrar"))
	g.Period = time.Hour
	g.LookupTopic = src.lookup
	g.Start()
	defer closeRegistrar(t, g)
	wait.Until(t, "first registration", func() bool { return hasRoute(cs.r, "T") })

	const n = 300
	names := make([]string, n)
	for i := range names {
		names[i] = "Created-" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		src.addTopic(topicConf(names[i], 4, 6))
		g.TopicsChanged(names[i])
	}
	wait.Until(t, "every created topic routed", func() bool {
		for _, name := range names {
			if !hasRoute(cs.r, name) {
				return false
			}
		}
		return true
	})
	if f, s := cs.full.Load(), cs.single.Load(); f != 1 || s != n {
		t.Fatalf("%d full registrations and %d single-topic ones for %d created topics", f, s, n)
	}
	route, _ := cs.r.Route(names[0])
	if route.QueueDatas[0].BrokerName != "broker-x" || route.QueueDatas[0].WriteQueueNums != 4 || route.QueueDatas[0].Perm != 6 {
		t.Fatalf("route %+v", route)
	}

	// A deleted topic needs a full registration, which drops it here.
	src.removeTopic(names[0])
	g.TopicsChanged(names[0])
	wait.Until(t, "deleted topic dropped", func() bool { return !hasRoute(cs.r, names[0]) })
	if f := cs.full.Load(); f != 2 {
		t.Fatalf("%d full registrations", f)
	}
	if !hasRoute(cs.r, names[1]) {
		t.Fatal("another topic lost")
	}
}

// A name server without REGISTER_TOPIC_IN_NAMESRV gets the whole table instead, and
// is not asked for single topics again.
func TestRegistrarFallsBackToFullRegistration(t *testing.T) {
	cs := startCountingServer(t, true)
	src := newSource()
	g := NewRegistrar([]string{cs.addr}, newPool(t), src.get, testlog.New(t, "registrar"))
	g.Period = time.Hour
	g.LookupTopic = src.lookup
	g.Start()
	defer closeRegistrar(t, g)
	wait.Until(t, "first registration", func() bool { return cs.full.Load() == 1 })

	src.addTopic(topicConf("A", 4, 6))
	g.TopicsChanged("A")
	wait.Until(t, "A routed", func() bool { return hasRoute(cs.r, "A") })
	src.addTopic(topicConf("B", 4, 6))
	g.TopicsChanged("B")
	wait.Until(t, "B routed", func() bool { return hasRoute(cs.r, "B") })
	if s, f := cs.single.Load(), cs.full.Load(); s != 1 || f != 3 {
		t.Fatalf("%d single-topic attempts and %d full registrations", s, f)
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.lastFullTopicSet != 4 {
		t.Fatalf("the last full registration carried %d topics", cs.lastFullTopicSet)
	}
}

// Without LookupTopic, TopicsChanged is a full round.
func TestRegistrarTopicsChangedWithoutLookup(t *testing.T) {
	cs := startCountingServer(t, false)
	src := newSource()
	g := NewRegistrar([]string{cs.addr}, newPool(t), src.get, testlog.New(t, "registrar"))
	g.Period = time.Hour
	g.Start()
	defer closeRegistrar(t, g)
	wait.Until(t, "first registration", func() bool { return cs.full.Load() == 1 })
	src.addTopic(topicConf("A", 4, 6))
	g.TopicsChanged("A")
	wait.Until(t, "A routed", func() bool { return hasRoute(cs.r, "A") })
	if cs.single.Load() != 0 || cs.full.Load() != 2 {
		t.Fatalf("%d single, %d full", cs.single.Load(), cs.full.Load())
	}
}
