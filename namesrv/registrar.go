package namesrv

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/internal/logthrottle"

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
	// topicInflight bounds the REGISTER_TOPIC_IN_NAMESRV requests in flight to one
	// name server during a round.
	topicInflight = 32
)

// ErrRegistrarClosed is returned by Close when the registrar had already been closed.
var ErrRegistrarClosed = errors.New("namesrv: registrar closed")

// Registrar registers a broker with external name servers: a full registration
// (REGISTER_BROKER with the whole topic table) to every address at Start, every
// Period, at once on Trigger, and soon after a connection to a name server closes (a
// name server drops the brokers of a closed connection); single topics
// (REGISTER_TOPIC_IN_NAMESRV) after TopicsChanged; and UNREGISTER_BROKER to every
// address on Close. One round runs at a time, on the registrar's goroutine; requests
// that arrive during a round are coalesced into the next one. A full round asks source
// for the registration, encodes it once (JSON body with bodyCrc32) and sends it to all
// addresses concurrently. Failures are logged and retried with the next round (a
// failed single-topic round makes the next round a full one).
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
	// LookupTopic returns a topic's current configuration, false when it no longer
	// exists; it must be safe for concurrent use. It lets TopicsChanged send single
	// topics: without it, TopicsChanged is Trigger.
	LookupTopic func(topic string) (protocol.TopicConfig, bool)
	// Sign, if set, signs every request before it is sent (a name server
	// with access control on refuses unsigned ones); it must be safe for
	// concurrent use. Default nil: requests unsigned.
	Sign func(req *protocol.Command)

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

	mu       sync.Mutex
	watched  map[string]*remoting.Client // the connection last registered over, per address
	full     bool                        // the next round is a full one (Trigger)
	pending  map[string]struct{}         // topics changed since the last round took them
	noSingle map[string]bool             // addresses that answered 217 with REQUEST_CODE_NOT_SUPPORTED
	identity BrokerRegistration          // the last full registration's identity, without topics
	watches  sync.WaitGroup
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
		addrs:    append([]string(nil), addrs...),
		pool:     pool,
		source:   source,
		log:      logger,
		trigger:  make(chan struct{}, 1),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		watched:  make(map[string]*remoting.Client),
		pending:  make(map[string]struct{}),
		noSingle: make(map[string]bool),
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

// Trigger asks for a full registration round now. It never blocks; triggers that
// arrive during a round cause one more round.
func (g *Registrar) Trigger() {
	g.mu.Lock()
	g.full = true
	g.mu.Unlock()
	g.wake()
}

// TopicsChanged asks for topics (created, changed or deleted) to be sent to the name
// servers with the next round, which starts at once unless one is in progress. It
// never blocks, and its cost does not depend on how many topics exist.
//
// A round sends each changed topic that still exists (LookupTopic) to each name server
// as REGISTER_TOPIC_IN_NAMESRV (217: that topic's queues for this broker name, what
// Java 5 brokers send with enableSingleTopicRegister), with at most topicInflight
// requests in flight per server: the name server updates that topic alone. A name
// server that answers 217 with REQUEST_CODE_NOT_SUPPORTED (Java 4.x, Apogee before
// 217) gets a full registration instead, in that round and every later one. A deleted
// topic makes the round a full registration: Apogee name servers, which replace a
// broker's topic set with each full registration, then drop it; Java name servers
// keep it until DELETE_TOPIC_IN_NAMESRV (as with Java brokers, unless
// deleteTopicWithBrokerRegistration is set there).
//
// Java 5 brokers' default (registerIncrementBrokerData: a REGISTER_BROKER whose body
// holds the changed topics only) is not used: a Java name server merges it, but an
// Apogee name server would take it for the whole topic set.
func (g *Registrar) TopicsChanged(topics ...string) {
	g.mu.Lock()
	if g.LookupTopic == nil {
		g.full = true
	}
	for _, t := range topics {
		g.pending[t] = struct{}{}
	}
	g.mu.Unlock()
	g.wake()
}

func (g *Registrar) wake() {
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
		periodic := false
		select {
		case <-g.stop:
			return
		case <-t.C:
			periodic = true
		case <-g.trigger:
		}
		g.mu.Lock()
		full := periodic || g.full || g.identity.BrokerName == ""
		g.full = false
		var pending map[string]struct{}
		if len(g.pending) > 0 {
			pending, g.pending = g.pending, make(map[string]struct{})
		}
		g.mu.Unlock()
		var topics []protocol.TopicConfig
		if !full {
			topics = make([]protocol.TopicConfig, 0, len(pending))
			for name := range pending {
				cfg, ok := g.LookupTopic(name)
				if !ok {
					full = true // deleted: only a full registration says so
					break
				}
				if cfg.TopicName == "" {
					cfg.TopicName = name
				}
				topics = append(topics, cfg)
			}
		}
		if full {
			// The full registration reads the table after the pending topics were
			// taken: it covers them.
			g.registerAll(ctx)
			t.Reset(g.Period) // the full rounds keep the broker alive on the name servers
		} else if len(topics) > 0 {
			g.registerTopics(ctx, topics)
		}
	}
}

// fullRegistration is one full registration, encoded once for every address.
type fullRegistration struct {
	h      protocol.RegisterBrokerRequest
	body   []byte
	topics int
}

// prepareFull asks source for the registration and encodes it; it records the
// broker's identity for the single-topic rounds.
func (g *Registrar) prepareFull() (*fullRegistration, error) {
	reg := g.source()
	body, err := encodeRegistration(&reg)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.identity = BrokerRegistration{ClusterName: reg.ClusterName, BrokerName: reg.BrokerName,
		BrokerAddr: reg.BrokerAddr, HAServerAddr: reg.HAServerAddr, BrokerID: reg.BrokerID}
	g.mu.Unlock()
	return &fullRegistration{h: protocol.RegisterBrokerRequest{BrokerName: reg.BrokerName, BrokerAddr: reg.BrokerAddr,
		ClusterName: reg.ClusterName, HAServerAddr: reg.HAServerAddr, BrokerID: reg.BrokerID,
		BodyCRC32: int32(crc32.ChecksumIEEE(body) & 0x7FFFFFFF)}, body: body, topics: len(reg.Topics)}, nil
}

// registerAll sends one full registration to every address and waits for all answers.
func (g *Registrar) registerAll(ctx context.Context) {
	full, err := g.prepareFull()
	if err != nil {
		g.log.Error("namesrv: cannot encode registration", "err", err)
		return
	}
	var wg sync.WaitGroup
	for _, addr := range g.addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.sendFull(ctx, addr, full)
		}()
	}
	wg.Wait()
}

// registrationLogs throttles failed registrations (one a round per name
// server, for as long as it is down): one line per registrar and name
// server every 5 minutes, with the count of the ones held back.
var registrationLogs = logthrottle.New(5 * time.Minute)

// sendFull sends a full registration to addr and reports the result.
func (g *Registrar) sendFull(ctx context.Context, addr string, full *fullRegistration) {
	var req protocol.Command
	req.InitRequest(protocol.ReqRegisterBroker, 0)
	full.h.Encode(&req.Ext)
	req.Body = full.body
	var out protocol.RegisterBrokerResponse
	resp, err := g.invoke(ctx, addr, &req)
	if err == nil {
		err = out.Decode(&resp.Ext)
	}
	if err != nil {
		if ctx.Err() != nil {
			return // Close cancelled the round: not a failure to report
		}
		var re *RefusedError
		key := fmt.Sprintf("%p|%s", g, addr)
		if errors.As(err, &re) && re.Code == protocol.RespNoPermission {
			registrationLogs.Error(g.log, key+"|refused", "namesrv: registration refused (NO_PERMISSION): the name server runs with access control; set "+
				`innerClientAuthenticationCredentials in broker.conf ({"accessKey":"...","secretKey":"..."}) to a user with admin rights `+
				"(a Super user) in its ACL, or fix that user", "namesrv", addr, "broker", full.h.BrokerName, "remark", re.Remark)
		} else {
			registrationLogs.Warn(g.log, key, "namesrv: registration failed; retried every round",
				"namesrv", addr, "broker", full.h.BrokerName, "err", err)
		}
	} else {
		key := fmt.Sprintf("%p|%s", g, addr)
		if missed := registrationLogs.Clear(key) + registrationLogs.Clear(key+"|refused"); missed > 0 {
			g.log.Info("namesrv: registered again", "namesrv", addr, "broker", full.h.BrokerName, "failures_not_logged", missed)
		}
		g.log.Debug("namesrv: registered", "namesrv", addr, "broker", full.h.BrokerName, "topics", full.topics)
	}
	if g.OnResult != nil {
		g.OnResult(addr, out, err)
	}
}

// registerTopics sends each of topics to every address as REGISTER_TOPIC_IN_NAMESRV,
// or a full registration to the addresses that do not support it, and waits for all
// answers. A failure makes the next round a full one.
func (g *Registrar) registerTopics(ctx context.Context, topics []protocol.TopicConfig) {
	g.mu.Lock()
	id := g.identity
	g.mu.Unlock()
	bodies := make([][]byte, len(topics))
	for i := range topics {
		tc := &topics[i]
		rd := protocol.TopicRouteData{QueueDatas: []protocol.QueueData{{BrokerName: id.BrokerName,
			ReadQueueNums: tc.ReadQueueNums, WriteQueueNums: tc.WriteQueueNums, Perm: tc.Perm, TopicSysFlag: tc.TopicSysFlag}}}
		bodies[i] = rd.AppendJSON(nil, true)
	}
	var (
		fullOnce sync.Once
		full     *fullRegistration
		fullErr  error
		wg       sync.WaitGroup
	)
	sendFull := func(addr string) {
		fullOnce.Do(func() { full, fullErr = g.prepareFull() })
		if fullErr != nil {
			g.log.Error("namesrv: cannot encode registration", "err", fullErr)
			return
		}
		g.sendFull(ctx, addr, full)
	}
	for _, addr := range g.addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.mu.Lock()
			unsupported := g.noSingle[addr]
			g.mu.Unlock()
			if unsupported {
				sendFull(addr)
				return
			}
			err := g.sendTopics(ctx, addr, topics, bodies)
			switch {
			case err == nil:
				g.log.Debug("namesrv: topics registered", "namesrv", addr, "broker", id.BrokerName, "topics", len(topics))
			case errors.Is(err, errSingleUnsupported):
				g.log.Info("namesrv: name server does not support REGISTER_TOPIC_IN_NAMESRV; registering the whole topic table instead",
					"namesrv", addr)
				g.mu.Lock()
				g.noSingle[addr] = true
				g.mu.Unlock()
				sendFull(addr)
			case ctx.Err() != nil:
				// Close cancelled the round.
			default:
				g.log.Warn("namesrv: topic registration failed; the next round registers everything", "namesrv", addr,
					"broker", id.BrokerName, "topics", len(topics), "err", err)
				g.mu.Lock()
				g.full = true
				g.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// errSingleUnsupported: the name server answered REGISTER_TOPIC_IN_NAMESRV with
// REQUEST_CODE_NOT_SUPPORTED.
var errSingleUnsupported = errors.New("namesrv: REGISTER_TOPIC_IN_NAMESRV not supported")

// sendTopics sends topics (bodies: their encoded routes) to addr, topicInflight at a
// time, and returns the first failure (after which it sends no more).
func (g *Registrar) sendTopics(ctx context.Context, addr string, topics []protocol.TopicConfig, bodies [][]byte) error {
	var (
		next    atomic.Int64
		errOnce sync.Once
		first   error
		failed  atomic.Bool
		wg      sync.WaitGroup
	)
	for w := 0; w < min(topicInflight, len(topics)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !failed.Load() {
				i := int(next.Add(1) - 1)
				if i >= len(topics) {
					return
				}
				var req protocol.Command
				req.InitRequest(protocol.ReqRegisterTopicInNameSrv, 0)
				(&protocol.RegisterTopicRequest{Topic: topics[i].TopicName}).Encode(&req.Ext)
				req.Body = bodies[i]
				if _, err := g.invoke(ctx, addr, &req); err != nil {
					errOnce.Do(func() { first = err })
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	return first
}

// invoke sends req to addr and returns a SUCCESS response, or an error (transport, or
// the name server's code and remark). A connection a registration was sent over is
// watched, so that its loss triggers a new round: also when the registration failed
// because the connection closed before its answer came (the name server may have
// taken the registration and then dropped it with the connection).
func (g *Registrar) invoke(ctx context.Context, addr string, req *protocol.Command) (*protocol.Command, error) {
	ctx, cancel := context.WithTimeout(ctx, g.Timeout)
	defer cancel()
	cl, err := g.pool.Get(ctx, addr)
	if err != nil {
		return nil, err
	}
	if g.Sign != nil {
		g.Sign(req)
	}
	resp, err := cl.Invoke(ctx, req)
	if req.Code == protocol.ReqRegisterBroker {
		g.watch(addr, cl)
	}
	if err != nil {
		return nil, err
	}
	if resp.Code == protocol.RespRequestCodeNotSupported && req.Code == protocol.ReqRegisterTopicInNameSrv {
		return nil, errSingleUnsupported
	}
	if resp.Code != protocol.RespSuccess {
		return nil, &RefusedError{Namesrv: addr, Request: req.Code, Code: resp.Code, Remark: string(resp.Remark)}
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

// RefusedError is a name server's answer other than SUCCESS to one of the
// registrar's requests.
type RefusedError struct {
	Namesrv string
	Request int32 // the request code
	Code    int32 // the response code
	Remark  string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("namesrv: %s answered %s: code %d (%s)", e.Namesrv, protocol.RequestCodeName(e.Request), e.Code, e.Remark)
}
