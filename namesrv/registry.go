package namesrv

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Defaults of Options.
const (
	// DefaultBrokerTimeout is how long a broker registered over a connection may stay
	// silent before it is dropped (the Java name server's 120 s).
	DefaultBrokerTimeout = 120 * time.Second
	// DefaultScanInterval is how often the registry looks for silent brokers (Java: 5 s).
	DefaultScanInterval = 5 * time.Second
)

// Options configure a Registry. The zero value gives every default.
type Options struct {
	// BrokerTimeout: a broker registered over a connection that has not registered
	// again for this long is dropped. A REGISTER_BROKER header's
	// heartbeatTimeoutMillis, when positive, overrides it for that broker. Embedded
	// registrations (Registry.RegisterBroker) never expire. Default
	// DefaultBrokerTimeout (120 s).
	BrokerTimeout time.Duration
	// ScanInterval is the period of the expiry scan. Default DefaultScanInterval (5 s).
	ScanInterval time.Duration
	// Logger receives one Info line per broker that joins or leaves and per KV config
	// change, and one Warn line per rejected registration. Default slog.Default().
	Logger *slog.Logger
	// KVConfigPath, when set, keeps the KV config (PUT_KV_CONFIG and
	// DELETE_KV_CONFIG) in this file, in RocketMQ's kvConfig.json format: OpenRegistry
	// loads it, and each change is written to it (temporary file, fsync, rename,
	// directory fsync, the previous version kept as .bak) before it is applied and
	// answered, so an acknowledged change survives a crash. Only OpenRegistry takes
	// it; NewRegistry panics when it is set. Default "": the KV config lives in memory
	// only (the embedded name server's case).
	KVConfigPath string
	// FS is the file system KVConfigPath (and its directory) goes through.
	// Default vfs.Default; tests wrap it.
	FS vfs.FS
}

// BrokerRegistration is what a broker tells the name server about itself: who it is,
// where it listens, and the topics it hosts. It is the argument of
// Registry.RegisterBroker and what a Registrar sends in REGISTER_BROKER.
type BrokerRegistration struct {
	ClusterName, BrokerName, BrokerAddr, HAServerAddr string
	BrokerID                                          int64 // 0 = master
	// Topics is the broker's whole topic table. A master's registration replaces its
	// broker name's topic set with it; a slave's is ignored (as in Java: routes carry
	// the master's queue counts).
	Topics      []protocol.TopicConfig
	DataVersion protocol.DataVersion
}

// brokerGroup is one broker name: a master and its slaves, and the topics the master
// registered.
type brokerGroup struct {
	cluster string
	addrs   map[int64]string              // broker id → address
	topics  map[string]protocol.QueueData // topic → this name's queues
}

// liveBroker is one registered broker address.
type liveBroker struct {
	name     string
	id       int64
	haAddr   string
	embedded bool           // registered through RegisterBroker: never expires
	conn     *remoting.Conn // the connection it registered over (nil when embedded)
	last     time.Time      // last registration (monotonic)
	timeout  time.Duration
	version  protocol.DataVersion
}

// topicEntry is one topic: the broker names hosting it, and its encoded route.
type topicEntry struct {
	names []string                    // sorted; never empty while the entry exists
	cache atomic.Pointer[routeBodies] // valid while cache.gen == Registry.gen
}

// routeBodies is a topic's route in both JSON forms. Immutable once published.
type routeBodies struct {
	gen              uint64
	legacy, standard []byte
}

// Registry is the name server's route table: which broker names host which topics
// with how many queues, and the addresses of each broker name's master and slaves.
// It is safe for concurrent use. See the package documentation for its invariants
// and liveness rules.
type Registry struct {
	opts Options
	log  *slog.Logger

	mu       sync.RWMutex
	gen      uint64                         // bumped by every change of the tables below
	groups   map[string]*brokerGroup        // broker name → group
	clusters map[string]map[string]struct{} // cluster → broker names
	live     map[string]*liveBroker         // broker address → registration
	topics   map[string]*topicEntry         // topic → entry
	kv       map[string]map[string]string   // namespace → key → value (KV config); replaced whole by changeKV, its maps never modified

	kvMu   sync.Mutex // serialises KV changes (and their writes); taken before mu
	kvPath string     // the KV config's file ("": memory only); set before the registry is shared

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// NewRegistry returns an empty registry and starts its expiry scanner; Close stops it.
// It panics when opts.KVConfigPath is set: OpenRegistry loads that file.
func NewRegistry(opts Options) *Registry {
	if opts.KVConfigPath != "" {
		panic("namesrv: Options.KVConfigPath is set: use OpenRegistry, which loads it")
	}
	if opts.BrokerTimeout <= 0 {
		opts.BrokerTimeout = DefaultBrokerTimeout
	}
	if opts.ScanInterval <= 0 {
		opts.ScanInterval = DefaultScanInterval
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	r := &Registry{
		opts:     opts,
		log:      opts.Logger,
		groups:   make(map[string]*brokerGroup),
		clusters: make(map[string]map[string]struct{}),
		live:     make(map[string]*liveBroker),
		topics:   make(map[string]*topicEntry),
		kv:       make(map[string]map[string]string),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	go r.scan()
	return r
}

// Close stops the expiry scanner and waits for it, and for a KV change being written
// (so that, once the server in front has stopped, every acknowledged change is on
// disk when Close returns). The registry keeps answering; registrations over
// connections then no longer expire by time (they are still dropped by ConnClosed),
// and KV changes are still written before they are answered. Closing twice is
// harmless.
func (r *Registry) Close() {
	r.closeOnce.Do(func() { close(r.stop) })
	<-r.done
	r.kvMu.Lock()
	r.kvMu.Unlock() // empty: only waits for a change in progress
}

func (r *Registry) scan() {
	defer close(r.done)
	t := time.NewTicker(r.opts.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.expire(time.Now())
		}
	}
}

// expire drops the connection-registered brokers silent for longer than their timeout.
func (r *Registry) expire(now time.Time) {
	r.mu.RLock()
	any := false
	for _, lb := range r.live {
		if !lb.embedded && now.Sub(lb.last) > lb.timeout {
			any = true
			break
		}
	}
	r.mu.RUnlock()
	if !any {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for addr, lb := range r.live {
		if !lb.embedded && now.Sub(lb.last) > lb.timeout {
			r.log.Info("namesrv: broker expired", "broker", lb.name, "id", lb.id, "addr", addr,
				"silent", now.Sub(lb.last).Round(time.Millisecond))
			r.dropLocked(addr, lb)
		}
	}
}

// ConnClosed drops every broker that registered over c (the one it last registered
// over). Wire it to the OnClose of every remoting.Server whose connections reach
// ServeRemoting. It is cheap for connections that registered nothing.
func (r *Registry) ConnClosed(c *remoting.Conn) {
	if c == nil {
		return
	}
	r.mu.RLock()
	any := false
	for _, lb := range r.live {
		if lb.conn == c {
			any = true
			break
		}
	}
	r.mu.RUnlock()
	if !any {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for addr, lb := range r.live {
		if lb.conn == c {
			r.log.Info("namesrv: broker connection closed", "broker", lb.name, "id", lb.id, "addr", addr)
			r.dropLocked(addr, lb)
		}
	}
}

// RegisterBroker registers (or refreshes) a broker of this process: no connection is
// involved and the registration never expires; UnregisterBroker removes it. When
// reg.BrokerID is 0 the broker name's topic set becomes reg.Topics.
func (r *Registry) RegisterBroker(reg BrokerRegistration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, _, err := r.registerLocked(&reg, nil, 0, true); err != nil {
		r.log.Error("namesrv: embedded registration refused", "err", err)
	}
}

// ErrBrokerIDTaken: a registration names a broker id (of a broker name)
// that another live address holds: a second master of a group, say. It is
// refused instead of taking the route from the live one.
var ErrBrokerIDTaken = errors.New("namesrv: broker id held by another live broker")

// registerLocked applies one registration. conn is the connection it came over (nil:
// embedded); timeout 0 means Options.BrokerTimeout; withTopics false keeps the
// broker name's topic set (a REGISTER_BROKER without a body). It returns the master's
// address and HA address for a slave's registration, and ErrBrokerIDTaken
// (changing nothing) when another live address holds the broker name's id.
func (r *Registry) registerLocked(reg *BrokerRegistration, conn *remoting.Conn, timeout time.Duration, withTopics bool) (masterAddr, masterHA string, err error) {
	if timeout <= 0 {
		timeout = r.opts.BrokerTimeout
	}
	addr, name, cluster := reg.BrokerAddr, reg.BrokerName, reg.ClusterName
	changed := false

	// A registration over a connection (another process) may not take a
	// live broker's place; this process's own (embedded) ones may.
	if g := r.groups[name]; g != nil && conn != nil {
		if old, ok := g.addrs[reg.BrokerID]; ok && old != addr {
			// A higher stateVersion (controller mode: the master epoch)
			// takes the id over: an elected master replaces a deposed one
			// whose registration has not expired (RocketMQ's rule).
			if olb := r.live[old]; olb != nil && olb.name == name && olb.id == reg.BrokerID &&
				(olb.embedded || time.Since(olb.last) < olb.timeout) &&
				reg.DataVersion.StateVersion <= olb.version.StateVersion {
				seen := time.Since(olb.last).Round(time.Millisecond)
				if reg.DataVersion.StateVersion < olb.version.StateVersion {
					// Controller mode: a master deposed while it was away
					// (paused, cut off) still registers as master.
					return "", "", fmt.Errorf("%w: %s id %d is held by %s (last seen %v ago) at state version %d, newer than this registration's %d "+
						"(controller mode: the master epoch): %s was deposed by a later election and registers as a slave once the controller tells it its role",
						ErrBrokerIDTaken, name, reg.BrokerID, old, seen, olb.version.StateVersion, reg.DataVersion.StateVersion, addr)
				}
				return "", "", fmt.Errorf("%w: %s id %d is registered by %s (last seen %v ago); %s must use another broker name or id, or wait until %s stops",
					ErrBrokerIDTaken, name, reg.BrokerID, old, seen, addr, old)
			}
		}
	}

	// The address may have served another identity (renamed, switched role): forget it.
	lb := r.live[addr]
	if lb != nil && (lb.name != name || lb.id != reg.BrokerID) {
		r.dropLocked(addr, lb)
		lb = nil
	}

	g := r.groups[name]
	if g == nil {
		g = &brokerGroup{cluster: cluster, addrs: make(map[int64]string), topics: make(map[string]protocol.QueueData)}
		r.groups[name] = g
		changed = true
	} else if g.cluster != cluster {
		r.removeFromClusterLocked(g.cluster, name)
		g.cluster = cluster
		changed = true
	}
	names := r.clusters[cluster]
	if names == nil {
		names = make(map[string]struct{})
		r.clusters[cluster] = names
	}
	if _, ok := names[name]; !ok {
		names[name] = struct{}{}
		changed = true
	}

	// Another address held this id and is no longer live (a broker moved):
	// it is replaced.
	if old, ok := g.addrs[reg.BrokerID]; ok && old != addr {
		if olb := r.live[old]; olb != nil && olb.name == name && olb.id == reg.BrokerID {
			delete(r.live, old)
		}
		changed = true
	}
	if g.addrs[reg.BrokerID] != addr {
		g.addrs[reg.BrokerID] = addr
		changed = true
	}

	if reg.BrokerID == 0 && withTopics && r.setTopicsLocked(name, g, reg.Topics) {
		changed = true
	}

	if lb == nil {
		lb = &liveBroker{name: name, id: reg.BrokerID}
		r.live[addr] = lb
		if conn == nil {
			// The broker of this process, in its own route table: no name
			// server was told anything (whether a name-server listener
			// serves this table is the process's affair, logged there).
			r.log.Info("namesrv: this process's broker entered in its own route table", "cluster", cluster, "broker", name,
				"id", reg.BrokerID, "addr", addr, "topics", len(reg.Topics))
		} else {
			r.log.Info("namesrv: broker registered", "cluster", cluster, "broker", name, "id", reg.BrokerID,
				"addr", addr, "topics", len(reg.Topics))
		}
	}
	lb.haAddr = reg.HAServerAddr
	lb.embedded = conn == nil
	lb.conn = conn
	lb.last = time.Now()
	lb.timeout = timeout
	lb.version = reg.DataVersion

	if changed {
		r.gen++
	}
	if reg.BrokerID != 0 {
		if m, ok := g.addrs[0]; ok {
			masterAddr = m
			if mlb := r.live[m]; mlb != nil {
				masterHA = mlb.haAddr
			}
		}
	}
	return masterAddr, masterHA, nil
}

// setTopicsLocked makes topics the topic set of broker name (group g) and reports
// whether anything changed.
func (r *Registry) setTopicsLocked(name string, g *brokerGroup, topics []protocol.TopicConfig) bool {
	next := make(map[string]protocol.QueueData, len(topics))
	for i := range topics {
		tc := &topics[i]
		if tc.TopicName == "" {
			continue
		}
		next[tc.TopicName] = protocol.QueueData{BrokerName: name, ReadQueueNums: tc.ReadQueueNums,
			WriteQueueNums: tc.WriteQueueNums, Perm: tc.Perm, TopicSysFlag: tc.TopicSysFlag}
	}
	if maps.Equal(next, g.topics) {
		return false
	}
	for t := range g.topics {
		if _, ok := next[t]; !ok {
			r.unhostLocked(t, name)
		}
	}
	for t := range next {
		if _, ok := g.topics[t]; !ok {
			r.hostLocked(t, name)
		}
	}
	g.topics = next
	return true
}

// RegisterTopic adds or updates topic's queues on the broker names that queues
// name, as REGISTER_TOPIC_IN_NAMESRV (217) does in Java: the topic's other hosts and
// every other topic are untouched, and a broker name that is not registered is
// skipped (with a Warn). Only this topic's cached route is rebuilt. The cost does not
// depend on how many topics exist. It reports whether anything changed.
func (r *Registry) RegisterTopic(topic string, queues []protocol.QueueData) bool {
	if topic == "" {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := false
	for _, qd := range queues {
		g := r.groups[qd.BrokerName]
		if g == nil {
			r.log.Warn("namesrv: topic registered for a broker name that is not registered; skipped",
				"topic", topic, "broker", qd.BrokerName)
			continue
		}
		if old, ok := g.topics[topic]; ok && old == qd {
			continue
		}
		g.topics[topic] = qd
		r.hostLocked(topic, qd.BrokerName)
		changed = true
	}
	if changed {
		r.topics[topic].cache.Store(nil)
	}
	return changed
}

// UnregisterTopic removes broker name's queues from topic's route, and the topic once
// no broker name hosts it; only this topic's cached route is rebuilt. A broker that
// registers its whole topic set later replaces what this did. It reports whether
// anything changed.
func (r *Registry) UnregisterTopic(brokerName, topic string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.groups[brokerName]
	if g == nil {
		return false
	}
	if _, ok := g.topics[topic]; !ok {
		return false
	}
	delete(g.topics, topic)
	r.unhostLocked(topic, brokerName)
	if e := r.topics[topic]; e != nil {
		e.cache.Store(nil)
	}
	return true
}

// hostLocked adds broker name to topic's hosts.
func (r *Registry) hostLocked(topic, name string) {
	e := r.topics[topic]
	if e == nil {
		e = &topicEntry{}
		r.topics[topic] = e
	}
	if i, found := slices.BinarySearch(e.names, name); !found {
		e.names = slices.Insert(e.names, i, name)
	}
}

// unhostLocked removes broker name from topic's hosts, and the topic once none is left.
func (r *Registry) unhostLocked(topic, name string) {
	e := r.topics[topic]
	if e == nil {
		return
	}
	if i, found := slices.BinarySearch(e.names, name); found {
		e.names = slices.Delete(e.names, i, i+1)
	}
	if len(e.names) == 0 {
		delete(r.topics, topic)
	}
}

// dropLocked removes the broker at addr, and its broker name once no address is left
// (with the name's queues of every topic, and the topics left without hosts).
func (r *Registry) dropLocked(addr string, lb *liveBroker) {
	delete(r.live, addr)
	r.gen++
	g := r.groups[lb.name]
	if g == nil {
		return
	}
	if g.addrs[lb.id] == addr {
		delete(g.addrs, lb.id)
	}
	if len(g.addrs) > 0 {
		return
	}
	for t := range g.topics {
		r.unhostLocked(t, lb.name)
	}
	r.removeFromClusterLocked(g.cluster, lb.name)
	delete(r.groups, lb.name)
}

func (r *Registry) removeFromClusterLocked(cluster, name string) {
	if names := r.clusters[cluster]; names != nil {
		delete(names, name)
		if len(names) == 0 {
			delete(r.clusters, cluster)
		}
	}
}

// UnregisterBroker removes the broker registered at brokerAddr under brokerName and
// brokerID (embedded or not), as UNREGISTER_BROKER does. Once a broker name has no
// address left, its queues leave every route. clusterName is accepted for symmetry
// with the request and not checked. Unknown brokers are ignored.
func (r *Registry) UnregisterBroker(clusterName, brokerName, brokerAddr string, brokerID int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	lb := r.live[brokerAddr]
	if lb == nil || lb.name != brokerName || lb.id != brokerID {
		return
	}
	r.log.Info("namesrv: broker unregistered", "cluster", clusterName, "broker", brokerName, "id", brokerID, "addr", brokerAddr)
	r.dropLocked(brokerAddr, lb)
}

// DeleteTopic removes topic from every broker name (DELETE_TOPIC_IN_NAMESRV). A
// broker that still has the topic brings it back with its next registration.
func (r *Registry) DeleteTopic(topic string) {
	r.deleteTopic(topic, "")
}

// deleteTopic removes topic from the broker names of cluster, or of every cluster
// when cluster is "".
func (r *Registry) deleteTopic(topic, cluster string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.topics[topic]
	if e == nil {
		return
	}
	for _, name := range slices.Clone(e.names) {
		g := r.groups[name]
		if cluster != "" && (g == nil || g.cluster != cluster) {
			continue
		}
		if g != nil {
			delete(g.topics, topic)
		}
		r.unhostLocked(topic, name)
	}
	r.gen++
}

// Route returns topic's route: one QueueData per broker name hosting it (sorted by
// name) and the BrokerData of those names. The result is the caller's (maps copied).
// ok is false when no broker hosts the topic.
func (r *Registry) Route(topic string) (route protocol.TopicRouteData, ok bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e := r.topics[topic]
	if e == nil {
		return route, false
	}
	return r.routeLocked(topic, e), true
}

func (r *Registry) routeLocked(topic string, e *topicEntry) protocol.TopicRouteData {
	route := protocol.TopicRouteData{
		QueueDatas:  make([]protocol.QueueData, 0, len(e.names)),
		BrokerDatas: make([]protocol.BrokerData, 0, len(e.names)),
	}
	if conf := r.kv[NamespaceOrderTopicConfig][topic]; conf != "" {
		route.OrderTopicConf = conf
	}
	for _, name := range e.names {
		g := r.groups[name]
		route.QueueDatas = append(route.QueueDatas, g.topics[topic])
		route.BrokerDatas = append(route.BrokerDatas, protocol.BrokerData{Cluster: g.cluster, BrokerName: name,
			BrokerAddrs: maps.Clone(g.addrs)})
	}
	return route
}

// routeJSON returns topic's encoded route body (legacy or standard form), building and
// caching it if the tables changed since it was last built. The slice is immutable:
// callers may keep it but must not modify it. No allocation when cached.
func (r *Registry) routeJSON(topic []byte, standard bool) ([]byte, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	e := r.topics[string(topic)]
	if e == nil {
		return nil, false
	}
	c := e.cache.Load()
	if c == nil || c.gen != r.gen {
		// The tables cannot change while the read lock is held, so what is built
		// here is current; concurrent readers may build it too and store equal values.
		route := r.routeLocked(string(topic), e)
		c = &routeBodies{gen: r.gen, legacy: route.AppendJSON(nil, false), standard: route.AppendJSON(nil, true)}
		e.cache.Store(c)
	}
	if standard {
		return c.standard, true
	}
	return c.legacy, true
}

// ClusterInfo returns every broker name with its addresses, and the broker names of
// each cluster (sorted): the body of GET_BROKER_CLUSTER_INFO.
func (r *Registry) ClusterInfo() protocol.ClusterInfo {
	r.mu.RLock()
	defer r.mu.RUnlock()
	ci := protocol.ClusterInfo{
		BrokerAddrTable:  make(map[string]protocol.BrokerData, len(r.groups)),
		ClusterAddrTable: make(map[string][]string, len(r.clusters)),
	}
	for name, g := range r.groups {
		ci.BrokerAddrTable[name] = protocol.BrokerData{Cluster: g.cluster, BrokerName: name, BrokerAddrs: maps.Clone(g.addrs)}
	}
	for cluster, names := range r.clusters {
		ci.ClusterAddrTable[cluster] = slices.Sorted(maps.Keys(names))
	}
	return ci
}

// Topics returns the names of every topic some broker hosts, sorted.
func (r *Registry) Topics() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.topics))
}

// clusterTopics returns the topics hosted by the broker names of cluster, sorted.
func (r *Registry) clusterTopics(cluster string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	set := make(map[string]struct{})
	for name := range r.clusters[cluster] {
		for t := range r.groups[name].topics {
			set[t] = struct{}{}
		}
	}
	return slices.Sorted(maps.Keys(set))
}
