package grpcfe

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/rmqpb"
)

// member is a slave core's front end whose Master hook names master, a
// settable address ("" : none known).
type member struct {
	*env
	master atomic.Pointer[string]
}

func (m *member) MasterChanged() { m.srv.MasterChanged() }

func (m *member) setMaster(addr string) { m.master.Store(&addr) }

// newMember starts a slave core and its front end forwarding to master;
// front changes its options further.
func newMember(t testing.TB, master string, front func(*Options)) *member {
	m := &member{}
	m.setMaster(master)
	m.env = newEnvWith(t, func(o *core.Options) {
		o.Role = core.RoleSlave
		o.BrokerID = 1
	}, func(o *Options) {
		o.Master = func() (string, bool) { return *m.master.Load(), false }
		if front != nil {
			front(o)
		}
	}, nil)
	return m
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// stored is how many messages topic's queues on e's core hold.
func stored(e *env, topic string) int64 {
	cfg, ok := e.core.TopicConfig(topic)
	if !ok {
		return 0
	}
	var n int64
	for q := int32(0); q < cfg.ReadQueueNums; q++ {
		n += e.core.MaxOffset(topic, q)
	}
	return n
}

func runtimeInt(t *testing.T, s *Server, key string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s.RuntimeInfo()[key], 10, 64)
	if err != nil {
		t.Fatalf("RuntimeInfo %s: %v", key, err)
	}
	return n
}

func TestForwardToMaster(t *testing.T) {
	master := newEnv(t, nil)
	slave := newMember(t, master.srv.opts.Addr, nil)
	if r := master.route("T"); r.Status.Code != rmqpb.Code_OK {
		t.Fatalf("route on the master: %v", r)
	}

	// A send through the slave is stored by the master.
	ent := slave.send(msg("T", "ID-1", "hello"))
	if ent.MessageId != "ID-1" {
		t.Fatalf("entry: %v", ent)
	}
	master.dispatched("T", 1)
	if n := stored(slave.env, "T"); n != 0 {
		t.Fatalf("the slave's core stored %d messages", n)
	}

	// Receive (the stream relayed), change invisibility, ack.
	got, st := slave.receive("G", "T", 32, 30*time.Second, arrival, nil)
	if st.Code != rmqpb.Code_OK || len(got) != 1 || string(got[0].Body) != "hello" {
		t.Fatalf("receive through the slave: %v %v", got, st)
	}
	ci, err := slave.cli.ChangeInvisibleDuration(slave.ctx("consumer-1", callTimeout), &rmqpb.ChangeInvisibleDurationRequest{
		Group: res("G"), Topic: res("T"), ReceiptHandle: got[0].SystemProperties.GetReceiptHandle(),
		InvisibleDuration: durationpb.New(time.Minute), MessageId: "ID-1"})
	if err != nil || ci.Status.Code != rmqpb.Code_OK || ci.ReceiptHandle == "" {
		t.Fatalf("ChangeInvisibleDuration: %v %v", ci, err)
	}
	got[0].SystemProperties.ReceiptHandle = &ci.ReceiptHandle
	if c := slave.ack("G", got[0]); c != rmqpb.Code_OK {
		t.Fatalf("ack through the slave: %v", c)
	}
	// Acked on the master: nothing left for the group there.
	if got, st := master.receive("G", "T", 32, time.Second, 100*time.Millisecond, nil); len(got) != 0 {
		t.Fatalf("after the ack, the master still hands out %v (%v)", got, st)
	}

	// A transaction: the half message and its commit through the slave;
	// the master's check comes on the telemetry stream the slave relays.
	master.typedTopic("X", "TRANSACTION")
	tel, err := slave.cli.Telemetry(slave.ctx("producer-1", callTimeout))
	if err != nil {
		t.Fatal(err)
	}
	pt := rmqpb.ClientType_PRODUCER
	if err := tel.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		ClientType: &pt, PubSub: &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{Topics: []*rmqpb.Resource{res("X")}}}}}}); err != nil {
		t.Fatal(err)
	}
	if reply, err := tel.Recv(); err != nil || reply.GetSettings().GetPublishing().GetMaxBodySize() != 1<<20 {
		t.Fatalf("settings reply through the slave: %v %v", reply, err)
	}
	wait.Until(t, "the master knows the client", func() bool {
		for _, id := range master.srv.Clients() {
			if id == "producer-1" {
				return true
			}
		}
		return false
	})
	tx := msg("X", "TX-1", "committed")
	tx.SystemProperties.MessageType = rmqpb.MessageType_TRANSACTION
	half := slave.send(tx)
	if half.TransactionId == "" {
		t.Fatalf("no transaction id: %v", half)
	}
	end, err := slave.cli.EndTransaction(slave.ctx("producer-1", callTimeout), &rmqpb.EndTransactionRequest{Topic: res("X"),
		MessageId: "TX-1", TransactionId: half.TransactionId, Resolution: rmqpb.TransactionResolution_COMMIT,
		Source: rmqpb.TransactionSource_SOURCE_CLIENT})
	if err != nil || end.Status.Code != rmqpb.Code_OK {
		t.Fatalf("EndTransaction through the slave: %v %v", end, err)
	}
	if got, st := master.receive("G", "X", 32, time.Minute, arrival, nil); len(got) != 1 || string(got[0].Body) != "committed" {
		t.Fatalf("the committed message on the master: %v %v", got, st)
	}
	if err := tel.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := tel.Recv(); err != nil {
			if err != io.EOF {
				t.Fatalf("telemetry end: %v", err)
			}
			break
		}
	}

	if n := runtimeInt(t, slave.srv, "grpcForwarded"); n < 7 {
		t.Fatalf("grpcForwarded %d", n)
	}
	wait.Equal(t, "no call forwarded any more", int64(0), func() int64 { return runtimeInt(t, slave.srv, "grpcForwarding") })
}

func TestForwardedTransactionCheck(t *testing.T) {
	master := newEnv(t, func(o *core.Options) {
		o.TransactionTimeout = 200 * time.Millisecond
		o.TransactionCheckInterval = 200 * time.Millisecond
	})
	slave := newMember(t, master.srv.opts.Addr, nil)
	master.typedTopic("X", "TRANSACTION")
	tel, err := slave.cli.Telemetry(slave.ctx("producer-1", callTimeout))
	if err != nil {
		t.Fatal(err)
	}
	pt := rmqpb.ClientType_PRODUCER
	if err := tel.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
		ClientType: &pt, PubSub: &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{Topics: []*rmqpb.Resource{res("X")}}}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := tel.Recv(); err != nil {
		t.Fatal(err)
	}
	tx := msg("X", "checked", "checked")
	tx.SystemProperties.MessageType = rmqpb.MessageType_TRANSACTION
	u := slave.send(tx)
	var chk *rmqpb.RecoverOrphanedTransactionCommand
	for chk == nil {
		cmd, err := tel.Recv()
		if err != nil {
			t.Fatal(err)
		}
		chk = cmd.GetRecoverOrphanedTransactionCommand()
	}
	if chk.TransactionId != u.TransactionId || chk.Message.GetSystemProperties().GetMessageId() != "checked" {
		t.Fatalf("check: %v (sent %v)", chk, u)
	}
}

func TestForwardMasterUnreachable(t *testing.T) {
	// Each call waits 100 ms for another master, then says it found none.
	slave := newMember(t, deadAddr(t), func(o *Options) { o.ForwardRetryWait = 100 * time.Millisecond })
	r, err := slave.cli.SendMessage(slave.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("T", "ID-1", "x")}})
	if err != nil || r.Status.Code != rmqpb.Code_PROXY_TIMEOUT {
		t.Fatalf("send to an unreachable master: %v %v", r, err)
	}
	got, st := slave.receive("G", "T", 1, time.Second, time.Second, nil)
	if len(got) != 0 || st.Code != rmqpb.Code_PROXY_TIMEOUT {
		t.Fatalf("receive from an unreachable master: %v %v", got, st)
	}
	a, err := slave.cli.AckMessage(slave.ctx("consumer-1", callTimeout), &rmqpb.AckMessageRequest{Group: res("G"), Topic: res("T"),
		Entries: []*rmqpb.AckMessageEntry{{MessageId: "ID-1", ReceiptHandle: "0 0 0 0 b"}}})
	if err != nil || a.Status.Code != rmqpb.Code_PROXY_TIMEOUT {
		t.Fatalf("ack to an unreachable master: %v %v", a, err)
	}
	if n := runtimeInt(t, slave.srv, "grpcForwardFailures"); n != 3 {
		t.Fatalf("grpcForwardFailures %d", n)
	}
}

func TestForwardFollowsTheMaster(t *testing.T) {
	a := newEnv(t, nil)
	b := newEnv(t, nil)
	slave := newMember(t, a.srv.opts.Addr, func(o *Options) { o.ForwardRetryWait = -1 })
	slave.send(msg("T", "1", "to a"))
	a.dispatched("T", 1)
	slave.setMaster(b.srv.opts.Addr)
	slave.send(msg("T", "2", "to b"))
	b.dispatched("T", 1)
	if n := stored(a, "T"); n != 1 {
		t.Fatalf("the old master holds %d messages", n)
	}
	// The master goes away: the next call says so, and once the hook names
	// the new one, calls go there.
	slave.setMaster(deadAddr(t))
	r, err := slave.cli.SendMessage(slave.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("T", "3", "lost")}})
	if err != nil || r.Status.Code != rmqpb.Code_PROXY_TIMEOUT {
		t.Fatalf("send to a gone master: %v %v", r, err)
	}
	slave.setMaster(a.srv.opts.Addr)
	slave.send(msg("T", "4", "to a again"))
	a.dispatched("T", 2)
}

func TestForwardBound(t *testing.T) {
	master := newEnv(t, nil)
	slave := newMember(t, master.srv.opts.Addr, func(o *Options) { o.MaxForwarded = 1 })
	master.route("T")
	// A receive held on the master takes the one slot.
	held := make(chan *rmqpb.Status, 1)
	go func() {
		req := &rmqpb.ReceiveMessageRequest{Group: res("G"), MessageQueue: &rmqpb.MessageQueue{Topic: res("T"), Id: -1},
			FilterExpression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"}, BatchSize: 1,
			InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(arrival)}
		st, err := slave.cli.ReceiveMessage(slave.ctx("consumer-1", arrival+callTimeout), req)
		if err != nil {
			held <- status(rmqpb.Code_INTERNAL_SERVER_ERROR, err.Error())
			return
		}
		var last *rmqpb.Status
		for {
			r, err := st.Recv()
			if err != nil {
				break
			}
			if s := r.GetStatus(); s != nil {
				last = s
			}
		}
		held <- last
	}()
	wait.Equal(t, "one call forwarded", int64(1), func() int64 { return runtimeInt(t, slave.srv, "grpcForwarding") })
	r, err := slave.cli.SendMessage(slave.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("T", "1", "x")}})
	if err != nil || r.Status.Code != rmqpb.Code_TOO_MANY_REQUESTS {
		t.Fatalf("send beyond the bound: %v %v", r, err)
	}
	// A message sent to the master ends the held receive; the slot frees.
	master.send(msg("T", "2", "y"))
	if st := <-held; st.GetCode() != rmqpb.Code_OK {
		t.Fatalf("held receive: %v", st)
	}
	wait.Equal(t, "no call forwarded", int64(0), func() int64 { return runtimeInt(t, slave.srv, "grpcForwarding") })
	slave.send(msg("T", "3", "z"))
}

func TestNoMasterServedLocally(t *testing.T) {
	slave := newMember(t, "", nil)
	r, err := slave.cli.SendMessage(slave.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("T", "1", "x")}})
	// The slave core's own refusal of a send, as its front ends map it.
	var res core.SendResult
	refusal := slave.core.Send(&core.SendRequest{Topic: []byte("T"), QueueID: -1, Body: []byte("x")}, &res)
	if refusal == nil {
		t.Fatal("the slave core took a send")
	}
	if err != nil || r.Status.Code != errStatus(refusal).Code {
		t.Fatalf("send to a slave without a master: %v %v, want %v", r, err, errStatus(refusal))
	}
	if n := runtimeInt(t, slave.srv, "grpcForwarded"); n != 0 {
		t.Fatalf("grpcForwarded %d", n)
	}
}

// Two members that each name the other master (a moment of a failover):
// a call is forwarded once, then served by the core it reached.
func TestForwardNeverTwice(t *testing.T) {
	a := newMember(t, "", nil)
	b := newMember(t, a.srv.opts.Addr, nil)
	a.setMaster(b.srv.opts.Addr)
	r, err := a.cli.SendMessage(a.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("T", "1", "x")}})
	if err != nil || r.Status.Code == rmqpb.Code_OK || r.Status.Code == rmqpb.Code_PROXY_TIMEOUT {
		t.Fatalf("send: %v %v", r, err)
	}
	if fa, fb := runtimeInt(t, a.srv, "grpcForwarded"), runtimeInt(t, b.srv, "grpcForwarded"); fa != 1 || fb != 0 {
		t.Fatalf("forwarded by a %d, by b %d", fa, fb)
	}
}

func TestRouteNamesEveryMember(t *testing.T) {
	others := []string{"127.0.0.1:18081", "127.0.0.2:18081"}
	var self string
	e := newEnvWith(t, nil, func(o *Options) {
		self = o.Addr
		o.Members = func() []string { return append([]string{others[0], self}, others[1:]...) }
	}, nil)
	addrs := func(r *rmqpb.QueryRouteResponse) []string {
		t.Helper()
		if r.Status.Code != rmqpb.Code_OK || len(r.MessageQueues) == 0 {
			t.Fatalf("QueryRoute: %v", r)
		}
		var out []string
		for _, a := range r.MessageQueues[0].Broker.Endpoints.Addresses {
			out = append(out, net.JoinHostPort(a.Host, strconv.Itoa(int(a.Port))))
		}
		return out
	}
	if got, want := fmt.Sprint(addrs(e.route("T"))), fmt.Sprint([]string{self, others[0], others[1]}); got != want {
		t.Fatalf("endpoints %s, want %s", got, want)
	}
	// The Node.js SDK (language HTTP) takes one address: the member asked.
	ctx := metadata.AppendToOutgoingContext(e.ctx("node", callTimeout), metaLanguage, "HTTP")
	r, err := e.cli.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res("T")})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(addrs(r)); got != fmt.Sprint([]string{self}) {
		t.Fatalf("endpoints for Node.js %s", got)
	}
	a, err := e.cli.QueryAssignment(e.ctx("c", callTimeout), &rmqpb.QueryAssignmentRequest{Topic: res("T"), Group: res("G")})
	if err != nil || len(a.Assignments) != 1 || len(a.Assignments[0].MessageQueue.Broker.Endpoints.Addresses) != 3 {
		t.Fatalf("QueryAssignment: %v %v", a, err)
	}
}

// On a member that is not the master, the master comes first (a client
// that uses the first address saves the hop); Node.js still gets the
// member it asked.
func TestRouteNamesTheMasterFirst(t *testing.T) {
	master := newEnv(t, nil)
	var members []string
	slave := newMember(t, master.srv.opts.Addr, func(o *Options) {
		members = []string{master.srv.opts.Addr, o.Addr}
		o.Members = func() []string { return members }
	})
	// The slave follows the master's topics (SyncTopics, as replication's
	// table sync does).
	master.route("T")
	if slave.core.Replication().SyncTopics(master.core.Replication().TopicTable()) == 0 {
		t.Fatal("the slave followed no topic")
	}
	eps := func(ctx context.Context) string {
		t.Helper()
		r, err := slave.cli.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res("T")})
		if err != nil || r.Status.Code != rmqpb.Code_OK {
			t.Fatalf("QueryRoute: %v %v", r, err)
		}
		var out []string
		for _, a := range r.MessageQueues[0].Broker.Endpoints.Addresses {
			out = append(out, net.JoinHostPort(a.Host, strconv.Itoa(int(a.Port))))
		}
		return fmt.Sprint(out)
	}
	if got, want := eps(slave.ctx("c", callTimeout)), fmt.Sprint([]string{master.srv.opts.Addr, slave.srv.opts.Addr}); got != want {
		t.Fatalf("endpoints %s, want %s", got, want)
	}
	node := metadata.AppendToOutgoingContext(slave.ctx("node", callTimeout), metaLanguage, "HTTP")
	if got, want := eps(node), fmt.Sprint([]string{slave.srv.opts.Addr}); got != want {
		t.Fatalf("endpoints for Node.js %s, want %s", got, want)
	}
}

// A topic the slave does not know yet is asked of the master (a slave
// never creates one: here its core's auto-creation is off).
func TestRouteOfAnUnknownTopicFromTheMaster(t *testing.T) {
	master := newEnv(t, nil)
	slave := &member{}
	slave.setMaster(master.srv.opts.Addr)
	slave.env = newEnvWith(t, func(o *core.Options) {
		o.Role, o.BrokerID, o.DisableAutoCreateTopic = core.RoleSlave, 1, true
	}, func(o *Options) {
		o.Master = func() (string, bool) { return *slave.master.Load(), false }
	}, nil)
	r := slave.route("Fresh")
	if r.Status.Code != rmqpb.Code_OK || len(r.MessageQueues) != core.DefaultTopicQueues {
		t.Fatalf("route through the slave: %v", r)
	}
	if _, ok := master.core.TopicConfig("Fresh"); !ok {
		t.Fatal("the master did not create the topic")
	}
	if _, ok := slave.core.TopicConfig("Fresh"); ok {
		t.Fatal("the slave created the topic")
	}
	// Without a master, the slave's own answer.
	slave.setMaster("")
	if r := slave.route("Other"); r.Status.Code != rmqpb.Code_TOPIC_NOT_FOUND {
		t.Fatalf("route without a master: %v", r)
	}
}

func TestForwardCarriesMetadataAndDeadline(t *testing.T) {
	seen := make(chan metadata.MD, 4)
	master := newEnvWith(t, nil, func(o *Options) {
		o.ServerOptions = append(o.ServerOptions, grpc.ChainStreamInterceptor(
			func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
				md, _ := metadata.FromIncomingContext(ss.Context())
				select {
				case seen <- md:
				default:
				}
				return h(srv, ss)
			}))
	}, nil)
	slave := newMember(t, master.srv.opts.Addr, nil)
	master.route("T")
	// A receive that would hold 20 s, within a call of 1 s: the master
	// answers before the caller's deadline, which it learnt.
	ctx := metadata.AppendToOutgoingContext(slave.ctx("consumer-1", time.Second),
		metaLanguage, "GO", "authorization", "MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature=x")
	req := &rmqpb.ReceiveMessageRequest{Group: res("G"), MessageQueue: &rmqpb.MessageQueue{Topic: res("T"), Id: -1},
		FilterExpression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"}, BatchSize: 1,
		InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(20 * time.Second)}
	st, err := slave.cli.ReceiveMessage(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var last *rmqpb.Status
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		last = r.GetStatus()
	}
	if last.GetCode() != rmqpb.Code_MESSAGE_NOT_FOUND {
		t.Fatalf("status %v", last)
	}
	md := <-seen
	for k, want := range map[string]string{metaClientID: "consumer-1", metaLanguage: "GO",
		"authorization": "MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature=x",
		metaForwarded:   slave.srv.opts.Addr} {
		if got := md.Get(k); len(got) != 1 || got[0] != want {
			t.Errorf("the master saw %s %q, want %q", k, got, want)
		}
	}
}

func TestMasterChangedEndsTelemetry(t *testing.T) {
	master := newEnv(t, nil)
	slave := newMember(t, master.srv.opts.Addr, nil)
	open := func(e *env) rmqpb.MessagingService_TelemetryClient {
		t.Helper()
		tel, err := e.cli.Telemetry(e.ctx("producer-1", callTimeout))
		if err != nil {
			t.Fatal(err)
		}
		pt := rmqpb.ClientType_PRODUCER
		if err := tel.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
			ClientType: &pt, PubSub: &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{Topics: []*rmqpb.Resource{res("X")}}}}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := tel.Recv(); err != nil {
			t.Fatal(err)
		}
		return tel
	}
	ended := func(tel rmqpb.MessagingService_TelemetryClient) {
		t.Helper()
		for {
			if _, err := tel.Recv(); err != nil {
				if err != io.EOF {
					t.Fatalf("the stream ended with %v", err)
				}
				return
			}
		}
	}
	// Relayed: ends when the master changes.
	relayed := open(slave.env)
	other := newEnv(t, nil)
	slave.setMaster(other.srv.opts.Addr)
	slave.MasterChanged()
	ended(relayed)
	// Served locally while this member had no master; it ends when the
	// member learns of one.
	slave.setMaster("")
	local := open(slave.env)
	slave.setMaster(master.srv.opts.Addr)
	slave.MasterChanged()
	ended(local)
	if n := len(slave.srv.Clients()); n != 0 {
		t.Fatalf("the slave still has %d clients", n)
	}
}

// Shutdown ends a receive held on the master through this member, as it
// ends the receives it holds itself.
func TestShutdownEndsForwardedReceive(t *testing.T) {
	master := newEnv(t, nil)
	slave := newMember(t, master.srv.opts.Addr, nil)
	master.route("T")
	done := make(chan error, 1)
	go func() {
		req := &rmqpb.ReceiveMessageRequest{Group: res("G"), MessageQueue: &rmqpb.MessageQueue{Topic: res("T"), Id: -1},
			FilterExpression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"}, BatchSize: 1,
			InvisibleDuration: durationpb.New(time.Minute), LongPollingTimeout: durationpb.New(arrival)}
		st, err := slave.cli.ReceiveMessage(slave.ctx("consumer-1", 2*arrival), req)
		if err != nil {
			done <- err
			return
		}
		for {
			if _, err := st.Recv(); err != nil {
				done <- nil
				return
			}
		}
	}()
	wait.Equal(t, "one call forwarded", int64(1), func() int64 { return runtimeInt(t, slave.srv, "grpcForwarding") })
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	if err := slave.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown with a forwarded receive held: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSendMessageForwarded is BenchmarkSendMessage through a member
// that forwards to the master: the difference is the hop's cost.
func BenchmarkSendMessageForwarded(b *testing.B) {
	master := newEnvB(b)
	e := newMember(b, master.srv.opts.Addr, nil)
	body := make([]byte, 1024)
	master.route("Bench")
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := e.ctx("bench", time.Minute)
		m := &rmqpb.Message{Topic: res("Bench"), Body: body, SystemProperties: &rmqpb.SystemProperties{
			BodyEncoding: rmqpb.Encoding_IDENTITY, MessageType: rmqpb.MessageType_NORMAL, BornTimestamp: timestamppb.Now()}}
		req := &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{m}}
		for pb.Next() {
			m.SystemProperties.MessageId = "ID" + strconv.FormatInt(seq.Add(1), 16)
			r, err := e.cli.SendMessage(ctx, req)
			if err != nil || r.Status.Code != rmqpb.Code_OK {
				b.Errorf("send: %v %v", r, err)
				return
			}
		}
	})
}

// A call whose master is out of reach waits for the owner to name the
// next one and goes there: a send, and a receive (nothing came from the
// old master, so it is sent again).
func TestForwardWaitsForTheNextMaster(t *testing.T) {
	master := newEnv(t, nil)
	slave := newMember(t, deadAddr(t), nil)
	master.route("T")
	sent := make(chan *rmqpb.SendMessageResponse, 1)
	go func() {
		r, err := slave.cli.SendMessage(slave.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("T", "1", "x")}})
		if err != nil {
			r = &rmqpb.SendMessageResponse{Status: status(rmqpb.Code_INTERNAL_SERVER_ERROR, err.Error())}
		}
		sent <- r
	}()
	received := make(chan []*rmqpb.Message, 1)
	go func() {
		got, _ := slave.receive("G", "T", 1, time.Minute, arrival, nil)
		received <- got
	}()
	wait.Equal(t, "two calls waiting for a master", int64(2), func() int64 { return runtimeInt(t, slave.srv, "grpcForwarding") })
	slave.setMaster(master.srv.opts.Addr)
	slave.MasterChanged()
	if r := <-sent; r.Status.Code != rmqpb.Code_OK {
		t.Fatalf("send: %v", r)
	}
	if got := <-received; len(got) != 1 || string(got[0].Body) != "x" {
		t.Fatalf("receive: %v", got)
	}
	if n := runtimeInt(t, slave.srv, "grpcForwardRetries"); n < 2 {
		t.Fatalf("grpcForwardRetries %d", n)
	}
	if n := stored(slave.env, "T"); n != 0 {
		t.Fatalf("the slave stored %d", n)
	}
}

// A member that becomes the master while a call waits for one serves the
// call itself.
func TestForwardServedHereOnceMaster(t *testing.T) {
	dead := deadAddr(t)
	var master atomic.Pointer[string]
	master.Store(&dead)
	var self string
	e := newEnvWith(t, nil, func(o *Options) {
		self = o.Addr
		o.Master = func() (string, bool) { a := *master.Load(); return a, a == self }
	}, nil)
	sent := make(chan *rmqpb.SendMessageResponse, 1)
	go func() {
		r, err := e.cli.SendMessage(e.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("T", "1", "x")}})
		if err != nil {
			r = &rmqpb.SendMessageResponse{Status: status(rmqpb.Code_INTERNAL_SERVER_ERROR, err.Error())}
		}
		sent <- r
	}()
	wait.Equal(t, "a call waiting for a master", int64(1), func() int64 { return runtimeInt(t, e.srv, "grpcForwarding") })
	master.Store(&self)
	e.srv.MasterChanged()
	if r := <-sent; r.Status.Code != rmqpb.Code_OK {
		t.Fatalf("send: %v", r)
	}
	e.dispatched("T", 1)
}
