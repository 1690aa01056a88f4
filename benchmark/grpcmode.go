package benchmark

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/broker/grpcfe"
	"github.com/apogeemq/apogee/rmqpb"
)

// Protocols of Config.Protocol.
const (
	ProtocolRemoting = "remoting"
	ProtocolGRPC     = "grpc"
)

// grpcTarget drives a broker's gRPC front end (RocketMQ 5's
// MessagingService) with a minimal client on the generated stubs: one
// connection per producer, each in-flight slot a goroutine making unary
// SendMessage calls; one connection per consumer, receiving (up to 32
// messages, long polling) and acknowledging each batch in one AckMessage,
// as RocketMQ 5's simple consumer does. With no address it runs an
// embedded broker with its gRPC front end on a loopback port.
type grpcTarget struct {
	cfg      Config
	addr     string
	embedded *brokerTarget // the embedded broker, when there is one
	fe       *grpcfe.Server
	feDone   chan error

	mu        sync.Mutex
	conns     []*grpc.ClientConn
	fromStart bool
	group     string
	seq       atomic.Uint64
}

func openGRPCTarget(ctx context.Context, c Config) (target, error) {
	t := &grpcTarget{cfg: c, addr: c.Addr, group: fmt.Sprintf("apogee-bench-%d", time.Now().UnixNano())}
	if t.addr == "" {
		b := &brokerTarget{cfg: c}
		if err := b.startEmbedded(); err != nil {
			b.close()
			return nil, err
		}
		t.embedded = b
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.close()
			return nil, err
		}
		fe, err := grpcfe.New(b.b.Core(), grpcfe.Options{Addr: l.Addr().String(), Logger: b.quietLogger()})
		if err != nil {
			l.Close()
			t.close()
			return nil, err
		}
		t.fe, t.feDone, t.addr = fe, make(chan error, 1), l.Addr().String()
		go func() { t.feDone <- fe.Serve(l) }()
		fmt.Fprintf(c.Out, "embedded broker's gRPC front end on %s\n", t.addr)
	}
	if c.Lite > 0 {
		t.group = c.Topic + "-lite"
		if t.embedded != nil {
			if err := t.createLite(); err != nil {
				t.close()
				return nil, err
			}
		}
	}
	if err := t.createTopic(ctx); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// dial opens a plaintext connection to the front end.
func (t *grpcTarget) dial() (rmqpb.MessagingServiceClient, error) {
	cc, err := grpc.NewClient(t.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20), grpc.ForceCodecV2(grpcfe.Codec())),
		// As the server's: no stop for window updates.
		grpc.WithInitialWindowSize(1<<20), grpc.WithInitialConnWindowSize(16<<20),
		// The front end's message buffers (grpcfe.BufferPool, and its codec
		// above), not grpc-go's default pool, which clears a 1 MiB buffer
		// for a 33 KB request.
		experimental.WithBufferPool(grpcfe.BufferPool()))
	if err != nil {
		return nil, fmt.Errorf("benchmark: dial %s: %w", t.addr, err)
	}
	t.mu.Lock()
	t.conns = append(t.conns, cc)
	t.mu.Unlock()
	return rmqpb.NewMessagingServiceClient(cc), nil
}

// callCtx is ctx with the client id every RocketMQ 5 call carries.
func callCtx(ctx context.Context, id string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", id)
}

// createTopic asks for the topic's route (which creates it) and checks it
// has queues.
func (t *grpcTarget) createTopic(ctx context.Context) error {
	cli, err := t.dial()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(callCtx(ctx, "bench-setup"), 10*time.Second)
	defer cancel()
	r, err := cli.QueryRoute(cctx, &rmqpb.QueryRouteRequest{Topic: &rmqpb.Resource{Name: t.cfg.Topic}})
	if err != nil {
		return fmt.Errorf("benchmark: QueryRoute %s: %w", t.cfg.Topic, err)
	}
	if r.GetStatus().GetCode() != rmqpb.Code_OK || len(r.MessageQueues) == 0 {
		return fmt.Errorf("benchmark: QueryRoute %s: %v", t.cfg.Topic, r.GetStatus())
	}
	return nil
}

// statusErr is a non-OK status as an error.
func statusErr(st *rmqpb.Status) error {
	if st.GetCode() == rmqpb.Code_OK {
		return nil
	}
	return fmt.Errorf("%s: %s", st.GetCode(), st.GetMessage())
}

// grpcSender is one producer: a worker goroutine per in-flight slot.
type grpcSender struct {
	t      *grpcTarget
	cli    rmqpb.MessagingServiceClient
	md     metadata.MD
	slots  []chan grpcSend
	prefix string
}

type grpcSend struct {
	ctx    context.Context // the run's; the worker adds the producer's metadata
	bodies [][]byte
	done   func(error)
}

func (t *grpcTarget) producer(id int) (sender, error) {
	cli, err := t.dial()
	if err != nil {
		return nil, err
	}
	s := &grpcSender{t: t, cli: cli, md: metadata.Pairs("x-mq-client-id", fmt.Sprintf("bench-producer-%d", id)),
		slots: make([]chan grpcSend, t.cfg.Inflight), prefix: fmt.Sprintf("B%08X%02X", time.Now().Unix()&0xFFFFFFFF, id&0xFF)}
	for i := range s.slots {
		ch := make(chan grpcSend, 1)
		s.slots[i] = ch
		go s.worker(ch)
	}
	return s, nil
}

// worker sends its slot's requests, reusing one request and its messages.
func (s *grpcSender) worker(ch chan grpcSend) {
	req := &rmqpb.SendMessageRequest{}
	topic := &rmqpb.Resource{Name: s.t.cfg.Topic}
	// The call's context: the run's with the producer's metadata, made
	// again only when the run's context changes (it does not within a
	// run): two allocations per message less in the generator.
	var runCtx, outCtx context.Context
	for job := range ch {
		if job.ctx != runCtx {
			runCtx, outCtx = job.ctx, metadata.NewOutgoingContext(job.ctx, s.md)
		}
		for len(req.Messages) < len(job.bodies) {
			req.Messages = append(req.Messages, &rmqpb.Message{Topic: topic, SystemProperties: &rmqpb.SystemProperties{
				BodyEncoding: rmqpb.Encoding_IDENTITY, MessageType: s.t.messageType(), BornTimestamp: &timestamppb.Timestamp{}}})
		}
		req.Messages = req.Messages[:len(job.bodies)]
		now := time.Now()
		for i, b := range job.bodies {
			m := req.Messages[i]
			m.Body = b
			m.SystemProperties.MessageId = s.prefix + strconv.FormatUint(s.t.seq.Add(1), 16)
			m.SystemProperties.BornTimestamp.Seconds, m.SystemProperties.BornTimestamp.Nanos = now.Unix(), int32(now.Nanosecond())
			if s.t.cfg.Lite > 0 {
				m.SystemProperties.LiteTopic = s.t.liteName(s.t.seq.Load())
			}
		}
		r, err := s.cli.SendMessage(outCtx, req)
		if err == nil {
			err = statusErr(r.GetStatus())
		}
		job.done(err)
	}
}

func (s *grpcSender) send(ctx context.Context, slot int, bodies [][]byte, done func(error)) {
	s.slots[slot] <- grpcSend{ctx: ctx, bodies: bodies, done: done}
}

func (t *grpcTarget) consumer(id int) (receiver, error) {
	return &grpcReceiver{t: t, id: id}, nil
}

func (t *grpcTarget) setFromStart() {
	t.mu.Lock()
	t.fromStart = true
	if t.cfg.Lite == 0 {
		t.group = fmt.Sprintf("apogee-bench-backlog-%d", time.Now().UnixNano())
	}
	t.mu.Unlock()
}

// grpcReceiver is one consumer: receive, hand the bodies over, ack the batch.
type grpcReceiver struct {
	t  *grpcTarget
	id int
}

// startGroup commits the group's offset of every queue (the first, or the
// end: RocketMQ 5 has no consume-from option), once per target.
func (t *grpcTarget) startGroup(ctx context.Context, cli rmqpb.MessagingServiceClient, group string, fromStart bool) error {
	r, err := cli.QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: &rmqpb.Resource{Name: t.cfg.Topic}})
	if err != nil {
		return err
	}
	if err := statusErr(r.GetStatus()); err != nil {
		return err
	}
	policy := rmqpb.QueryOffsetPolicy_END
	if fromStart {
		policy = rmqpb.QueryOffsetPolicy_BEGINNING
	}
	for _, mq := range r.MessageQueues {
		q, err := cli.QueryOffset(ctx, &rmqpb.QueryOffsetRequest{MessageQueue: mq, QueryOffsetPolicy: policy})
		if err != nil {
			return err
		}
		if err := statusErr(q.GetStatus()); err != nil {
			return err
		}
		u, err := cli.UpdateOffset(ctx, &rmqpb.UpdateOffsetRequest{Group: &rmqpb.Resource{Name: group}, MessageQueue: mq, Offset: q.Offset})
		if err != nil {
			return err
		}
		if err := statusErr(u.GetStatus()); err != nil {
			return err
		}
	}
	return nil
}

var startOnce sync.Map // group -> *sync.Once

func (r *grpcReceiver) receive(ctx context.Context, id int, onMsg func([]byte)) error {
	t := r.t
	t.mu.Lock()
	group, fromStart := t.group, t.fromStart
	t.mu.Unlock()
	cli, err := t.dial()
	if err != nil {
		return err
	}
	cctx := callCtx(ctx, fmt.Sprintf("bench-consumer-%d", id))
	if t.cfg.Lite > 0 {
		stop, err := t.startLite(cctx, cli, id, fromStart)
		if err != nil {
			return err
		}
		defer stop()
	} else {
		o, _ := startOnce.LoadOrStore(group, new(sync.Once))
		var startErr error
		o.(*sync.Once).Do(func() { startErr = t.startGroup(cctx, cli, group, fromStart) })
		if startErr != nil {
			return fmt.Errorf("benchmark: start group %s: %w", group, startErr)
		}
	}
	req := &rmqpb.ReceiveMessageRequest{
		Group:            &rmqpb.Resource{Name: group},
		MessageQueue:     &rmqpb.MessageQueue{Topic: &rmqpb.Resource{Name: t.cfg.Topic}, Id: -1},
		FilterExpression: &rmqpb.FilterExpression{Type: rmqpb.FilterType_TAG, Expression: "*"},
		BatchSize:        32, InvisibleDuration: durationpb.New(30 * time.Second),
		LongPollingTimeout: durationpb.New(5 * time.Second),
	}
	ack := &rmqpb.AckMessageRequest{Group: req.Group, Topic: req.MessageQueue.Topic}
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(cctx, 10*time.Second)
		st, err := cli.ReceiveMessage(rctx, req)
		if err != nil {
			cancel()
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		ack.Entries = ack.Entries[:0]
		for {
			resp, err := st.Recv()
			if err != nil {
				break // io.EOF, or the call ended with ctx
			}
			if m := resp.GetMessage(); m != nil {
				onMsg(m.Body)
				ack.Entries = append(ack.Entries, &rmqpb.AckMessageEntry{MessageId: m.SystemProperties.GetMessageId(),
					ReceiptHandle: m.SystemProperties.GetReceiptHandle(), LiteTopic: m.SystemProperties.LiteTopic})
			}
		}
		cancel()
		if len(ack.Entries) > 0 {
			actx, cancel := context.WithTimeout(cctx, 10*time.Second)
			a, err := cli.AckMessage(actx, ack)
			cancel()
			if err == nil {
				err = statusErr(a.GetStatus())
			}
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("benchmark: ack: %w", err)
			}
		}
	}
	return nil
}

func (t *grpcTarget) close() error {
	var errs []error
	t.mu.Lock()
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	for _, cc := range conns {
		cc.Close()
	}
	if t.fe != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := t.fe.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
		if err := <-t.feDone; err != nil {
			errs = append(errs, err)
		}
	}
	if t.embedded != nil {
		if err := t.embedded.close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
