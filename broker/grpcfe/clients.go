package grpcfe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/rmqpb"
)

// Clients: a RocketMQ 5 client names itself in every call's
// x-mq-client-id header and declares what it is (producer of some topics,
// consumer of a group) in the settings it sends first on its telemetry
// stream. The front end keeps one client per id, registered with the core
// as a remoting client's heartbeat would register it (producers of a
// topic form the producer group named after the topic, which transaction
// checks go to), and pushes the core's requests to it on its telemetry
// stream.

// metaClientID is the header every call of a RocketMQ 5 client carries.
const metaClientID = "x-mq-client-id"

// clientTable holds the clients by id.
type clientTable struct {
	mu sync.Mutex
	m  map[string]*client // guarded by mu
}

func (t *clientTable) init() { t.m = make(map[string]*client) }

func (t *clientTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// client is one RocketMQ 5 client: the core's ClientConn for it (a
// pointer: the registry's key).
type client struct {
	s  *Server
	id string

	mu       sync.Mutex
	addr     string
	settings *rmqpb.Settings // the last the client sent; nil before any
	out      chan *rmqpb.TelemetryCommand
	// stop ends the current telemetry stream (Close).
	stop   chan struct{}
	closed bool
	// streamEnded is when the last telemetry stream ended (zero while one
	// is open, or before any): renew.go's connection loss.
	streamEnded time.Time
	// stacks are the thread-stack requests waiting for their answer, by nonce.
	stacks map[string]chan string
}

// clientOf returns the client of a call (created on its first call);
// CLIENT_ID_REQUIRED when the call has no client id.
func (s *Server) clientOf(ctx context.Context) (*client, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	ids := md.Get(metaClientID)
	if len(ids) == 0 || ids[0] == "" {
		return nil, badRequest(rmqpb.Code_CLIENT_ID_REQUIRED, "the call has no "+metaClientID+" header")
	}
	addr := ""
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	s.clients.mu.Lock()
	defer s.clients.mu.Unlock()
	c := s.clients.m[ids[0]]
	if c == nil {
		c = &client{s: s, id: ids[0], addr: addr, stop: make(chan struct{}), stacks: make(map[string]chan string)}
		s.clients.m[c.id] = c
	}
	return c, nil
}

// clientLookup returns the client of a call when it is known (nil
// without a client id or before its first call).
func (s *Server) clientLookup(ctx context.Context) *client {
	md, _ := metadata.FromIncomingContext(ctx)
	ids := md.Get(metaClientID)
	if len(ids) == 0 || ids[0] == "" {
		return nil
	}
	s.clients.mu.Lock()
	defer s.clients.mu.Unlock()
	return s.clients.m[ids[0]]
}

// peerAddr returns a call's remote address, for the messages' born host.
func peerAddr(ctx context.Context) netip.AddrPort {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		if ta, ok := p.Addr.(*net.TCPAddr); ok {
			return ta.AddrPort()
		}
		if ap, err := netip.ParseAddrPort(p.Addr.String()); err == nil {
			return ap
		}
	}
	return netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
}

// RemoteAddr implements core.ClientConn.
func (c *client) RemoteAddr() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.addr
}

// NotifyConsumerIDsChanged implements core.ClientConn: RocketMQ 5's
// consumers do not rebalance on the broker's word (the broker assigns), so
// there is nothing to tell.
func (c *client) NotifyConsumerIDsChanged(string) error { return nil }

// ResetOffset implements core.ClientConn: a received message's position is
// the broker's, so a reset needs no client action (the committed offsets
// the reset wrote apply to new receives of groups new to a queue).
func (c *client) ResetOffset(*core.OffsetReset) error { return nil }

// CheckTransaction implements core.ClientConn: a
// RecoverOrphanedTransactionCommand on the client's telemetry stream.
func (c *client) CheckTransaction(producerGroup string, chk *core.TransactionCheck) error {
	v, err := message.Decode(chk.Record, false)
	if err != nil {
		return fmt.Errorf("grpcfe: transaction check of %s: %w", chk.MsgID, err)
	}
	m := toMessage(v, chk.Topic, c.s.brokerName, nil)
	cmd := &rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_RecoverOrphanedTransactionCommand{
		RecoverOrphanedTransactionCommand: &rmqpb.RecoverOrphanedTransactionCommand{
			Message: m, TransactionId: transactionID(chk.CommitLogOffset, chk.TranStateTableOffset),
		}}}
	return c.push(cmd)
}

// Close implements core.ClientConn: the client was silent too long. Its
// telemetry stream ends and it is forgotten.
func (c *client) Close() error {
	c.s.forget(c)
	return nil
}

// push queues a command for the client's telemetry stream without waiting.
func (c *client) push(cmd *rmqpb.TelemetryCommand) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.out == nil {
		return fmt.Errorf("grpcfe: client %s has no telemetry stream", c.id)
	}
	select {
	case c.out <- cmd:
		return nil
	default:
		return fmt.Errorf("grpcfe: client %s's telemetry stream is full", c.id)
	}
}

// forget removes a client: from the table, from the core's registry, and
// ends its telemetry stream.
func (s *Server) forget(c *client) {
	s.clients.mu.Lock()
	if s.clients.m[c.id] == c {
		delete(s.clients.m, c.id)
	}
	s.clients.mu.Unlock()
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.stop)
	}
	c.mu.Unlock()
	s.renew.release() // its renewed handles (renew.go)
	s.core.ClientClosed(c)
	s.liteDrop(c.id) // its lite subscriptions (lite.go)
}

// register (re)declares the client to the core from its settings: the
// producer groups of its topics, or its consumer group and subscriptions.
func (s *Server) register(c *client) error {
	c.mu.Lock()
	st := c.settings
	c.mu.Unlock()
	hb := protocol.HeartbeatData{ClientID: c.id}
	if st != nil {
		switch ps := st.GetPubSub().(type) {
		case *rmqpb.Settings_Publishing:
			for _, t := range ps.Publishing.GetTopics() {
				if t.GetName() != "" {
					hb.ProducerDataSet = append(hb.ProducerDataSet, protocol.ProducerData{GroupName: t.GetName()})
				}
			}
		case *rmqpb.Settings_Subscription:
			sub := ps.Subscription
			if g := sub.GetGroup().GetName(); g != "" {
				cd := protocol.ConsumerData{GroupName: g, ConsumeType: "CONSUME_POP", MessageModel: "CLUSTERING",
					ConsumeFromWhere: "CONSUME_FROM_LAST_OFFSET"}
				for _, e := range sub.GetSubscriptions() {
					typ, expr := filterOf(e.GetExpression())
					sd := protocol.SubscriptionData{Topic: e.GetTopic().GetName(), SubString: expr, ExpressionType: typ,
						SubVersion: time.Now().UnixMilli()}
					if typ == "TAG" && expr != "*" {
						for _, tag := range strings.Split(expr, "||") {
							if tag = strings.TrimSpace(tag); tag != "" {
								sd.TagsSet = append(sd.TagsSet, tag)
							}
						}
					}
					cd.SubscriptionDataSet = append(cd.SubscriptionDataSet, sd)
				}
				hb.ConsumerDataSet = append(hb.ConsumerDataSet, cd)
			}
		}
	}
	lang := "OTHER"
	if st != nil && st.GetUserAgent() != nil {
		lang = st.GetUserAgent().GetLanguage().String()
	}
	return s.core.Heartbeat(c, &hb, lang, 0)
}

// filterOf returns a filter expression as the core takes it: the type
// ("TAG" or "SQL92") and the expression ("*" when empty).
func filterOf(f *rmqpb.FilterExpression) (typ, expr string) {
	expr = strings.TrimSpace(f.GetExpression())
	if f.GetType() == rmqpb.FilterType_SQL {
		return "SQL92", expr
	}
	if expr == "" {
		expr = "*"
	}
	return "TAG", expr
}

// Heartbeat keeps the client registered (the core forgets clients silent
// for its ClientTimeout).
func (s *Server) Heartbeat(ctx context.Context, r *rmqpb.HeartbeatRequest) (*rmqpb.HeartbeatResponse, error) {
	if resp, fwd, err := s.forwardHeartbeat(ctx, r); fwd {
		return resp, err
	}
	c, err := s.clientOf(ctx)
	if err != nil {
		return &rmqpb.HeartbeatResponse{Status: errStatus(err)}, nil
	}
	c.mu.Lock()
	known := c.settings != nil
	c.mu.Unlock()
	if !known && r.GetClientType() == rmqpb.ClientType_CLIENT_TYPE_UNSPECIFIED {
		return &rmqpb.HeartbeatResponse{Status: status(rmqpb.Code_UNRECOGNIZED_CLIENT_TYPE,
			"the client sent no settings yet: open the telemetry stream first")}, nil
	}
	return &rmqpb.HeartbeatResponse{Status: errStatus(s.register(c))}, nil
}

// NotifyClientTermination forgets the client.
func (s *Server) NotifyClientTermination(ctx context.Context, r *rmqpb.NotifyClientTerminationRequest) (*rmqpb.NotifyClientTerminationResponse, error) {
	if resp, fwd, err := s.forwardTermination(ctx, r); fwd {
		return resp, err
	}
	c, err := s.clientOf(ctx)
	if err != nil {
		return &rmqpb.NotifyClientTerminationResponse{Status: errStatus(err)}, nil
	}
	s.forget(c)
	return &rmqpb.NotifyClientTerminationResponse{Status: okStatus}, nil
}

// telemetryQueue bounds the commands waiting to go out on one stream.
const telemetryQueue = 256

// Telemetry is the client's bidirectional stream: the client's settings
// come in (answered with the settings it is to apply), the broker's
// commands go out (transaction checks; thread stack requests), the
// client's answers come in.
func (s *Server) Telemetry(stream rmqpb.MessagingService_TelemetryServer) error {
	if fwd, err := s.forwardTelemetry(stream); fwd {
		return err
	}
	c, err := s.clientOf(stream.Context())
	if err != nil {
		return stream.Send(&rmqpb.TelemetryCommand{Status: errStatus(err)})
	}
	out := make(chan *rmqpb.TelemetryCommand, telemetryQueue)
	c.mu.Lock()
	if c.closed { // forgotten meanwhile (terminated): a new life
		c.mu.Unlock()
		s.clients.mu.Lock()
		if s.clients.m[c.id] == c {
			delete(s.clients.m, c.id)
		}
		s.clients.mu.Unlock()
		if c, err = s.clientOf(stream.Context()); err != nil {
			return err
		}
		c.mu.Lock()
	}
	c.out = out
	c.streamEnded = time.Time{}
	stop := c.stop
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.out == out {
			c.out = nil
			c.streamEnded = time.Now()
		}
		c.mu.Unlock()
	}()

	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case cmd := <-out:
				if err := stream.Send(cmd); err != nil {
					sendErr <- err
					cancel()
					return
				}
			case <-ctx.Done():
				sendErr <- nil
				return
			}
		}
	}()
	recvErr := make(chan error, 1)
	go func() {
		for {
			cmd, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			s.telemetryCommand(c, cmd)
		}
	}()
	select {
	case err = <-recvErr:
	case <-stop:
	case <-s.shutdown:
	case <-ctx.Done():
	}
	cancel()
	if e := <-sendErr; err == nil {
		err = e
	}
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// telemetryCommand handles one command from a client.
func (s *Server) telemetryCommand(c *client, cmd *rmqpb.TelemetryCommand) {
	switch x := cmd.GetCommand().(type) {
	case *rmqpb.TelemetryCommand_Settings:
		c.mu.Lock()
		c.settings = x.Settings
		c.mu.Unlock()
		st := okStatus
		if err := s.register(c); err != nil {
			st = errStatus(err)
		}
		reply := s.serverSettings(x.Settings)
		_ = c.push(&rmqpb.TelemetryCommand{Status: st, Command: &rmqpb.TelemetryCommand_Settings{Settings: reply}})
	case *rmqpb.TelemetryCommand_ThreadStackTrace:
		nonce := x.ThreadStackTrace.GetNonce()
		c.mu.Lock()
		ch := c.stacks[nonce]
		delete(c.stacks, nonce)
		c.mu.Unlock()
		if ch != nil {
			ch <- x.ThreadStackTrace.GetThreadStackTrace()
		}
	case *rmqpb.TelemetryCommand_VerifyMessageResult:
		s.log.Info("grpc: message verification answered", "client", c.id, "nonce", x.VerifyMessageResult.GetNonce(),
			"code", cmd.GetStatus().GetCode().String(), "message", cmd.GetStatus().GetMessage())
	default:
		s.log.Debug("grpc: telemetry command ignored", "client", c.id, "command", fmt.Sprintf("%T", x))
	}
}

// serverSettings answers a client's settings with the ones to apply: for
// a producer the largest body and a client-side check of message types
// (the broker checks them too); for a consumer its group's delivery order
// (FIFO when the group is configured consumeMessageOrderly), retry policy
// and long polling.
func (s *Server) serverSettings(in *rmqpb.Settings) *rmqpb.Settings {
	out := &rmqpb.Settings{
		ClientType:     in.ClientType,
		AccessPoint:    in.GetAccessPoint(),
		RequestTimeout: in.GetRequestTimeout(),
		UserAgent:      in.GetUserAgent(),
		// No Metric: the broker collects no client metrics, and a client
		// left without one keeps its own (the Go client resets its meter
		// provider on every Metric it is sent).
	}
	switch ps := in.GetPubSub().(type) {
	case *rmqpb.Settings_Publishing:
		// A backoff policy for the producer's retries of a failed send, as
		// RocketMQ's proxy answers with one: the Java and Node.js SDKs take
		// the answer's and refuse one that is not exponential. The
		// producer's own when it sent one, else the proxy's default. Not to
		// the Go SDK, which keeps its own without one: v5.1.2 writes a
		// policy it is sent while its telemetry stream encodes it (a data
		// race in the client, which RocketMQ's proxy triggers too).
		if in.GetUserAgent().GetLanguage() != rmqpb.Language_GOLANG {
			out.BackoffPolicy = producerBackoff(in.GetBackoffPolicy())
		}
		out.PubSub = &rmqpb.Settings_Publishing{Publishing: &rmqpb.Publishing{
			Topics:      ps.Publishing.GetTopics(),
			MaxBodySize: int32(s.core.Options().MaxMessageSize),
			// RocketMQ's proxy sends its enableTopicMessageTypeCheck (on by
			// default, whatever its docs say), and so checks sends itself
			// (core.SendRequest.CheckTopicType): the SDKs then refuse a
			// message whose type the route's queues do not accept.
			ValidateMessageType: true,
		}}
	case *rmqpb.Settings_Subscription:
		group := ps.Subscription.GetGroup()
		cfg, err := s.core.SubscriptionGroup([]byte(group.GetName()))
		if err != nil {
			cfg = protocol.DefaultSubscriptionGroupConfig(group.GetName())
		}
		fifo := cfg.ConsumeMessageOrderly
		batch := int32(32)
		out.BackoffPolicy = &rmqpb.RetryPolicy{
			MaxAttempts: cfg.RetryMaxTimes + 1,
			Strategy: &rmqpb.RetryPolicy_CustomizedBackoff{CustomizedBackoff: &rmqpb.CustomizedBackoff{
				Next: retryIntervals(),
			}},
		}
		sub := &rmqpb.Subscription{
			Group:              group,
			Subscriptions:      ps.Subscription.GetSubscriptions(),
			Fifo:               &fifo,
			ReceiveBatchSize:   &batch,
			LongPollingTimeout: durationpb.New(s.opts.LongPollingTimeout),
		}
		liteSettings(sub, in, cfg) // lite.go
		out.PubSub = &rmqpb.Settings_Subscription{Subscription: sub}
	}
	return out
}

// producerBackoff returns the producer's own policy when it is an
// exponential one, else RocketMQ's proxy's default: 3 attempts, waits from
// 10 ms doubling up to 1 s.
func producerBackoff(own *rmqpb.RetryPolicy) *rmqpb.RetryPolicy {
	if own.GetExponentialBackoff() != nil && own.GetMaxAttempts() > 0 {
		return own
	}
	return &rmqpb.RetryPolicy{
		MaxAttempts: 3,
		Strategy: &rmqpb.RetryPolicy_ExponentialBackoff{ExponentialBackoff: &rmqpb.ExponentialBackoff{
			Initial: durationpb.New(10 * time.Millisecond), Max: durationpb.New(time.Second), Multiplier: 2,
		}},
	}
}

// retryIntervals are RocketMQ's default redelivery intervals of a failed
// message (delay levels 3 and up: 10 s, 30 s, 1 min, ... 2 h), which a push
// consumer applies through ChangeInvisibleDuration.
func retryIntervals() []*durationpb.Duration {
	ds := []time.Duration{10 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 3 * time.Minute,
		4 * time.Minute, 5 * time.Minute, 6 * time.Minute, 7 * time.Minute, 8 * time.Minute, 9 * time.Minute,
		10 * time.Minute, 20 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour}
	out := make([]*durationpb.Duration, len(ds))
	for i, d := range ds {
		out[i] = durationpb.New(d)
	}
	return out
}

// ThreadStackTrace asks a client for its threads' stacks over its
// telemetry stream (PrintThreadStackTraceCommand) and returns its answer.
func (s *Server) ThreadStackTrace(ctx context.Context, clientID string) (string, error) {
	s.clients.mu.Lock()
	c := s.clients.m[clientID]
	s.clients.mu.Unlock()
	if c == nil {
		return "", fmt.Errorf("grpcfe: no client %q", clientID)
	}
	nonce := fmt.Sprintf("%x", time.Now().UnixNano())
	ch := make(chan string, 1)
	c.mu.Lock()
	c.stacks[nonce] = ch
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.stacks, nonce)
		c.mu.Unlock()
	}()
	if err := c.push(&rmqpb.TelemetryCommand{Command: &rmqpb.TelemetryCommand_PrintThreadStackTraceCommand{
		PrintThreadStackTraceCommand: &rmqpb.PrintThreadStackTraceCommand{Nonce: nonce}}}); err != nil {
		return "", err
	}
	select {
	case st := <-ch:
		return st, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// Clients returns the ids of the clients the front end knows.
func (s *Server) Clients() []string {
	s.clients.mu.Lock()
	defer s.clients.mu.Unlock()
	ids := make([]string, 0, len(s.clients.m))
	for id := range s.clients.m {
		ids = append(ids, id)
	}
	return ids
}
