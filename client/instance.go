package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/internal/hotmap"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// instance is what the producers and consumers of one process with one client ID
// share: one connection per broker (a remoting.Pool), the route table, the heartbeat
// and route-refresh loop, and the handler of requests brokers push (notify, check).
// It lives while at least one client holds it.
type instance struct {
	id   string // client ID, "ip@instanceName"
	sig  string // instance-level options; see clientConfig.instanceSignature
	cfg  clientConfig
	log  *slog.Logger
	pool *remoting.Pool
	uniq *message.UniqIDGenerator

	nsNext atomic.Uint32

	// routes maps topic → route, read without locking on the send path;
	// writers hold mu. A new topic costs a constant (hotmap), not a copy of
	// every route: a producer sending to 20,000 new topics slowed down as
	// the table grew.
	routes *hotmap.Map[topicRoute]

	// gate rate-limits the route refreshes failed sends and pulls ask for
	// (refreshOnFailure); its gap is the RouteRefreshOnFailure option.
	gate refreshGate

	mu        sync.Mutex
	refs      int
	producers map[*Producer]struct{}
	consumers map[string]member // by group
	interest  map[string]int    // topics whose routes are refreshed, with reference counts
	brokers   map[string]map[int64]string
	stop      chan struct{}
	done      chan struct{}
	kick      chan struct{} // heartbeat now (a new member or a new broker)

	// replies are the Requests waiting, by correlation id (request.go).
	replyMu sync.Mutex
	replies map[string]chan *MessageExt
}

// member is a consumer as the instance sees it.
type member interface {
	consumerData() protocol.ConsumerData
	idsChanged()
	resetOffsets(topic string, table map[MessageQueue]int64)
}

var registry = struct {
	sync.Mutex
	m map[string]*instance
}{m: map[string]*instance{}}

// acquireInstance returns the instance for cfg's client ID, creating it if needed.
func acquireInstance(cfg *clientConfig) (*instance, error) {
	id, sig := cfg.clientID(), cfg.instanceSignature()
	registry.Lock()
	defer registry.Unlock()
	if in := registry.m[id]; in != nil {
		if in.sig != sig {
			return nil, fmt.Errorf("%w: client ID %s", ErrInstanceConflict, id)
		}
		in.mu.Lock()
		in.refs++
		in.mu.Unlock()
		return in, nil
	}
	in := &instance{
		id:        id,
		sig:       sig,
		cfg:       *cfg,
		log:       cfg.logger.With("client", id),
		producers: map[*Producer]struct{}{},
		consumers: map[string]member{},
		interest:  map[string]int{},
		brokers:   map[string]map[int64]string{},
		refs:      1,
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		kick:      make(chan struct{}, 1),
	}
	in.routes = hotmap.New[topicRoute]()
	in.gate.gap = cfg.failoverGap
	ip, err := netip.ParseAddr(cfg.clientIP)
	if err != nil {
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	in.uniq = message.NewUniqIDGenerator(ip, os.Getpid())
	popts := &remoting.ClientOptions{
		Options:     remoting.Options{Logger: cfg.logger},
		Handler:     in,
		DialTimeout: cfg.dialTimeout,
		TLS:         cfg.tls,
	}
	if s := cfg.signer(); s != nil {
		popts.Signer = s
	}
	in.pool = remoting.NewPool(popts)
	registry.m[id] = in
	go in.loop()
	return in, nil
}

// release drops a reference; the last one stops the loop and closes every
// connection, so brokers see the client leave at once.
func (in *instance) release() {
	registry.Lock()
	in.mu.Lock()
	in.refs--
	last := in.refs == 0
	in.mu.Unlock()
	if last {
		delete(registry.m, in.id)
	}
	registry.Unlock()
	if last {
		close(in.stop)
		<-in.done
		in.pool.Close()
	}
}

// loop refreshes routes and sends heartbeats until the instance is released.
func (in *instance) loop() {
	defer close(in.done)
	routeT := time.NewTicker(in.cfg.routeRefresh)
	hbT := time.NewTicker(in.cfg.heartbeat)
	defer routeT.Stop()
	defer hbT.Stop()
	for {
		select {
		case <-in.stop:
			return
		case <-routeT.C:
			in.refreshRoutes()
		case <-hbT.C:
			in.heartbeat(context.Background())
		case <-in.kick:
			in.heartbeat(context.Background())
		}
	}
}

// ---------------------------------------------------------------------------
// Requests.

// newRequest returns a request command with the instance's header encoding.
func (in *instance) newRequest(code int32) *protocol.Command {
	c := new(protocol.Command)
	in.initRequest(c, code)
	return c
}

func (in *instance) initRequest(c *protocol.Command, code int32) {
	c.InitRequest(code, 0)
	c.SerializeType = in.cfg.encoding
}

// invoke sends req to addr and waits at most timeout for the response.
func (in *instance) invoke(ctx context.Context, addr string, req *protocol.Command, timeout time.Duration) (*protocol.Command, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	cl, err := in.pool.Get(ctx, addr)
	if err != nil {
		return nil, err
	}
	resp, err := cl.Invoke(ctx, req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, fmt.Errorf("%w: %s code %d: %w", ErrTimeout, addr, req.Code, err)
		}
		return nil, err
	}
	return resp, nil
}

// invokeNameServer sends req to the name servers in turn, starting with the next one
// round robin, moving on only when one cannot be reached.
func (in *instance) invokeNameServer(ctx context.Context, req *protocol.Command) (*protocol.Command, string, error) {
	ns := in.cfg.nameServers
	if len(ns) == 0 {
		return nil, "", ErrNoNameServer // DirectOnly
	}
	start := int(in.nsNext.Add(1))
	var lastErr error
	for i := range ns {
		addr := ns[(start+i)%len(ns)]
		resp, err := in.invoke(ctx, addr, req, in.cfg.requestTimeout)
		if err == nil {
			return resp, addr, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, "", fmt.Errorf("client: name servers %v: %w", ns, lastErr)
}

// ---------------------------------------------------------------------------
// Routes.

func (in *instance) cachedRoute(topic string) *topicRoute { return in.routes.Load(topic) }

// fetchRouteData asks the name servers for topic's route.
func (in *instance) fetchRouteData(ctx context.Context, topic string) (*protocol.TopicRouteData, error) {
	req := in.newRequest(protocol.ReqGetRouteInfoByTopic)
	h := protocol.GetRouteInfoRequest{Topic: []byte(topic)}
	h.Encode(&req.Ext)
	resp, addr, err := in.invokeNameServer(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("client: route of %q: %w", topic, err)
	}
	switch resp.Code {
	case protocol.RespSuccess:
	case protocol.RespTopicNotExist:
		return nil, fmt.Errorf("client: route of %q: %w", topic, brokerError(addr, resp))
	default:
		return nil, fmt.Errorf("client: route of %q: %w", topic, brokerError(addr, resp))
	}
	if len(resp.Body) == 0 {
		return nil, fmt.Errorf("client: route of %q: %w: empty body", topic, ErrNoRoute)
	}
	var rd protocol.TopicRouteData
	if err := rd.Decode(resp.Body); err != nil {
		return nil, fmt.Errorf("client: route of %q: %w", topic, err)
	}
	return &rd, nil
}

// storeRoute publishes a route in the table and merges its broker addresses.
func (in *instance) storeRoute(r *topicRoute) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.routes.Store(r.topic, r)
	if r.fromDefault {
		return
	}
	in.mergeBrokersLocked(r.data)
}

// mergeBrokersLocked records a route's broker addresses and, when one is new, asks
// the loop for a heartbeat so that the broker knows the client's groups at once.
//
// When the route names another master (brokerId 0) for a broker name than the
// table did (a failover), nothing may go on using the old one: every cached route
// of another topic that names the broker is rebuilt with the new addresses (sends
// read a queue's address from their topic's route), and the producers forget the
// broker's failures (they were the old master's). Masters are looked up per
// broker name in this table (masterAddr, brokerAddr) for everything else.
func (in *instance) mergeBrokersLocked(rd *protocol.TopicRouteData) {
	moved := masterChanges(in.brokers, rd)
	changed := false
	for _, bd := range rd.BrokerDatas {
		old := in.brokers[bd.BrokerName]
		addrs := make(map[int64]string, len(bd.BrokerAddrs))
		for id, a := range bd.BrokerAddrs {
			addrs[id] = a
			if old[id] != a {
				changed = true
			}
		}
		in.brokers[bd.BrokerName] = addrs
	}
	if len(moved) > 0 {
		in.masterMovedLocked(moved)
	}
	if changed {
		in.kickHeartbeat()
	}
}

// masterMovedLocked brings the cached routes and the producers' fault tables in
// line with the broker table after the masters of the brokers named moved.
func (in *instance) masterMovedLocked(brokers []string) {
	addrs := make(map[string]map[int64]string, len(brokers))
	for _, b := range brokers {
		addrs[b] = in.brokers[b]
	}
	in.log.Info("client: broker master moved; routes follow", "brokers", brokers)
	var stale []*topicRoute
	in.routes.Range(func(_ string, r *topicRoute) bool {
		stale = append(stale, r)
		return true
	})
	for _, old := range stale {
		nr := old.withBrokers(addrs)
		if nr == nil {
			continue
		}
		in.routes.Update(old.topic, func(cur *topicRoute) *topicRoute {
			if cur != old {
				return cur // replaced meanwhile: the newer route wins
			}
			return nr
		})
	}
	for p := range in.producers {
		for _, b := range brokers {
			p.faults.forget(b)
		}
	}
}

func (in *instance) kickHeartbeat() {
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

// route returns topic's own route, fetching it when it is not cached (or when only
// a producer's create-topic-key stand-in is cached: it has no readable queues).
func (in *instance) route(ctx context.Context, topic string) (*topicRoute, error) {
	if r := in.cachedRoute(topic); r != nil && !r.fromDefault {
		return r, nil
	}
	rd, err := in.fetchRouteData(ctx, topic)
	if err != nil {
		return nil, err
	}
	r := newTopicRoute(topic, rd)
	in.storeRoute(r)
	return r, nil
}

// publishRoute returns the route to send to topic: its own, or, when the name server
// knows no such topic, one built from the create-topic key's route (capped at
// queueNums queues) under which the broker auto-creates the topic.
func (in *instance) publishRoute(ctx context.Context, topic, createKey string, queueNums int) (*topicRoute, error) {
	if r := in.cachedRoute(topic); r != nil && r.publish != nil {
		return r, nil
	}
	rd, err := in.fetchRouteData(ctx, topic)
	if err == nil {
		r := newTopicRoute(topic, rd)
		in.storeRoute(r)
		if r.publish == nil {
			return nil, fmt.Errorf("client: topic %q: %w: no writable queue", topic, ErrNoRoute)
		}
		return r, nil
	}
	if !errors.Is(err, ErrTopicNotExist) {
		return nil, err
	}
	def, derr := in.fetchRouteData(ctx, createKey)
	if derr != nil {
		return nil, fmt.Errorf("client: topic %q does not exist and the create-topic key failed: %w", topic, errors.Join(err, derr))
	}
	r := &topicRoute{topic: topic, data: def, publish: buildPublish(topic, def, queueNums), fromDefault: true, maxQueues: queueNums}
	if r.publish == nil {
		return nil, fmt.Errorf("client: topic %q: %w", topic, ErrTopicNotExist)
	}
	in.storeRoute(r)
	// The create key's brokers are real brokers: remember their addresses.
	in.storeBrokers(def)
	return r, nil
}

func (in *instance) storeBrokers(rd *protocol.TopicRouteData) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.mergeBrokersLocked(rd)
}

// refreshRoutes fetches the route of every topic of interest again.
func (in *instance) refreshRoutes() {
	in.mu.Lock()
	topics := make([]string, 0, len(in.interest))
	for t := range in.interest {
		topics = append(topics, t)
	}
	in.mu.Unlock()
	for _, t := range topics {
		ctx, cancel := context.WithTimeout(context.Background(), in.cfg.requestTimeout)
		rd, err := in.fetchRouteData(ctx, t)
		cancel()
		if err != nil {
			if !errors.Is(err, ErrTopicNotExist) {
				in.log.Debug("client: route refresh failed", "topic", t, "err", err)
			}
			continue
		}
		if old := in.cachedRoute(t); old != nil && !old.fromDefault && sameRoute(old.data, rd) {
			continue
		}
		in.storeRoute(newTopicRoute(t, rd))
	}
}

// refreshOnFailure fetches topic's route again after a send or pull to one of its
// brokers failed in a way a route change explains (the master died, was fenced or
// demoted), unless the gate says a refresh of the topic ran less than the gap ago.
// When another goroutine is refreshing the topic, it waits for that refresh
// instead. createKey, when not empty, is a producer's create-topic key: a topic
// the name server does not know is routed as publishRoute does. It reports whether
// the route in the table changed. The caller must not hold in.mu.
func (in *instance) refreshOnFailure(ctx context.Context, topic, createKey string, queueNums int) bool {
	if in.gate.gap < 0 {
		return false
	}
	run, wait := in.gate.begin(topic, time.Now().UnixNano())
	if !run {
		if wait != nil {
			select {
			case <-wait:
			case <-ctx.Done():
			}
		}
		return false
	}
	defer in.gate.end(topic)
	old := in.cachedRoute(topic)
	rd, err := in.fetchRouteData(ctx, topic)
	if err != nil {
		if !errors.Is(err, ErrTopicNotExist) || createKey == "" || (old != nil && !old.fromDefault) {
			in.log.Debug("client: route refresh after a failure failed", "topic", topic, "err", err)
			return false
		}
		def, derr := in.fetchRouteData(ctx, createKey)
		if derr != nil {
			in.log.Debug("client: route refresh after a failure failed", "topic", topic, "createKey", createKey, "err", derr)
			return false
		}
		if old != nil && sameRoute(old.data, def) {
			return false
		}
		r := &topicRoute{topic: topic, data: def, publish: buildPublish(topic, def, queueNums), fromDefault: true, maxQueues: queueNums}
		if r.publish == nil {
			return false
		}
		in.storeRoute(r)
		in.storeBrokers(def)
		return true
	}
	if old != nil && !old.fromDefault && sameRoute(old.data, rd) {
		return false
	}
	in.storeRoute(newTopicRoute(topic, rd))
	return true
}

// addInterest registers topics whose routes the loop keeps fresh.
func (in *instance) addInterest(topics ...string) {
	in.mu.Lock()
	for _, t := range topics {
		in.interest[t]++
	}
	in.mu.Unlock()
}

func (in *instance) dropInterest(topics ...string) {
	in.mu.Lock()
	for _, t := range topics {
		if in.interest[t]--; in.interest[t] <= 0 {
			delete(in.interest, t)
		}
	}
	in.mu.Unlock()
}

// masterAddr returns the master address of a broker, or "".
func (in *instance) masterAddr(brokerName string) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.brokers[brokerName][0]
}

// readAddr returns the address to read a broker name's state from (a consumer
// offset, a queue's offsets, a group's members): its master, or while the route
// names none (the master is down) its slave of the lowest id, which keeps what was
// replicated and takes offset commits for the master (as the Java client's
// findBrokerAddressInSubscribe with onlyThisBroker false). "" when the route names
// neither.
func (in *instance) readAddr(brokerName string) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	addrs := in.brokers[brokerName]
	if a := addrs[0]; a != "" {
		return a
	}
	best, addr := int64(-1), ""
	for id, a := range addrs {
		if a != "" && (best < 0 || id < best) {
			best, addr = id, a
		}
	}
	return addr
}

// brokerAddr returns the address of broker id of brokerName, falling back to the
// master and then to any address (as the Go client does for suggested slaves).
func (in *instance) brokerAddr(brokerName string, id int64) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	addrs := in.brokers[brokerName]
	if a := addrs[id]; a != "" {
		return a
	}
	if a := addrs[0]; a != "" {
		return a
	}
	for _, a := range addrs {
		return a
	}
	return ""
}

// brokerAddrs returns every known broker address, masters first, sorted.
func (in *instance) brokerAddrs(withSlaves bool) []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	var masters, slaves []string
	for _, addrs := range in.brokers {
		for id, a := range addrs {
			if id == 0 {
				masters = append(masters, a)
			} else if withSlaves {
				slaves = append(slaves, a)
			}
		}
	}
	slices.Sort(masters)
	slices.Sort(slaves)
	return slices.Compact(append(masters, slaves...))
}

// ---------------------------------------------------------------------------
// Membership and heartbeats.

func (in *instance) registerProducer(p *Producer) {
	in.mu.Lock()
	in.producers[p] = struct{}{}
	in.mu.Unlock()
	in.kickHeartbeat()
}

func (in *instance) unregisterProducer(p *Producer) {
	in.mu.Lock()
	delete(in.producers, p)
	in.mu.Unlock()
}

func (in *instance) registerConsumer(group string, m member) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.consumers[group] != nil {
		return fmt.Errorf("%w: group %q, client ID %s", ErrGroupInUse, group, in.id)
	}
	in.consumers[group] = m
	return nil
}

func (in *instance) unregisterConsumer(group string) {
	in.mu.Lock()
	delete(in.consumers, group)
	in.mu.Unlock()
}

// heartbeatData describes every producer group and consumer of the instance.
func (in *instance) heartbeatData() (*protocol.HeartbeatData, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	hb := &protocol.HeartbeatData{ClientID: in.id}
	seen := map[string]bool{}
	for p := range in.producers {
		if !seen[p.cfg.group] {
			seen[p.cfg.group] = true
			hb.ProducerDataSet = append(hb.ProducerDataSet, protocol.ProducerData{GroupName: p.cfg.group})
		}
	}
	groups := make([]string, 0, len(in.consumers))
	for g := range in.consumers {
		groups = append(groups, g)
	}
	slices.Sort(groups)
	for _, g := range groups {
		hb.ConsumerDataSet = append(hb.ConsumerDataSet, in.consumers[g].consumerData())
	}
	slices.SortFunc(hb.ProducerDataSet, func(a, b protocol.ProducerData) int {
		if a.GroupName < b.GroupName {
			return -1
		}
		if a.GroupName > b.GroupName {
			return 1
		}
		return 0
	})
	return hb, len(hb.ConsumerDataSet) > 0
}

// heartbeat sends HEART_BEAT to every known broker (slaves only when the instance has
// consumers) and returns the first error.
func (in *instance) heartbeat(ctx context.Context) error {
	hb, hasConsumers := in.heartbeatData()
	if len(hb.ProducerDataSet) == 0 && !hasConsumers {
		return nil
	}
	body, err := hb.Encode()
	if err != nil {
		return fmt.Errorf("client: heartbeat: %w", err)
	}
	var first error
	for _, addr := range in.brokerAddrs(hasConsumers) {
		req := in.newRequest(protocol.ReqHeartBeat)
		req.Body = body
		resp, err := in.invoke(ctx, addr, req, in.cfg.requestTimeout)
		if err == nil && resp.Code != protocol.RespSuccess {
			err = brokerError(addr, resp)
		}
		if err != nil {
			in.log.Debug("client: heartbeat failed", "broker", addr, "err", err)
			if first == nil {
				first = fmt.Errorf("client: heartbeat to %s: %w", addr, err)
			}
		}
	}
	return first
}

// unregisterClient tells every master the client left a group (UNREGISTER_CLIENT).
func (in *instance) unregisterClient(ctx context.Context, producerGroup, consumerGroup string) {
	for _, addr := range in.brokerAddrs(false) {
		req := in.newRequest(protocol.ReqUnregisterClient)
		h := protocol.UnregisterClientRequest{ClientID: in.id, ProducerGroup: producerGroup, ConsumerGroup: consumerGroup}
		h.Encode(&req.Ext)
		if _, err := in.invoke(ctx, addr, req, in.cfg.requestTimeout); err != nil {
			in.log.Debug("client: unregister failed", "broker", addr, "err", err)
		}
	}
}

// ---------------------------------------------------------------------------
// Requests pushed by brokers.

// ServeRemoting handles the requests brokers push on the instance's connections. It
// runs on a connection's read goroutine and never blocks.
func (in *instance) ServeRemoting(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	switch req.Code {
	case protocol.ReqNotifyConsumerIdsChanged:
		var h protocol.NotifyConsumerIdsChangedRequest
		if err := h.Decode(&req.Ext); err != nil {
			return remoting.NoReply
		}
		in.mu.Lock()
		m := in.consumers[h.ConsumerGroup]
		in.mu.Unlock()
		if m != nil {
			m.idsChanged()
		}
		return remoting.NoReply
	case protocol.ReqCheckTransactionState:
		in.checkTransaction(c, req)
		return remoting.NoReply
	case protocol.ReqPushReplyMessageToClient:
		return in.servePushReply(c, req, resp)
	case protocol.ReqGetConsumerRunningInfo:
		return in.serveRunningInfo(c, req)
	case protocol.ReqConsumeMessageDirectly:
		return in.serveConsumeDirectly(c, req)
	case protocol.ReqGetConsumerStatusFromClient:
		return in.serveConsumerStatus(req, resp)
	case protocol.ReqResetConsumerClientOffset:
		// An admin reset of a group's offsets (the broker has committed them):
		// the group's consumer restarts the listed queues from the new offsets.
		var h protocol.ResetOffsetRequest
		if err := h.Decode(&req.Ext); err != nil {
			resp.Cmd.Code = protocol.RespSystemError
			resp.Cmd.SetRemark(err.Error())
			return remoting.Reply
		}
		table, err := parseResetOffsetBody(req.Body)
		if err != nil {
			resp.Cmd.Code = protocol.RespSystemError
			resp.Cmd.SetRemark(err.Error())
			return remoting.Reply
		}
		in.mu.Lock()
		m := in.consumers[h.Group]
		in.mu.Unlock()
		if m != nil {
			m.resetOffsets(h.Topic, table)
		}
		resp.Cmd.Code = protocol.RespSuccess
		return remoting.Reply
	}
	resp.Cmd.Code = protocol.RespRequestCodeNotSupported
	resp.Cmd.SetRemark("request code not supported by the Apogee client")
	return remoting.Reply
}

// producerForGroup returns a transactional producer of the group, or nil.
func (in *instance) producerForGroup(group string) *Producer {
	in.mu.Lock()
	defer in.mu.Unlock()
	for p := range in.producers {
		if p.cfg.group == group && p.cfg.txListener != nil {
			return p
		}
	}
	return nil
}
