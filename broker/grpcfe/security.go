package grpcfe

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/rmqpb"
)

// Access control of the gRPC front end (Options.Guard):
//
//   - Authentication, in the tap (admit.go), from the stream's headers
//     before it exists and before a byte of its request is read: the
//     "authorization" and "x-mq-date-time" metadata (RocketMQ 5's
//     MQv2-HMAC-SHA1, within the clock skew) name an enabled user whose
//     secret signed them (acl.Guard.AuthenticateV2). A call from a global
//     white address passes unchecked. A refusal is gRPC's
//     Unauthenticated status, whose message carries RocketMQ's
//     "UNAUTHORIZED (40100): authentication failed: ..." (RocketMQ's proxy
//     answers 40100 in the response, after reading the request; a status
//     is all a refusal can carry before it).
//   - Authorization: the checks RocketMQ 5's proxy makes for the request
//     (checksOf; acl.Guard.Authorize): a unary call's request, a server
//     stream's one request and every command of a Telemetry stream, as
//     they are received.
//
// An authorization refusal is answered in the method's own response, as
// every outcome is: Status FORBIDDEN (40300) with a message naming what
// was refused, and the method is not called; a Telemetry stream whose
// settings are refused ends with gRPC's PermissionDenied carrying the
// same text (its method sends on another goroutine). (Without the tap,
// as in tests that call unaryEntry directly, authentication is made by
// the interceptors and refused with UNAUTHORIZED in the response.) Every
// refusal is counted and logged by the guard (rate-limited, never a
// secret or a signature).
//
// An allowed unary call costs the metadata look-ups (grpc-go copies the
// one value it returns: the only allocations), the header's parse (views
// of it; the signature is decoded into the key's pooled scratch) and one
// HMAC-SHA1; the checks are built on the stack.

// callCtx is what authentication found: the user ("" when white-listed:
// no check applies) and the source address.
type callCtx struct {
	user  string
	ip    netip.Addr
	white bool
}

// authenticate checks ctx's metadata; a refusal is a Status.
func (s *Server) authenticate(ctx context.Context, method string) (callCtx, *rmqpb.Status) {
	return s.authenticateHeaders(ctx, method, firstValue(ctx, auth.HeaderAuthorization), firstValue(ctx, auth.HeaderDateTime))
}

// authenticateHeaders checks a call's authorization and date headers from
// ctx's peer; a refusal is a Status.
func (s *Server) authenticateHeaders(ctx context.Context, method, authz, dt string) (callCtx, *rmqpb.Status) {
	var c callCtx
	if p, ok := peer.FromContext(ctx); ok {
		c.ip = addrIP(p.Addr)
	}
	g := s.opts.Guard
	if g.AllowWhite(c.ip) {
		c.white = true
		return c, nil
	}
	user, err := g.AuthenticateV2(authz, dt)
	if err != nil {
		claimed, _ := auth.ParseV2(authz, dt) // the access key the log names, if any
		g.Refused(method, claimed.AccessKey, c.ip, err)
		return c, status(rmqpb.Code_UNAUTHORIZED, "authentication failed: "+err.Error())
	}
	c.user = user
	return c, nil
}

// authorize checks what req needs; a refusal is a Status.
func (s *Server) authorize(c callCtx, method string, req any) *rmqpb.Status {
	if c.white {
		return nil
	}
	var buf [maxChecks]acl.Check
	cs := checksOf(req, buf[:0])
	if err := s.opts.Guard.Authorize(c.user, c.ip, cs...); err != nil {
		s.opts.Guard.Refused(method, c.user, c.ip, err)
		return status(rmqpb.Code_FORBIDDEN, err.Error())
	}
	return nil
}

// firstValue is the call's first value of a metadata key (lower case).
func firstValue(ctx context.Context, key string) string {
	if v := metadata.ValueFromIncomingContext(ctx, key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// addrIP is a peer's IP address without allocating for a TCP peer.
func addrIP(a net.Addr) netip.Addr {
	switch t := a.(type) {
	case *net.TCPAddr:
		return t.AddrPort().Addr().Unmap()
	case nil:
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// unaryEntry is the server's first unary interceptor (installed with
// Options.Guard): the call is authorized (its authentication was the
// tap's; a call that reached the server without the tap is authenticated
// here). The tap's reservation went back when the request was read
// (sizedService); giving it back again here does nothing.
func (s *Server) unaryEntry(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	a := admissionOf(ctx)
	a.received()
	var c callCtx
	var st *rmqpb.Status
	if a != nil && a.authed {
		c = a.call
	} else {
		c, st = s.authenticate(ctx, info.FullMethod)
	}
	if st == nil {
		st = s.authorize(c, info.FullMethod, req)
	}
	if st != nil {
		return refusal(req, st)
	}
	return handler(ctx, req)
}

// streamEntry is the server's first stream interceptor (installed with
// Options.Guard): every request received is authorized (the stream's
// authentication was the tap's; without the tap it is done here, as the
// stream opens). The tap's reservation goes back once the stream's first
// request has been read (here, and in sizedService's stream, whichever
// comes first).
func (s *Server) streamEntry(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	a := admissionOf(ss.Context())
	var c callCtx
	if a != nil && a.authed {
		c = a.call
	} else {
		var st *rmqpb.Status
		if c, st = s.authenticate(ss.Context(), info.FullMethod); st != nil {
			a.received()
			return sendRefusal(ss, info.FullMethod, st)
		}
	}
	err := handler(srv, &guardedStream{ServerStream: ss, s: s, c: c, a: a, method: info.FullMethod})
	if errors.Is(err, errRefused) {
		return nil
	}
	return err
}

// guardedStream gives the tap's reservation back after the first
// message received on a stream and authorizes every message received. A refused
// request of a server stream (received before its method starts) is
// answered on the stream, and RecvMsg returns errRefused, which the
// method returns; a refused Telemetry command ends the stream with
// PermissionDenied and the status in its message.
type guardedStream struct {
	grpc.ServerStream
	s      *Server
	c      callCtx
	a      *admission // given back after the first RecvMsg
	method string
}

func (g *guardedStream) RecvMsg(m any) error {
	err := g.ServerStream.RecvMsg(m)
	if g.a != nil {
		g.a.received()
		g.a = nil
	}
	if err != nil {
		return err
	}
	if st := g.s.authorize(g.c, g.method, m); st != nil {
		if g.method == methodTelemetry {
			// Its method sends on another goroutine: the refusal ends the
			// stream with a gRPC status instead of a command.
			return grpcstatus.Error(codes.PermissionDenied, st.GetCode().String()+" ("+strconv.Itoa(int(st.GetCode()))+"): "+st.GetMessage())
		}
		if err := sendRefusal(g.ServerStream, g.method, st); err != nil {
			return err
		}
		return errRefused
	}
	return nil
}

// errRefused ends a stream whose refusal was sent; streamEntry turns it
// into a normal end (the refusal is the answer).
var errRefused = errors.New("grpcfe: refused")

// Full method names of the streaming methods.
const (
	methodReceive   = "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
	methodPull      = "/apache.rocketmq.v2.MessagingService/PullMessage"
	methodTelemetry = "/apache.rocketmq.v2.MessagingService/Telemetry"
)

// sendRefusal answers a stream's refusal in its response type.
func sendRefusal(ss grpc.ServerStream, method string, st *rmqpb.Status) error {
	var m any
	switch method {
	case methodReceive:
		m = &rmqpb.ReceiveMessageResponse{Content: &rmqpb.ReceiveMessageResponse_Status{Status: st}}
	case methodPull:
		m = &rmqpb.PullMessageResponse{Content: &rmqpb.PullMessageResponse_Status{Status: st}}
	case methodTelemetry:
		m = &rmqpb.TelemetryCommand{Status: st}
	default:
		return fmt.Errorf("grpcfe: refused: %s", st.GetMessage())
	}
	if err := ss.SendMsg(m); err != nil {
		return err
	}
	return nil
}

// refusal is a unary method's response carrying st.
func refusal(req any, st *rmqpb.Status) (any, error) {
	switch req.(type) {
	case *rmqpb.QueryRouteRequest:
		return &rmqpb.QueryRouteResponse{Status: st}, nil
	case *rmqpb.HeartbeatRequest:
		return &rmqpb.HeartbeatResponse{Status: st}, nil
	case *rmqpb.SendMessageRequest:
		return &rmqpb.SendMessageResponse{Status: st}, nil
	case *rmqpb.QueryAssignmentRequest:
		return &rmqpb.QueryAssignmentResponse{Status: st}, nil
	case *rmqpb.AckMessageRequest:
		return &rmqpb.AckMessageResponse{Status: st}, nil
	case *rmqpb.ForwardMessageToDeadLetterQueueRequest:
		return &rmqpb.ForwardMessageToDeadLetterQueueResponse{Status: st}, nil
	case *rmqpb.EndTransactionRequest:
		return &rmqpb.EndTransactionResponse{Status: st}, nil
	case *rmqpb.NotifyClientTerminationRequest:
		return &rmqpb.NotifyClientTerminationResponse{Status: st}, nil
	case *rmqpb.ChangeInvisibleDurationRequest:
		return &rmqpb.ChangeInvisibleDurationResponse{Status: st}, nil
	case *rmqpb.UpdateOffsetRequest:
		return &rmqpb.UpdateOffsetResponse{Status: st}, nil
	case *rmqpb.GetOffsetRequest:
		return &rmqpb.GetOffsetResponse{Status: st}, nil
	case *rmqpb.QueryOffsetRequest:
		return &rmqpb.QueryOffsetResponse{Status: st}, nil
	case *rmqpb.RecallMessageRequest:
		return &rmqpb.RecallMessageResponse{Status: st}, nil
	case *rmqpb.SyncLiteSubscriptionRequest:
		return &rmqpb.SyncLiteSubscriptionResponse{Status: st}, nil
	}
	return nil, fmt.Errorf("grpcfe: refused: %s", st.GetMessage())
}

// maxChecks is how many checks checksOf builds on the caller's stack; a
// request needing more (a batch to many topics, settings with many
// subscriptions) grows the slice.
const maxChecks = 8

// topicRes and groupRes are a request's resources; a %RETRY% or %DLQ%
// topic counts as its group, as on the remoting port.
func topicRes(r *rmqpb.Resource) acl.Resource {
	name := r.GetName()
	if acl.IsRetryTopic(name) || isDLQTopic(name) {
		return acl.Resource{Type: acl.TypeGroup, Name: acl.GroupName(name), Pattern: acl.Literal}
	}
	return acl.Resource{Type: acl.TypeTopic, Name: name, Pattern: acl.Literal}
}

func groupRes(r *rmqpb.Resource) acl.Resource {
	return acl.Resource{Type: acl.TypeGroup, Name: acl.GroupName(r.GetName()), Pattern: acl.Literal}
}

func isDLQTopic(name string) bool { return len(name) > 5 && name[:5] == "%DLQ%" }

// checksOf appends to cs what a request needs, as RocketMQ 5's proxy
// decides it: sends and transactions Pub on the topic; a route Pub, Sub
// or Get on the topic; receiving, acknowledging, changing the invisible
// time, assignments, pulls and offsets Sub on the topic and the group;
// a consumer's heartbeat and termination, and a dead-letter forward, Sub
// on the group; a Telemetry command's settings Pub on each published
// topic, or Sub on the group and each subscribed topic. Other requests
// (a producer's heartbeat, telemetry replies) need authentication only.
func checksOf(req any, cs []acl.Check) []acl.Check {
	sub := func(r acl.Resource) { cs = append(cs, acl.Check{Resource: r, Actions: acl.Sub}) }
	switch r := req.(type) {
	case *rmqpb.SendMessageRequest:
		for i, m := range r.GetMessages() {
			t := m.GetTopic().GetName()
			if i > 0 && t == r.Messages[i-1].GetTopic().GetName() {
				continue
			}
			cs = append(cs, acl.Check{Resource: topicRes(m.GetTopic()), Actions: acl.Pub})
		}
	case *rmqpb.EndTransactionRequest:
		cs = append(cs, acl.Check{Resource: topicRes(r.GetTopic()), Actions: acl.Pub})
	case *rmqpb.RecallMessageRequest:
		cs = append(cs, acl.Check{Resource: topicRes(r.GetTopic()), Actions: acl.Pub})
	case *rmqpb.QueryRouteRequest:
		cs = append(cs, acl.Check{Resource: topicRes(r.GetTopic()), Actions: acl.Pub | acl.Sub | acl.Get})
	case *rmqpb.ReceiveMessageRequest:
		sub(topicRes(r.GetMessageQueue().GetTopic()))
		sub(groupRes(r.GetGroup()))
	case *rmqpb.AckMessageRequest:
		sub(topicRes(r.GetTopic()))
		sub(groupRes(r.GetGroup()))
	case *rmqpb.ChangeInvisibleDurationRequest:
		sub(topicRes(r.GetTopic()))
		sub(groupRes(r.GetGroup()))
	case *rmqpb.QueryAssignmentRequest:
		sub(topicRes(r.GetTopic()))
		sub(groupRes(r.GetGroup()))
	case *rmqpb.PullMessageRequest:
		sub(topicRes(r.GetMessageQueue().GetTopic()))
		sub(groupRes(r.GetGroup()))
	case *rmqpb.UpdateOffsetRequest:
		sub(topicRes(r.GetMessageQueue().GetTopic()))
		sub(groupRes(r.GetGroup()))
	case *rmqpb.GetOffsetRequest:
		sub(topicRes(r.GetMessageQueue().GetTopic()))
		sub(groupRes(r.GetGroup()))
	case *rmqpb.QueryOffsetRequest:
		sub(topicRes(r.GetMessageQueue().GetTopic()))
	case *rmqpb.SyncLiteSubscriptionRequest:
		sub(topicRes(r.GetTopic()))
		sub(groupRes(r.GetGroup()))
	case *rmqpb.ForwardMessageToDeadLetterQueueRequest:
		sub(groupRes(r.GetGroup()))
	case *rmqpb.HeartbeatRequest:
		if r.GetGroup().GetName() != "" && r.GetClientType() != rmqpb.ClientType_PRODUCER {
			sub(groupRes(r.GetGroup()))
		}
	case *rmqpb.NotifyClientTerminationRequest:
		if r.GetGroup().GetName() != "" {
			sub(groupRes(r.GetGroup()))
		}
	case *rmqpb.TelemetryCommand:
		set := r.GetSettings()
		if set == nil {
			break
		}
		for _, t := range set.GetPublishing().GetTopics() {
			cs = append(cs, acl.Check{Resource: topicRes(t), Actions: acl.Pub})
		}
		if sb := set.GetSubscription(); sb != nil {
			sub(groupRes(sb.GetGroup()))
			for _, e := range sb.GetSubscriptions() {
				sub(topicRes(e.GetTopic()))
			}
		}
	}
	return cs
}

// transportCreds serves a tlsconf.Server's mode on the gRPC port: TLS
// only (Enforcing), or TLS and plaintext told apart by the first byte
// (Permissive), with its certificate files reloaded as they change. Its
// configuration must offer ALPN "h2" (tlsconf.Config.NextProtos): gRPC
// clients require it.
type transportCreds struct{ srv *tlsconf.Server }

func (t transportCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	// grpc-go bounds the handshake with the connection's deadline.
	c, err := t.srv.Handshake(context.Background(), conn)
	if err != nil {
		return nil, nil, err
	}
	if tc, ok := c.(*tls.Conn); ok {
		return c, credentials.TLSInfo{State: tc.ConnectionState(),
			CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
	}
	return c, plainInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (transportCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, fmt.Errorf("grpcfe: server credentials used by a client")
}

func (t transportCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls-" + t.srv.Mode().String()}
}

func (t transportCreds) Clone() credentials.TransportCredentials { return t }

func (transportCreds) OverrideServerName(string) error { return nil }
