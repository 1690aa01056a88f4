package grpcfe

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/rmqpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// testACL grants app Pub and Sub on orders* and Sub on group billing; ops
// is a super user.
const testACL = `users:
  - {username: app, password: app-secret}
  - {username: ops, password: ops-secret, userType: Super}
acls:
  - subject: User:app
    policies:
      - entries:
          - {resource: "Topic:orders*", actions: [Pub, Sub], decision: Allow}
          - {resource: "Group:billing", actions: [Sub], decision: Allow}
          - {resource: "Topic:orders-secret", actions: [All], decision: Deny}
`

// signer signs every call as a RocketMQ 5 client does.
type signer struct {
	ak  string
	key *auth.Key
}

func (s signer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	a, dt := s.key.SignV2(s.ak, time.Now())
	return map[string]string{auth.HeaderAuthorization: a, auth.HeaderDateTime: dt}, nil
}

func (signer) RequireTransportSecurity() bool { return false }

func signedBy(ak, sk string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(signer{ak: ak, key: auth.NewKey(sk)})
}

// lockedBuffer is a log sink safe for the server's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// openGuard opens a guard on testACL, logging into log.
func openGuard(t testing.TB, log io.Writer) *acl.Guard {
	t.Helper()
	file := filepath.Join(t.TempDir(), "acl.yml")
	if err := os.WriteFile(file, []byte(testACL), 0o600); err != nil {
		t.Fatal(err)
	}
	g, err := acl.Open(acl.Options{File: file, Dir: t.TempDir(), ReloadInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

// client dials e's server with opts.
func (e *env) client(opts ...grpc.DialOption) rmqpb.MessagingServiceClient {
	e.t.Helper()
	cc, err := grpc.NewClient(e.cc.Target(), opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { cc.Close() })
	return rmqpb.NewMessagingServiceClient(cc)
}

func TestGuardUnary(t *testing.T) {
	var log lockedBuffer
	g := openGuard(t, &log)
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	e := newEnvWith(t, nil, func(o *Options) { o.Guard = g }, []grpc.DialOption{plain, signedBy("app", "app-secret")})
	send := func(cli rmqpb.MessagingServiceClient, topic string) *rmqpb.Status {
		t.Helper()
		r, err := cli.SendMessage(e.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg(topic, "id-"+topic, "body")}})
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	expect := func(what string, st *rmqpb.Status, code rmqpb.Code, words ...string) {
		t.Helper()
		if st.GetCode() != code {
			t.Fatalf("%s: %v, want %v", what, st, code)
		}
		for _, w := range words {
			if !strings.Contains(st.GetMessage(), w) {
				t.Errorf("%s: message %q does not name %q", what, st.GetMessage(), w)
			}
		}
	}

	// Allowed: a granted topic, and a route of it.
	expect("granted send", send(e.cli, "orders-1"), rmqpb.Code_OK)
	rr, err := e.cli.QueryRoute(e.ctx("producer-1", callTimeout), &rmqpb.QueryRouteRequest{Topic: res("orders-1")})
	if err != nil {
		t.Fatal(err)
	}
	expect("granted route", rr.GetStatus(), rmqpb.Code_OK)

	// Authorization: a topic not granted, a denied one, a group not granted.
	expect("topic not granted", send(e.cli, "billing"), rmqpb.Code_FORBIDDEN, "User:app", "Topic:billing", "Pub")
	expect("denied topic", send(e.cli, "orders-secret"), rmqpb.Code_FORBIDDEN, "Topic:orders-secret", "deny")
	ar, err := e.cli.AckMessage(e.ctx("consumer-1", callTimeout), &rmqpb.AckMessageRequest{Group: res("payroll"), Topic: res("orders-1"),
		Entries: []*rmqpb.AckMessageEntry{{MessageId: "x", ReceiptHandle: "y"}}})
	if err != nil {
		t.Fatal(err)
	}
	expect("group not granted", ar.GetStatus(), rmqpb.Code_FORBIDDEN, "Group:payroll", "Sub")

	// Authentication: unsigned, another secret, an unknown user, a stale
	// date; each refused from its headers (the tap) with Unauthenticated
	// carrying UNAUTHORIZED (40100).
	unauth := func(what string, cli rmqpb.MessagingServiceClient, words ...string) {
		t.Helper()
		_, err := cli.SendMessage(e.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("orders-1", "id-x", "body")}})
		if grpcstatus.Code(err) != codes.Unauthenticated {
			t.Fatalf("%s: %v, want Unauthenticated", what, err)
		}
		for _, w := range append(words, "UNAUTHORIZED (40100)") {
			if !strings.Contains(grpcstatus.Convert(err).Message(), w) {
				t.Errorf("%s: %q does not name %q", what, err, w)
			}
		}
	}
	unauth("unsigned", e.client(plain), "no authorization header")
	unauth("wrong secret", e.client(plain, signedBy("app", "guess")), "signature")
	unauth("unknown user", e.client(plain, signedBy("nobody", "x")), "not found")
	stale := grpc.WithPerRPCCredentials(staleSigner{signer{ak: "app", key: auth.NewKey("app-secret")}})
	unauth("stale date", e.client(plain, stale), "x-mq-date-time")

	// A super user may do anything.
	expect("super user", send(e.client(plain, signedBy("ops", "ops-secret")), "billing"), rmqpb.Code_OK)

	// Nothing refused reached the core: one message in orders-1, one in
	// billing (the super user's).
	e.dispatched("orders-1", 1)
	if _, ok := e.core.TopicConfig("orders-secret"); ok {
		t.Error("a refused send created its topic")
	}
	st := g.Stats()
	if st.Denied != 7 || st.Unsigned != 1 || st.UnknownUser != 1 || st.BadSignature != 2 || st.NoPermission != 3 {
		t.Errorf("stats %+v: want 7 denied (1 unsigned, 1 unknown user, 2 bad signature, 3 no permission)", st)
	}
	out := log.String()
	for _, secret := range []string{"app-secret", "ops-secret", "guess"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log shows the secret %q", secret)
		}
	}
	if !strings.Contains(out, "Topic:billing") || !strings.Contains(out, "SendMessage") {
		t.Errorf("the refusals were not logged with the method and resource:\n%s", out)
	}
}

// staleSigner signs with a time 20 minutes old (beyond the 15 min skew).
type staleSigner struct{ signer }

func (s staleSigner) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	a, dt := s.key.SignV2(s.ak, time.Now().Add(-20*time.Minute))
	return map[string]string{auth.HeaderAuthorization: a, auth.HeaderDateTime: dt}, nil
}

func TestGuardStreams(t *testing.T) {
	g := openGuard(t, io.Discard)
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	e := newEnvWith(t, nil, func(o *Options) { o.Guard = g }, []grpc.DialOption{plain, signedBy("app", "app-secret")})
	e.send(msg("orders-1", "m1", "hello"))
	e.dispatched("orders-1", 1)

	// A granted receive gets the message.
	got, st := e.receive("billing", "orders-1", 1, time.Minute, arrival, nil)
	if len(got) != 1 || st.GetCode() != rmqpb.Code_OK {
		t.Fatalf("granted receive: %d messages, %v", len(got), st)
	}

	// Refused receives: the first response carries the status, the stream
	// ends cleanly.
	recv := func(cli rmqpb.MessagingServiceClient, group, topic string) *rmqpb.Status {
		t.Helper()
		s, err := cli.ReceiveMessage(e.ctx("consumer-1", callTimeout), &rmqpb.ReceiveMessageRequest{Group: res(group),
			MessageQueue: &rmqpb.MessageQueue{Topic: res(topic), Id: -1}, BatchSize: 1, AutoRenew: false})
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.Recv()
		if err != nil {
			t.Fatalf("receive %s/%s: %v", group, topic, err)
		}
		if _, err := s.Recv(); err != io.EOF {
			t.Errorf("after the refusal: %v, want the end of the stream", err)
		}
		return r.GetStatus()
	}
	if st := recv(e.cli, "payroll", "orders-1"); st.GetCode() != rmqpb.Code_FORBIDDEN || !strings.Contains(st.GetMessage(), "Group:payroll") {
		t.Errorf("receive for a group not granted: %v", st)
	}
	if st := recv(e.cli, "billing", "invoices"); st.GetCode() != rmqpb.Code_FORBIDDEN || !strings.Contains(st.GetMessage(), "Topic:invoices") {
		t.Errorf("receive of a topic not granted: %v", st)
	}
	// An unsigned receive is refused from its headers: Unauthenticated.
	if s, err := e.client(plain).ReceiveMessage(e.ctx("consumer-1", callTimeout), &rmqpb.ReceiveMessageRequest{Group: res("billing"),
		MessageQueue: &rmqpb.MessageQueue{Topic: res("orders-1"), Id: -1}, BatchSize: 1}); err == nil {
		if _, err := s.Recv(); grpcstatus.Code(err) != codes.Unauthenticated {
			t.Errorf("unsigned receive: %v, want Unauthenticated", err)
		}
	} else if grpcstatus.Code(err) != codes.Unauthenticated {
		t.Errorf("unsigned receive: %v, want Unauthenticated", err)
	}

	// Telemetry: settings publishing to a topic not granted end the stream
	// with PermissionDenied naming it; granted settings are answered.
	tel := func(cli rmqpb.MessagingServiceClient, topic string) (*rmqpb.TelemetryCommand, error) {
		s, err := cli.Telemetry(e.ctx("producer-9", callTimeout))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Send(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{
			ClientType: rmqpb.ClientType_PRODUCER.Enum(),
			PubSub:     &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{Topics: []*rmqpb.Resource{res(topic)}}}}}}); err != nil && err != io.EOF {
			// io.EOF: the server ended the stream first (a refusal may
			// come before the settings are read); Recv has its status.
			t.Fatal(err)
		}
		defer s.CloseSend()
		return s.Recv()
	}
	if r, err := tel(e.cli, "orders-1"); err != nil || r.GetSettings() == nil {
		t.Errorf("granted settings: %v, %v", r, err)
	}
	_, err := tel(e.cli, "billing")
	if grpcstatus.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "Topic:billing") || !strings.Contains(err.Error(), "40300") {
		t.Errorf("settings for a topic not granted: %v", err)
	}
	if r, err := tel(e.client(plain), "orders-1"); grpcstatus.Code(err) != codes.Unauthenticated {
		t.Errorf("unsigned telemetry: %v, %v; want Unauthenticated", r, err)
	}
}

func TestGuardChecks(t *testing.T) {
	// Every request type names what RocketMQ 5's proxy checks.
	topic, group := res("t"), res("g")
	mq := &rmqpb.MessageQueue{Topic: topic}
	for _, c := range []struct {
		req  any
		want string
	}{
		{&rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{{Topic: topic}, {Topic: topic}, {Topic: res("u")}}}, "Pub on Topic:t; Pub on Topic:u"},
		{&rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{{Topic: res("%RETRY%g")}}}, "Pub on Group:g"},
		{&rmqpb.QueryRouteRequest{Topic: topic}, "Pub|Sub|Get on Topic:t"},
		{&rmqpb.EndTransactionRequest{Topic: topic}, "Pub on Topic:t"},
		{&rmqpb.RecallMessageRequest{Topic: topic}, "Pub on Topic:t"},
		{&rmqpb.ReceiveMessageRequest{Group: group, MessageQueue: mq}, "Sub on Topic:t; Sub on Group:g"},
		{&rmqpb.AckMessageRequest{Group: group, Topic: topic}, "Sub on Topic:t; Sub on Group:g"},
		{&rmqpb.ChangeInvisibleDurationRequest{Group: group, Topic: topic}, "Sub on Topic:t; Sub on Group:g"},
		{&rmqpb.QueryAssignmentRequest{Group: group, Topic: topic}, "Sub on Topic:t; Sub on Group:g"},
		{&rmqpb.PullMessageRequest{Group: group, MessageQueue: mq}, "Sub on Topic:t; Sub on Group:g"},
		{&rmqpb.UpdateOffsetRequest{Group: group, MessageQueue: mq}, "Sub on Topic:t; Sub on Group:g"},
		{&rmqpb.GetOffsetRequest{Group: group, MessageQueue: mq}, "Sub on Topic:t; Sub on Group:g"},
		{&rmqpb.QueryOffsetRequest{MessageQueue: mq}, "Sub on Topic:t"},
		{&rmqpb.ForwardMessageToDeadLetterQueueRequest{Group: group, Topic: topic}, "Sub on Group:g"},
		{&rmqpb.HeartbeatRequest{Group: group, ClientType: rmqpb.ClientType_SIMPLE_CONSUMER}, "Sub on Group:g"},
		{&rmqpb.HeartbeatRequest{ClientType: rmqpb.ClientType_PRODUCER}, ""},
		{&rmqpb.NotifyClientTerminationRequest{Group: group}, "Sub on Group:g"},
		{&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_Settings{Settings: &rmqpb.Settings{PubSub: &rmqpb.Settings_Subscription{
			Subscription: &rmqpb.Subscription{Group: group, Subscriptions: []*rmqpb.SubscriptionEntry{{Topic: topic}}}}}}}, "Sub on Group:g; Sub on Topic:t"},
		{&rmqpb.TelemetryCommand{}, ""},
	} {
		var parts []string
		for _, ch := range checksOf(c.req, nil) {
			parts = append(parts, ch.String())
		}
		if got := strings.Join(parts, "; "); got != c.want {
			t.Errorf("%T: %q, want %q", c.req, got, c.want)
		}
	}
}

func TestGRPCTLSModes(t *testing.T) {
	dir := t.TempDir()
	files := tlstest.Write(t, dir)
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	verified := grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}))
	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	for _, mode := range []tlsconf.Mode{tlsconf.Enforcing, tlsconf.Permissive} {
		t.Run(mode.String(), func(t *testing.T) {
			ts, err := tlsconf.NewServer(tlsconf.Config{Mode: mode, CertFile: files.ServerCert, KeyFile: files.ServerKey,
				NextProtos: []string{"h2"}, ReloadInterval: -1, Logger: testlog.New(t, "tls")})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ts.Close() })
			e := newEnvWith(t, nil, func(o *Options) { o.TLSServer = ts }, []grpc.DialOption{verified})
			// A client verifying the operator's certificate is served.
			if r := e.route("orders"); r.GetStatus().GetCode() != rmqpb.Code_OK {
				t.Fatalf("TLS client: %v", r.GetStatus())
			}
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			defer cancel()
			_, err = e.client(plain).QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: res("orders")}, grpc.WaitForReady(false))
			switch mode {
			case tlsconf.Enforcing:
				if err == nil {
					t.Error("a plaintext client was served in enforcing mode")
				}
				// The server counts the failure after its alert, which
				// the client may have seen first.
				wait.Until(t, "the plaintext client's failed handshake counted", func() bool { return ts.Stats().HandshakeFailures > 0 })
			case tlsconf.Permissive:
				if err != nil {
					t.Errorf("a plaintext client in permissive mode: %v", err)
				}
			}
			if ts.Stats().TLSConns == 0 {
				t.Error("no TLS connection counted")
			}
		})
	}
}

// TestGRPCTLSRotation: a new certificate written over the files is served
// to the next connections, while the open one keeps working.
func TestGRPCTLSRotation(t *testing.T) {
	files := tlstest.Write(t, t.TempDir())
	ts, err := tlsconf.NewServer(tlsconf.Config{Mode: tlsconf.Enforcing, CertFile: files.ServerCert, KeyFile: files.ServerKey,
		NextProtos: []string{"h2"}, ReloadInterval: 20 * time.Millisecond, Logger: testlog.New(t, "tls")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ts.Close() })
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(files.CA)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(pem)
	conf := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"}}
	e := newEnvWith(t, nil, func(o *Options) { o.TLSServer = ts }, []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(conf))})
	serial := func() string {
		t.Helper()
		c, err := tls.Dial("tcp", e.cc.Target(), conf)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		st := c.ConnectionState()
		if st.NegotiatedProtocol != "h2" {
			t.Errorf("ALPN %q, want h2", st.NegotiatedProtocol)
		}
		return st.PeerCertificates[0].SerialNumber.String()
	}
	if r := e.route("orders"); r.GetStatus().GetCode() != rmqpb.Code_OK {
		t.Fatalf("before the rotation: %v", r.GetStatus())
	}
	before := serial()
	tlstest.Reissue(t, files)
	wait.Until(t, "the new certificate served", func() bool { return serial() != before })
	// The connection opened before the rotation keeps working.
	if r := e.route("orders"); r.GetStatus().GetCode() != rmqpb.Code_OK {
		t.Fatalf("after the rotation: %v", r.GetStatus())
	}
}

// BenchmarkGuard is the access control's cost per unary call, without
// the network: the interceptor in front of a handler that does nothing,
// for a granted SendMessage signed as a RocketMQ 5 client signs it. "off"
// is the handler alone (no Guard: no interceptor at all).
func BenchmarkGuard(b *testing.B) {
	g := openGuard(b, io.Discard)
	s := &Server{opts: Options{Guard: g}}
	authz, dt := auth.NewKey("app-secret").SignV2("app", time.Now())
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(auth.HeaderAuthorization, authz, auth.HeaderDateTime, dt, metaClientID, "bench"))
	ctx = peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000}})
	req := &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{msg("orders-1", "m1", "body")}}
	info := &grpc.UnaryServerInfo{FullMethod: "/apache.rocketmq.v2.MessagingService/SendMessage"}
	resp := &rmqpb.SendMessageResponse{Status: okStatus}
	handler := func(ctx context.Context, req any) (any, error) { return resp, nil }
	b.Run("off", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r, _ := handler(ctx, req); r != resp {
				b.Fatal("refused")
			}
		}
	})
	b.Run("on", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if r, _ := s.unaryEntry(ctx, req, info, handler); r != resp {
				b.Fatalf("refused: %v", r)
			}
		}
	})
}

// BenchmarkSendMessageACL is BenchmarkSendMessage with access control on
// (every call signed and checked): compare the two.
func BenchmarkSendMessageACL(b *testing.B) {
	g := openGuard(b, io.Discard)
	e := newEnvWith(b, nil, func(o *Options) { o.Guard = g },
		[]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), signedBy("app", "app-secret")})
	body := make([]byte, 1024)
	e.route("orders-bench")
	var seq atomic.Int64
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := e.ctx("bench", time.Minute)
		m := &rmqpb.Message{Topic: res("orders-bench"), Body: body, SystemProperties: &rmqpb.SystemProperties{
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
