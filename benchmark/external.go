package benchmark

import (
	"context"
	"errors"
)

// Drivers for other systems.
//
// A driver outside this package (the NATS JetStream driver in
// benchmark/natsdriver, a module of its own so that Apogee's dependency list
// stays as it is) implements Target, and RunTarget drives it with the same
// producers, rate control, histograms, reports and CPU accounting as
// Apogee's own targets.

// Target is a system a driver measures.
type Target interface {
	// Producer returns producer id's sender; it is called once per producer.
	Producer(id int) (Sender, error)
	// Consumer returns consumer id's receiver; it is called once per consumer.
	Consumer(id int) (Receiver, error)
	// Close releases everything the target holds, after the run.
	Close() error
}

// Sender sends one request of bodies (Config.Batch of them) and calls done
// exactly once with the outcome, from any goroutine, possibly before Send
// returns. Slot is the in-flight slot, in [0, Config.Inflight): a slot has
// one request outstanding at a time, so per-request state may be kept by
// slot. The harness owns bodies and reuses them once done is called.
type Sender interface {
	Send(ctx context.Context, slot int, bodies [][]byte, done func(error))
}

// Receiver hands each received body to onMsg until ctx ends, then returns
// (nil, or the error that stopped it earlier). onMsg must not keep body.
type Receiver interface {
	Receive(ctx context.Context, id int, onMsg func(body []byte)) error
}

// FromStarter is a Target that can make its next consumers start from the
// first message rather than the tail (consume mode drains a backlog).
type FromStarter interface {
	FromStart()
}

// BrokerPIDer is a Target that knows its server's process on this machine
// (for the broker's CPU per message; otherwise it is found from Config.Addr).
type BrokerPIDer interface {
	BrokerPID() int
}

// RunTarget runs the workload cfg describes against the Target open returns,
// as Run does against Apogee; driver names it in the summary. Store mode and
// the child broker are Apogee's own: they are refused.
func RunTarget(ctx context.Context, cfg Config, driver string, open func(context.Context, Config) (Target, error)) (*Result, error) {
	if cfg.Mode == ModeStore || cfg.ChildBroker {
		return nil, errors.New("benchmark: store mode and the child broker are Apogee's own, not a driver's")
	}
	cfg.Driver = driver
	return runWith(ctx, cfg, func(ctx context.Context, c Config) (target, error) {
		t, err := open(ctx, c)
		if err != nil {
			return nil, err
		}
		return externalTarget{t}, nil
	})
}

// externalTarget adapts a Target to the harness's own interfaces.
type externalTarget struct{ t Target }

func (e externalTarget) producer(id int) (sender, error) {
	s, err := e.t.Producer(id)
	if err != nil {
		return nil, err
	}
	return externalSender{s}, nil
}

func (e externalTarget) consumer(id int) (receiver, error) {
	r, err := e.t.Consumer(id)
	if err != nil {
		return nil, err
	}
	return externalReceiver{r}, nil
}

func (e externalTarget) close() error { return e.t.Close() }

func (e externalTarget) setFromStart() {
	if f, ok := e.t.(FromStarter); ok {
		f.FromStart()
	}
}

func (e externalTarget) brokerPID() int {
	if p, ok := e.t.(BrokerPIDer); ok {
		return p.BrokerPID()
	}
	return 0
}

type externalSender struct{ s Sender }

func (e externalSender) send(ctx context.Context, slot int, bodies [][]byte, done func(error)) {
	e.s.Send(ctx, slot, bodies, done)
}

type externalReceiver struct{ r Receiver }

func (e externalReceiver) receive(ctx context.Context, id int, onMsg func([]byte)) error {
	return e.r.Receive(ctx, id, onMsg)
}
