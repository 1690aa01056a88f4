package namesrv

import (
	"context"
	"hash/crc32"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// brokerSource is a broker's changing registration, as a Registrar's source reads it.
type brokerSource struct {
	mu  sync.Mutex
	reg BrokerRegistration
}

func (s *brokerSource) get() BrokerRegistration {
	s.mu.Lock()
	defer s.mu.Unlock()
	reg := s.reg
	reg.Topics = append([]protocol.TopicConfig(nil), s.reg.Topics...)
	return reg
}

func (s *brokerSource) addTopic(tc protocol.TopicConfig) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reg.Topics = append(s.reg.Topics, tc)
	s.reg.DataVersion.Counter++
}

func newSource() *brokerSource {
	return &brokerSource{reg: BrokerRegistration{ClusterName: "DefaultCluster", BrokerName: "broker-x",
		BrokerAddr: "10.1.1.1:10911", HAServerAddr: "10.1.1.1:10912",
		Topics: []protocol.TopicConfig{topicConf("TBW102", 8, 7), topicConf("T", 4, 6)}}}
}

// results counts a Registrar's outcomes per address.
type results struct {
	mu   sync.Mutex
	ok   map[string]int
	errs map[string]int
}

func (r *results) record(addr string, _ protocol.RegisterBrokerResponse, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ok == nil {
		r.ok, r.errs = map[string]int{}, map[string]int{}
	}
	if err != nil {
		r.errs[addr]++
	} else {
		r.ok[addr]++
	}
}

func (r *results) okCount(addr string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ok[addr]
}

func (r *results) errCount(addr string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs[addr]
}

func newPool(t testing.TB) *remoting.Pool {
	p := remoting.NewPool(&remoting.ClientOptions{Options: remoting.Options{Logger: testlog.New(t, "pool")}})
	t.Cleanup(func() { p.Close() })
	return p
}

func closeRegistrar(t testing.TB, g *Registrar) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return g.Close(ctx)
}

func TestRegistrarRegistersPeriodicallyAndUnregisters(t *testing.T) {
	s := startServer(t, Options{})
	src := newSource()
	var res results
	g := NewRegistrar([]string{s.addr}, newPool(t), src.get, testlog.New(t, "registrar"))
	g.Period = 100 * time.Millisecond
	g.OnResult = res.record
	g.Start()
	g.Start() // harmless

	wait.Until(t, "first registration", func() bool { return hasRoute(s.r, "T") })
	route, _ := s.r.Route("TBW102")
	if route.QueueDatas[0].Perm != 7 || route.BrokerDatas[0].BrokerAddrs[0] != "10.1.1.1:10911" {
		t.Fatalf("TBW102 route %+v", route)
	}
	wait.Until(t, "periodic registrations", func() bool { return res.okCount(s.addr) >= 4 })

	// A new topic reaches the name server with the next period, without Trigger.
	src.addTopic(topicConf("Later", 2, 6))
	wait.Until(t, "new topic", func() bool { return hasRoute(s.r, "Later") })

	if err := closeRegistrar(t, g); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if hasRoute(s.r, "T") || len(s.r.ClusterInfo().BrokerAddrTable) != 0 {
		t.Fatal("still registered after Close")
	}
	if err := closeRegistrar(t, g); err != ErrRegistrarClosed {
		t.Fatalf("second Close: %v", err)
	}
	// Close waited for the registrar's goroutines: none is left to register.
	n := res.okCount(s.addr)
	if g := registrarGoroutines(); len(g) > 0 {
		t.Fatalf("registrar goroutines after Close:\n%s", strings.Join(g, "\n\n"))
	}
	if res.okCount(s.addr) != n || hasRoute(s.r, "T") {
		t.Fatal("registered after Close")
	}
	if res.errCount(s.addr) != 0 {
		t.Fatalf("%d failed registrations", res.errCount(s.addr))
	}
}

func TestRegistrarTrigger(t *testing.T) {
	s := startServer(t, Options{})
	src := newSource()
	var res results
	g := NewRegistrar([]string{s.addr}, newPool(t), src.get, nil)
	g.Period = time.Hour
	g.OnResult = res.record
	g.Start()
	defer closeRegistrar(t, g)
	wait.Until(t, "first registration", func() bool { return res.okCount(s.addr) == 1 })
	src.addTopic(topicConf("Created", 4, 6))
	g.Trigger()
	wait.Until(t, "triggered registration", func() bool { return res.okCount(s.addr) == 2 })
	if !hasRoute(s.r, "Created") {
		t.Fatal("the triggered registration lacks the new topic")
	}
}

// The name server drops a broker whose connection closes; the registrar notices the
// closed connection and registers again without waiting for its period.
func TestRegistrarReregistersAfterConnectionLoss(t *testing.T) {
	s := startServer(t, Options{})
	src := newSource()
	var res results
	pool := newPool(t)
	g := NewRegistrar([]string{s.addr}, pool, src.get, testlog.New(t, "registrar"))
	g.Period = time.Hour
	g.OnResult = res.record
	g.Start()
	defer closeRegistrar(t, g)
	// The registrar has the answer (not only the name server the request):
	// the connection closed below is one a registration succeeded over.
	wait.Equal(t, "first registration answered", 1, func() int { return res.okCount(s.addr) })

	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	cl, err := pool.Get(ctx, s.addr)
	if err != nil {
		t.Fatal(err)
	}
	cl.Close()
	wait.Until(t, "drop on close", func() bool { return !hasRoute(s.r, "T") })
	wait.Equal(t, "re-registration", 2, func() int { return res.okCount(s.addr) })
	if !hasRoute(s.r, "T") {
		t.Fatal("not routed after re-registration")
	}
}

// A registration whose connection closes before its answer comes (the name
// server took it, then dropped it with the connection) is sent again soon over
// a new connection, not at the next period.
func TestRegistrarRetriesRegistrationLostWithItsConnection(t *testing.T) {
	r := NewRegistry(Options{Logger: testlog.New(t, "namesrv")})
	defer r.Close()
	var registrations atomic.Int32
	h := remoting.HandlerFunc(func(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
		if req.Code == protocol.ReqRegisterBroker && registrations.Add(1) == 1 {
			r.ServeRemoting(c, req, resp) // taken...
			c.Close()                     // ...and the answer lost with the connection
			return remoting.NoReply
		}
		return r.ServeRemoting(c, req, resp)
	})
	srv := remoting.NewServer(h, &remoting.Options{Logger: testlog.New(t, "server")})
	srv.OnClose(r.ConnClosed)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()

	var res results
	g := NewRegistrar([]string{l.Addr().String()}, newPool(t), newSource().get, testlog.New(t, "registrar"))
	g.Period = time.Hour
	g.OnResult = res.record
	g.Start()
	defer closeRegistrar(t, g)
	wait.Equal(t, "the registration sent again and answered", 1, func() int { return res.okCount(l.Addr().String()) })
	if n := res.errCount(l.Addr().String()); n != 1 {
		t.Fatalf("%d failed registrations, want the one whose answer was lost", n)
	}
	if !hasRoute(r, "T") {
		t.Fatal("not routed after the second registration")
	}
}

// The registrar's requests carry a correct bodyCrc32 over a JSON body the Java name
// server would read, and the registry checks it.
func TestRegistrarRequestShape(t *testing.T) {
	r := NewRegistry(Options{Logger: testlog.New(t, "namesrv")})
	defer r.Close()
	var mu sync.Mutex
	var seen []protocol.RegisterBrokerRequest
	var bodies [][]byte
	h := remoting.HandlerFunc(func(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
		if req.Code == protocol.ReqRegisterBroker {
			var hdr protocol.RegisterBrokerRequest
			if err := hdr.Decode(&req.Ext); err == nil {
				mu.Lock()
				seen = append(seen, hdr)
				bodies = append(bodies, append([]byte(nil), req.Body...))
				mu.Unlock()
			}
		}
		return r.ServeRemoting(c, req, resp)
	})
	srv := remoting.NewServer(h, &remoting.Options{Logger: testlog.New(t, "server")})
	srv.OnClose(r.ConnClosed)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()

	src := newSource()
	g := NewRegistrar([]string{l.Addr().String()}, newPool(t), src.get, testlog.New(t, "registrar"))
	g.Start()
	wait.Until(t, "registration", func() bool { return hasRoute(r, "T") })
	if err := closeRegistrar(t, g); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	hdr, body := seen[0], bodies[0]
	if hdr.BodyCRC32 == 0 || hdr.BodyCRC32 != int32(crc32.ChecksumIEEE(body)&0x7FFFFFFF) || hdr.Compressed {
		t.Fatalf("header %+v for body %s", hdr, body)
	}
	if hdr.BrokerName != "broker-x" || hdr.BrokerAddr != "10.1.1.1:10911" || hdr.ClusterName != "DefaultCluster" ||
		hdr.HAServerAddr != "10.1.1.1:10912" || hdr.BrokerID != 0 {
		t.Fatalf("header %+v", hdr)
	}
	var rb protocol.RegisterBrokerBody
	if err := rb.Decode(body); err != nil {
		t.Fatal(err)
	}
	tc := rb.TopicConfigSerializeWrapper.TopicConfigTable["TBW102"]
	if tc == nil || tc.Perm != 7 || tc.TopicFilterType != "SINGLE_TAG" || rb.FilterServerList == nil {
		t.Fatalf("body %s", body)
	}
	if !strings.Contains(string(body), `"filterServerList":[]`) {
		t.Fatalf("body without filterServerList: %s", body)
	}
}

// Three name servers, one down: the other two get the registration and the
// unregistration; Close reports the unreachable one.
func TestRegistrarWithUnreachableNameServer(t *testing.T) {
	s, s2 := startServer(t, Options{}), startServer(t, Options{})
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close()

	var res results
	g := NewRegistrar([]string{deadAddr, s.addr, s2.addr}, newPool(t), newSource().get, testlog.New(t, "registrar"))
	g.Period = 50 * time.Millisecond
	g.Timeout = 2 * time.Second
	g.OnResult = res.record
	g.Start()
	wait.Until(t, "registration with the live ones", func() bool { return hasRoute(s.r, "T") && hasRoute(s2.r, "T") })
	wait.Until(t, "failures reported", func() bool { return res.errCount(deadAddr) >= 2 })
	err = closeRegistrar(t, g)
	if err == nil || !strings.Contains(err.Error(), deadAddr) || strings.Contains(err.Error(), s.addr) || strings.Contains(err.Error(), s2.addr) {
		t.Fatalf("Close: %v", err)
	}
	if hasRoute(s.r, "T") || hasRoute(s2.r, "T") {
		t.Fatal("a live name server still routes the broker")
	}
}

func TestRegistrarCloseWithoutStart(t *testing.T) {
	var calls atomic.Int32
	g := NewRegistrar([]string{"127.0.0.1:1"}, newPool(t), func() BrokerRegistration {
		calls.Add(1)
		return BrokerRegistration{}
	}, nil)
	if err := closeRegistrar(t, g); err != nil {
		t.Fatal(err)
	}
	g.Start() // after Close: nothing happens
	if g.started {
		t.Fatal("Start after Close started the registrar")
	}
	if r := registrarGoroutines(); len(r) > 0 {
		t.Fatalf("registrar goroutines after Close:\n%s", strings.Join(r, "\n\n"))
	}
	if calls.Load() != 0 {
		t.Fatal("source called")
	}
}

// Close while a registration is in flight cancels that exchange; the cancelled
// exchange is not reported to OnResult as a failure, and the unregistration still
// goes out.
func TestRegistrarCloseDuringRegistration(t *testing.T) {
	r := NewRegistry(Options{Logger: testlog.New(t, "namesrv")})
	defer r.Close()
	held := make(chan struct{}, 1)
	var unregistered atomic.Int32
	h := remoting.HandlerFunc(func(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
		switch req.Code {
		case protocol.ReqRegisterBroker:
			select {
			case held <- struct{}{}:
			default:
			}
			return remoting.NoReply // the answer never comes
		case protocol.ReqUnregisterBroker:
			unregistered.Add(1)
		}
		return r.ServeRemoting(c, req, resp)
	})
	srv := remoting.NewServer(h, &remoting.Options{Logger: testlog.New(t, "server")})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	defer srv.Close()

	var res results
	g := NewRegistrar([]string{l.Addr().String()}, newPool(t), newSource().get, testlog.New(t, "registrar"))
	g.OnResult = res.record
	g.Start()
	select {
	case <-held:
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("no registration reached the name server")
	}
	if err := closeRegistrar(t, g); err != nil {
		t.Fatalf("Close: %v", err)
	}
	addr := l.Addr().String()
	if res.errCount(addr) != 0 || res.okCount(addr) != 0 {
		t.Fatalf("cancelled exchange reported: %d ok, %d errors", res.okCount(addr), res.errCount(addr))
	}
	if unregistered.Load() != 1 {
		t.Fatalf("%d unregistrations", unregistered.Load())
	}
}
