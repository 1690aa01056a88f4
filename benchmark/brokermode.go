package benchmark

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// brokerTarget drives a broker through Apogee's client: one Producer (its
// own connection) per producer, one push consumer per consumer, all in one
// group. With no address it runs an embedded broker in a temporary
// directory; the broker answers name-server requests on its own address.
type brokerTarget struct {
	cfg       Config
	addr      string // name server (the broker itself when embedded)
	b         *broker.Broker
	dir       string
	removeDir bool
	serveErr  chan error
	child     *childBroker // the broker's process with Config.ChildBroker

	mu        sync.Mutex
	producers []*client.Producer
	consumers []*client.PushConsumer
	fromStart bool
	group     string

	tls       *tls.Config     // the clients' (Config.TLS, trusting the embedded broker's certificate)
	tlsServer *tlsconf.Server // the embedded broker's TLS, or nil
	guard     *acl.Guard      // the embedded broker's access control, or nil
}

func openBrokerTarget(ctx context.Context, c Config) (target, error) {
	t := &brokerTarget{cfg: c, addr: c.Addr, group: fmt.Sprintf("apogee-bench-%d", time.Now().UnixNano()), tls: c.TLS}
	if t.addr == "" {
		start := t.startEmbedded
		if c.ChildBroker {
			start = t.startChild
		}
		if err := start(); err != nil {
			t.close()
			return nil, err
		}
	}
	if err := t.createTopic(ctx); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// createTopic sends one message so that the broker creates the topic (with
// cfg.Queues queues) before consumers subscribe to it.
func (t *brokerTarget) createTopic(ctx context.Context) error {
	p, err := client.NewProducer(producerOpts(t.clientOpts(), client.NameServer(t.addr), client.InstanceName("bench-setup"),
		client.ProducerGroup("apogee-bench-setup"), client.DefaultTopicQueueNums(t.cfg.Queues), client.Logger(t.quietLogger()))...)
	if err != nil {
		return err
	}
	defer p.Close(ctx)
	body := make([]byte, 8) // a zero send time: consumers skip it
	if _, err := p.SendSync(ctx, &client.Message{Topic: t.cfg.Topic, Body: body}); err != nil {
		return fmt.Errorf("benchmark: create topic %q by sending to it: %w", t.cfg.Topic, err)
	}
	return nil
}

func (t *brokerTarget) startEmbedded() error {
	t.dir = t.cfg.DataDir
	if t.dir == "" {
		d, err := os.MkdirTemp("", "apogee-bench-broker-")
		if err != nil {
			return err
		}
		t.dir, t.removeDir = d, true
	}
	mode, err := store.ParseFlushMode(t.cfg.Flush)
	if err != nil {
		return err
	}
	var ro remoting.Options
	guard, err := t.embeddedSecurity(&ro)
	if err != nil {
		return err
	}
	var security broker.Security
	if guard != nil {
		t.guard, security = guard, guard
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	b, err := broker.New(broker.Options{Core: core.Options{DataDir: t.dir, Store: store.Options{FlushMode: mode}, AdvertiseAddr: l.Addr().String(), DefaultTopicQueues: t.cfg.Queues, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, Remoting: &ro, Security: security})
	if err != nil {
		l.Close()
		return fmt.Errorf("benchmark: embedded broker: %w", err)
	}
	t.b, t.addr = b, l.Addr().String()
	t.serveErr = make(chan error, 1)
	go func() { t.serveErr <- b.Serve(l) }()
	fmt.Fprintf(t.cfg.Out, "embedded broker on %s (data %s, flush %s)\n", t.addr, t.dir, t.cfg.Flush)
	return nil
}

func (t *brokerTarget) quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

type clientSender struct {
	p         *client.Producer
	t         *brokerTarget
	msgs      [][]*client.Message // per slot
	callbacks []func(client.SendResult, error)
	dones     []func(error)
}

func (t *brokerTarget) producer(id int) (sender, error) {
	p, err := client.NewProducer(producerOpts(t.clientOpts(),
		client.NameServer(t.addr),
		client.InstanceName(fmt.Sprintf("bench-producer-%d", id)),
		client.ProducerGroup("apogee-bench-producers"),
		client.MaxInflight(t.cfg.Inflight*t.cfg.Batch),
		// The bodies are incompressible, and zlib would measure the client's
		// CPU rather than the broker: RocketMQ clients compress bodies of
		// 4 KiB and more by default, the benchmark does not.
		client.CompressOver(-1),
		client.DefaultTopicQueueNums(t.cfg.Queues),
		client.Logger(t.quietLogger()),
	)...)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.producers = append(t.producers, p)
	t.mu.Unlock()
	s := &clientSender{p: p, t: t, msgs: make([][]*client.Message, t.cfg.Inflight),
		callbacks: make([]func(client.SendResult, error), t.cfg.Inflight), dones: make([]func(error), t.cfg.Inflight)}
	for i := range s.msgs {
		s.msgs[i] = make([]*client.Message, t.cfg.Batch)
		for j := range s.msgs[i] {
			s.msgs[i][j] = &client.Message{Topic: t.cfg.Topic}
		}
		// One callback per slot, made once: no closure per message.
		s.callbacks[i] = func(_ client.SendResult, err error) { s.dones[i](err) }
	}
	return s, nil
}

func (s *clientSender) send(ctx context.Context, slot int, bodies [][]byte, done func(error)) {
	msgs := s.msgs[slot]
	for i, b := range bodies {
		msgs[i].Body = b
	}
	if len(msgs) == 1 {
		s.dones[slot] = done
		if err := s.p.SendAsync(ctx, msgs[0], s.callbacks[slot]); err != nil {
			done(err)
		}
		return
	}
	// Batches go synchronously, one goroutine per in-flight batch.
	go func() {
		_, err := s.p.SendBatch(ctx, msgs)
		done(err)
	}()
}

func (t *brokerTarget) consumer(id int) (receiver, error) {
	return &clientReceiver{t: t, id: id}, nil
}

func (t *brokerTarget) setFromStart() {
	t.mu.Lock()
	t.fromStart = true
	t.group = fmt.Sprintf("apogee-bench-backlog-%d", time.Now().UnixNano())
	t.mu.Unlock()
}

type clientReceiver struct {
	t  *brokerTarget
	id int
}

func (r *clientReceiver) receive(ctx context.Context, id int, onMsg func([]byte)) error {
	t := r.t
	t.mu.Lock()
	from := client.ConsumeFromLastOffset
	if t.fromStart {
		from = client.ConsumeFromFirstOffset
	}
	group := t.group
	t.mu.Unlock()
	c, err := client.NewPushConsumer(pushOpts(t.clientOpts(),
		client.NameServer(t.addr),
		client.InstanceName(fmt.Sprintf("bench-consumer-%d", id)),
		client.ConsumerGroup(group),
		client.Subscribe(t.cfg.Topic, "*"),
		client.WithConsumeFrom(from),
		client.Logger(t.quietLogger()),
		client.WithConcurrentListener(func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
			for _, m := range msgs {
				onMsg(m.Body)
			}
			return client.ConsumeSuccess
		}),
	)...)
	if err != nil {
		return err
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	t.mu.Lock()
	t.consumers = append(t.consumers, c)
	t.mu.Unlock()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Close(sctx)
}

func (t *brokerTarget) close() error {
	var errs []error
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	t.mu.Lock()
	producers := t.producers
	t.producers = nil
	t.mu.Unlock()
	for _, p := range producers {
		if err := p.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if t.b != nil {
		if err := t.b.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
		<-t.serveErr
	}
	if t.tlsServer != nil {
		t.tlsServer.Close()
	}
	if t.guard != nil {
		t.guard.Close()
	}
	if t.child != nil {
		if err := t.child.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if t.removeDir {
		os.RemoveAll(t.dir)
	}
	return errors.Join(errs...)
}
