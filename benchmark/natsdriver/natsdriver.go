// Package natsdriver is apogee-bench's driver for NATS JetStream: the same
// produce, consume and e2e workloads, rate control, histograms, CPU
// accounting and counts of system calls and context switches per message
// (benchmark.RunTarget; the server's from its /proc files, as for
// apogee-broker) against a nats-server with JetStream, so that one harness
// measures Apogee and NATS side by side. It is a module of
// its own so that Apogee's dependency list does not grow by the NATS client.
//
// The workload maps onto JetStream as follows:
//
//   - The topic is a stream (Stream, default APOGEE_BENCH) with file storage
//     and one replica over the subjects "<topic>.<queue>", one per queue. The
//     stream is deleted and created afresh when a run starts, so every run
//     writes into an empty stream, as Apogee's runs write at the end of their
//     commit log.
//   - A producer is a connection publishing to the queues' subjects in turn,
//     each message with a reply subject of its in-flight slot under the
//     producer's own inbox; the server's PubAck to it completes the slot.
//     That is what nats.go's asynchronous JetStream publish does, less a
//     future and a map entry per message.
//   - A consumer is a connection pulling from one durable pull consumer
//     shared by all of them (like one RocketMQ consumer group), with
//     AckPolicy none: neither side acknowledges each message (RocketMQ's
//     cluster consumers commit offsets every few seconds). e2e starts it at
//     the new messages, consume mode (after FromStart) at the first.
//
// Whether the server syncs before it acknowledges is its own configuration
// (jetstream { sync_interval: always }), not the driver's.
package natsdriver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/apogeemq/apogee/benchmark"
)

// DefaultURL is where nats-server listens by default.
const DefaultURL = "nats://127.0.0.1:4222"

// DefaultStream is the stream a run writes to.
const DefaultStream = "APOGEE_BENCH"

// ackGrace is how long a stopping producer waits for the acknowledgements of
// what it has in flight before it fails them.
const ackGrace = 5 * time.Second

// Options of the driver beyond benchmark.Config.
type Options struct {
	Stream string // default DefaultStream
}

// Run runs c's workload against the NATS server at c.Addr (default
// DefaultURL).
func Run(ctx context.Context, c benchmark.Config, o Options) (*benchmark.Result, error) {
	if c.Addr == "" {
		c.Addr = DefaultURL
	}
	return benchmark.RunTarget(ctx, c, "nats", func(ctx context.Context, c benchmark.Config) (benchmark.Target, error) {
		return Open(ctx, c, o)
	})
}

// Target is a NATS JetStream server as a benchmark.Target.
type Target struct {
	cfg    benchmark.Config
	stream string
	nc     *nats.Conn // set-up and the shared consumer
	js     jetstream.JetStream

	mu        sync.Mutex
	fromStart bool
	consumer  string // durable name of the current pull consumer, "" until made
	conns     []*nats.Conn
}

// Open connects to c.Addr and creates the stream afresh. c is complete
// (benchmark.RunTarget applies the defaults).
func Open(ctx context.Context, c benchmark.Config, o Options) (*Target, error) {
	if o.Stream == "" {
		o.Stream = DefaultStream
	}
	nc, err := nats.Connect(c.Addr, nats.Name("apogee-bench-setup"))
	if err != nil {
		return nil, fmt.Errorf("natsdriver: connect %s: %w", c.Addr, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsdriver: %w", err)
	}
	t := &Target{cfg: c, stream: o.Stream, nc: nc, js: js}
	if err := js.DeleteStream(ctx, o.Stream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		nc.Close()
		return nil, fmt.Errorf("natsdriver: delete stream %s of an earlier run: %w", o.Stream, err)
	}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     o.Stream,
		Subjects: []string{c.Topic + ".*"},
		Storage:  jetstream.FileStorage,
		Replicas: 1,
	})
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("natsdriver: create stream %s: %w", o.Stream, err)
	}
	fmt.Fprintf(c.Out, "NATS JetStream at %s: stream %s over %s.* (%d subjects), file storage, 1 replica\n", c.Addr, o.Stream, c.Topic, c.Queues)
	return t, nil
}

func (t *Target) connect(name string) (*nats.Conn, error) {
	nc, err := nats.Connect(t.cfg.Addr, nats.Name(name))
	if err != nil {
		return nil, fmt.Errorf("natsdriver: connect %s: %w", t.cfg.Addr, err)
	}
	t.mu.Lock()
	t.conns = append(t.conns, nc)
	t.mu.Unlock()
	return nc, nil
}

// Close closes every connection the target opened. The stream stays, for a
// look at it after the run; the next run deletes it.
func (t *Target) Close() error {
	t.mu.Lock()
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	for _, nc := range conns {
		nc.Close()
	}
	t.nc.Close()
	return nil
}

// FromStart makes the next consumers read the stream from its first message.
func (t *Target) FromStart() {
	t.mu.Lock()
	t.fromStart, t.consumer = true, ""
	t.mu.Unlock()
}

// producer is one connection publishing with a reply subject per slot.
type producer struct {
	t        *Target
	nc       *nats.Conn
	subjects []string // one per queue
	replies  []string // one per slot
	prefix   string   // the replies' common prefix, "<inbox>."
	next     atomic.Uint32

	mu      sync.Mutex
	slots   []slotState
	pending int // slots with a request outstanding
	watch   sync.Once
	idle    chan struct{} // signalled when pending drops to 0
}

type slotState struct {
	remaining int // acknowledgements still expected
	err       error
	done      func(error)
}

// Producer opens producer id's connection.
func (t *Target) Producer(id int) (benchmark.Sender, error) {
	nc, err := t.connect(fmt.Sprintf("apogee-bench-producer-%d", id))
	if err != nil {
		return nil, err
	}
	p := &producer{t: t, nc: nc, prefix: nats.NewInbox() + ".", slots: make([]slotState, t.cfg.Inflight), idle: make(chan struct{}, 1)}
	for q := 0; q < t.cfg.Queues; q++ {
		p.subjects = append(p.subjects, fmt.Sprintf("%s.%d", t.cfg.Topic, q))
	}
	for s := 0; s < t.cfg.Inflight; s++ {
		p.replies = append(p.replies, p.prefix+strconv.Itoa(s))
	}
	if _, err := nc.Subscribe(p.prefix+"*", p.acked); err != nil {
		return nil, fmt.Errorf("natsdriver: subscribe to acknowledgements: %w", err)
	}
	return p, nil
}

// Send publishes each body with the slot's reply subject; the slot is done
// when every one is acknowledged (or one fails and the rest are answered).
func (p *producer) Send(ctx context.Context, slot int, bodies [][]byte, done func(error)) {
	p.watch.Do(func() { go p.failAfter(ctx) })
	p.mu.Lock()
	p.slots[slot] = slotState{remaining: len(bodies), done: done}
	p.pending++
	p.mu.Unlock()
	for i, b := range bodies {
		subj := p.subjects[p.next.Add(1)%uint32(len(p.subjects))]
		if err := p.nc.PublishRequest(subj, p.replies[slot], b); err != nil {
			// The rest of the batch is not sent: count it as answered.
			p.complete(slot, len(bodies)-i, fmt.Errorf("natsdriver: publish: %w", err))
			return
		}
	}
}

// acked handles a PubAck (or an error) for a slot.
func (p *producer) acked(m *nats.Msg) {
	slot, err := strconv.Atoi(m.Subject[len(p.prefix):])
	if err != nil || slot < 0 || slot >= len(p.slots) {
		return
	}
	p.complete(slot, 1, ackError(m))
}

// ackError is the error a PubAck carries, if any.
func ackError(m *nats.Msg) error {
	if st := m.Header.Get("Status"); st != "" {
		// 503: no responders (no stream takes the subject).
		return fmt.Errorf("natsdriver: publish answered with status %s %s", st, m.Header.Get("Description"))
	}
	if !bytes.Contains(m.Data, []byte(`"error"`)) {
		return nil
	}
	var a struct {
		Error *struct {
			Code        int    `json:"code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &a); err != nil {
		return fmt.Errorf("natsdriver: malformed PubAck %q: %w", m.Data, err)
	}
	if a.Error != nil {
		return fmt.Errorf("natsdriver: publish failed: %d %s", a.Error.Code, a.Error.Description)
	}
	return nil
}

// complete counts n answers for slot and calls its done on the last one.
func (p *producer) complete(slot, n int, err error) {
	p.mu.Lock()
	s := &p.slots[slot]
	if s.done == nil {
		p.mu.Unlock()
		return // a late answer to a slot already failed
	}
	if s.err == nil {
		s.err = err
	}
	s.remaining -= n
	if s.remaining > 0 {
		p.mu.Unlock()
		return
	}
	done, serr := s.done, s.err
	*s = slotState{}
	p.pending--
	if p.pending == 0 {
		select {
		case p.idle <- struct{}{}:
		default:
		}
	}
	p.mu.Unlock()
	done(serr)
}

// failAfter fails what is still in flight ackGrace after ctx ends, so that a
// server that stopped answering cannot hang the end of the run.
func (p *producer) failAfter(ctx context.Context) {
	<-ctx.Done()
	timer := time.NewTimer(ackGrace)
	defer timer.Stop()
	for {
		p.mu.Lock()
		pending := p.pending
		p.mu.Unlock()
		if pending == 0 {
			return
		}
		select {
		case <-p.idle:
			continue
		case <-timer.C:
		}
		break
	}
	for slot := range p.slots {
		p.mu.Lock()
		s := p.slots[slot]
		p.mu.Unlock()
		if s.done != nil {
			p.complete(slot, s.remaining, fmt.Errorf("natsdriver: no acknowledgement %s after the run ended", ackGrace))
		}
	}
}

// receiver is one connection pulling from the shared durable consumer.
type receiver struct {
	t *Target
}

// Consumer returns consumer id's receiver; the shared pull consumer is made
// by the first.
func (t *Target) Consumer(id int) (benchmark.Receiver, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.consumer == "" {
		name := fmt.Sprintf("apogee-bench-%d", time.Now().UnixNano())
		policy := jetstream.DeliverNewPolicy
		if t.fromStart {
			policy = jetstream.DeliverAllPolicy
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err := t.js.CreateOrUpdateConsumer(ctx, t.stream, jetstream.ConsumerConfig{
			Durable:       name,
			DeliverPolicy: policy,
			AckPolicy:     jetstream.AckNonePolicy,
		})
		if err != nil {
			return nil, fmt.Errorf("natsdriver: create consumer: %w", err)
		}
		t.consumer = name
	}
	return &receiver{t: t}, nil
}

// pullBuffer is how many messages a receiver asks for at a time.
const pullBuffer = 1000

// Receive pulls until ctx ends.
func (r *receiver) Receive(ctx context.Context, id int, onMsg func([]byte)) error {
	t := r.t
	t.mu.Lock()
	name := t.consumer
	t.mu.Unlock()
	nc, err := t.connect(fmt.Sprintf("apogee-bench-consumer-%d", id))
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("natsdriver: %w", err)
	}
	cons, err := js.Consumer(ctx, t.stream, name)
	if err != nil {
		return fmt.Errorf("natsdriver: consumer %s: %w", name, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) { onMsg(m.Data()) }, jetstream.PullMaxMessages(pullBuffer))
	if err != nil {
		return fmt.Errorf("natsdriver: consume: %w", err)
	}
	<-ctx.Done()
	cc.Stop()
	<-cc.Closed()
	return nil
}
