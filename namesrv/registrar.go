package namesrv

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"sync"
	"time"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Defaults of a Registrar.
const (
	// DefaultRegisterPeriod is how often a broker registers again (Java:
	// registerNameServerPeriod, 30 s).
	DefaultRegisterPeriod = 30 * time.Second
	// DefaultRegisterTimeout bounds one exchange with one name server.
	DefaultRegisterTimeout = 6 * time.Second
	// reconnectDelay is the pause before registering again after a connection to a
	// name server closed (which makes that name server drop the broker at once).
	reconnectDelay = time.Second
)

// ErrRegistrarClosed is returned by Close when the registrar had already been closed.
var ErrRegistrarClosed = errors.New("namesrv: registrar closed")

// Registrar registers a broker with external name servers: REGISTER_BROKER to every
// address at Start, every Period, at once on Trigger, and soon after a connection to a
// name server closes (a name server drops the brokers of a closed connection); and
// UNREGISTER_BROKER to every address on Close. Each round asks source for the
// registration, encodes it once (JSON body with bodyCrc32) and sends it to all
// addresses concurrently. Failures are logged and retried with the next round.
//
// The exported fields may be set between NewRegistrar and Start, not later.
type Registrar struct {
	// Period between registrations. Default DefaultRegisterPeriod (30 s).
	Period time.Duration
	// Timeout bounds one request to one name server. Default DefaultRegisterTimeout (6 s).
	Timeout time.Duration
	// OnResult, if set, is called after every REGISTER_BROKER exchange with the name
	// server's answer (whose MasterAddr and HAServerAddr a slave needs) or the error.
	// An exchange that failed because Close cancelled its round is not reported. It
	// runs on the registering goroutine of that address and must not block.
	OnResult func(addr string, resp protocol.RegisterBrokerResponse, err error)

	addrs  []string
	pool   *remoting.Pool
	source func() BrokerRegistration
	log    *slog.Logger

	trigger   chan struct{}
	stop      chan struct{}
	done      chan struct{}
	startOnce sync.Once
	closeOnce sync.Once
	started   bool // set by Start, read by Close (after startOnce)

	mu      sync.Mutex
	watched map[string]*remoting.Client // the connection last registered over, per address
	watches sync.WaitGroup
}

// NewRegistrar returns a registrar for the name servers at addrs ("host:port"). It
// dials them through pool, which the caller owns (and closes after Close). source is
// called once per round on the registrar's goroutine (and once by Close, for the
// identity to unregister) and must return the broker's current registration; it must
// be safe to call concurrently with the broker's own updates. logger may be nil
// (slog.Default()).
func NewRegistrar(addrs []string, pool *remoting.Pool, source func() BrokerRegistration, logger *slog.Logger) *Registrar {
	if logger == nil {
		logger = slog.Default()
	}
	return &Registrar{
		addrs:   append([]string(nil), addrs...),
		pool:    pool,
		source:  source,
		log:     logger,
		trigger: make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		watched: make(map[string]*remoting.Client),
	}
}

// Start registers at once and then every Period, on a goroutine of its own. Calling it
// again does nothing.
func (g *Registrar) Start() {
	g.startOnce.Do(func() {
		if g.Period <= 0 {
			g.Period = DefaultRegisterPeriod
		}
		if g.Timeout <= 0 {
			g.Timeout = DefaultRegisterTimeout
		}
		g.started = true
		go g.run()
	})
}

// Trigger asks for a registration round now (after a topic was created or changed).
// It never blocks; triggers that arrive during a round cause one more round.
func (g *Registrar) Trigger() {
	select {
	case g.trigger <- struct{}{}:
	default:
	}
}

// Close stops the periodic registration (cancelling a round in progress), then sends
// UNREGISTER_BROKER to every name server, bounded by ctx and Timeout each (nothing is
// sent if Start was never called). It does not close the pool. It returns
// the unregistration failures joined, ctx's error if ctx ended first, or
// ErrRegistrarClosed on a second call.
func (g *Registrar) Close(ctx context.Context) error {
	first := false
	g.closeOnce.Do(func() { first = true })
	if !first {
		return ErrRegistrarClosed
	}
	g.startOnce.Do(func() {}) // a later Start does nothing
	close(g.stop)
	if !g.started {
		return nil
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	g.watches.Wait()

	reg := g.source()
	h := protocol.UnregisterBrokerRequest{BrokerName: reg.BrokerName, BrokerAddr: reg.BrokerAddr,
		ClusterName: reg.ClusterName, BrokerID: reg.BrokerID}
	errs := make([]error, len(g.addrs))
	var wg sync.WaitGroup
	for i, addr := range g.addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var req protocol.Command
			req.InitRequest(protocol.ReqUnregisterBroker, 0)
			h.Encode(&req.Ext)
			_, err := g.invoke(ctx, addr, &req)
			if err != nil {
				errs[i] = fmt.Errorf("namesrv: unregister from %s: %w", addr, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (g *Registrar) run() {
	defer close(g.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-g.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	t := time.NewTimer(0) // the first round at once
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		case <-g.trigger:
		}
		g.registerAll(ctx)
		t.Reset(g.Period)
	}
}

// registerAll sends one registration to every address and waits for all answers.
func (g *Registrar) registerAll(ctx context.Context) {
	reg := g.source()
	body, err := encodeRegistration(&reg)
	if err != nil {
		g.log.Error("namesrv: cannot encode registration", "err", err)
		return
	}
	h := protocol.RegisterBrokerRequest{BrokerName: reg.BrokerName, BrokerAddr: reg.BrokerAddr,
		ClusterName: reg.ClusterName, HAServerAddr: reg.HAServerAddr, BrokerID: reg.BrokerID,
		BodyCRC32: int32(crc32.ChecksumIEEE(body) & 0x7FFFFFFF)}
	var wg sync.WaitGroup
	for _, addr := range g.addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var req protocol.Command
			req.InitRequest(protocol.ReqRegisterBroker, 0)
			h.Encode(&req.Ext)
			req.Body = body
			var out protocol.RegisterBrokerResponse
			resp, err := g.invoke(ctx, addr, &req)
			if err == nil {
				err = out.Decode(&resp.Ext)
			}
			if err != nil {
				if ctx.Err() != nil {
					return // Close cancelled the round: not a failure to report
				}
				g.log.Warn("namesrv: registration failed", "namesrv", addr, "broker", reg.BrokerName, "err", err)
			} else {
				g.log.Debug("namesrv: registered", "namesrv", addr, "broker", reg.BrokerName, "topics", len(reg.Topics))
			}
			if g.OnResult != nil {
				g.OnResult(addr, out, err)
			}
		}()
	}
	wg.Wait()
}

// invoke sends req to addr and returns a SUCCESS response, or an error (transport, or
// the name server's code and remark). A connection a registration succeeded over is
// watched, so that its loss triggers a new round.
func (g *Registrar) invoke(ctx context.Context, addr string, req *protocol.Command) (*protocol.Command, error) {
	ctx, cancel := context.WithTimeout(ctx, g.Timeout)
	defer cancel()
	cl, err := g.pool.Get(ctx, addr)
	if err != nil {
		return nil, err
	}
	resp, err := cl.Invoke(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.Code != protocol.RespSuccess {
		return nil, fmt.Errorf("namesrv: %s answered %s: code %d (%s)", addr,
			protocol.RequestCodeName(req.Code), resp.Code, resp.Remark)
	}
	if req.Code == protocol.ReqRegisterBroker {
		g.watch(addr, cl)
	}
	return resp, nil
}

// watch starts, once per connection, a goroutine that triggers a round shortly after
// that connection closes.
func (g *Registrar) watch(addr string, cl *remoting.Client) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.watched[addr] == cl {
		return
	}
	select {
	case <-g.stop:
		return
	default:
	}
	g.watched[addr] = cl
	g.watches.Add(1)
	go func() {
		defer g.watches.Done()
		select {
		case <-g.stop:
			return
		case <-cl.Done():
		}
		t := time.NewTimer(min(reconnectDelay, g.Period))
		defer t.Stop()
		select {
		case <-g.stop:
		case <-t.C:
			g.Trigger()
		}
	}()
}

// encodeRegistration returns the JSON body of REGISTER_BROKER for reg.
func encodeRegistration(reg *BrokerRegistration) ([]byte, error) {
	table := make(map[string]*protocol.TopicConfig, len(reg.Topics))
	for i := range reg.Topics {
		tc := reg.Topics[i]
		if tc.TopicFilterType == "" {
			tc.TopicFilterType = "SINGLE_TAG"
		}
		table[tc.TopicName] = &tc
	}
	body := protocol.RegisterBrokerBody{TopicConfigSerializeWrapper: protocol.TopicConfigSerializeWrapper{
		TopicConfigTable: table, DataVersion: reg.DataVersion}}
	b, err := body.Encode()
	if err != nil {
		return nil, fmt.Errorf("namesrv: encode registration: %w", err)
	}
	return b, nil
}
