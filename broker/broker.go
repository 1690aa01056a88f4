package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/longpoll"
	"github.com/apogeemq/apogee/namesrv"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// ErrClosed is returned by Shutdown when the broker was already shut down.
var ErrClosed = core.ErrClosed

// ErrNoTopic is returned by ResetConsumerOffset for a topic the broker does
// not have.
var ErrNoTopic = core.ErrNoTopic

// QueueOffset is a queue id and an offset in it.
type QueueOffset = core.QueueOffset

// ConsumerGroupInfo is what the broker knows of a consumer group's live
// members (GET_CONSUMER_CONNECTION_LIST, 203, and ConsumerGroupInfo).
type ConsumerGroupInfo = core.ConsumerGroupInfo

// ConsumerMember is one member connection of a consumer group.
type ConsumerMember = core.ConsumerMember

// Broker serves RocketMQ's broker requests (and, through its embedded
// registry, name-server requests) over the remoting protocol, on top of a
// messaging core (package broker/core). Its methods are safe for
// concurrent use.
type Broker struct {
	opts  Options      // the front end's options (the core's are in copts)
	copts core.Options // the core's, defaults filled in

	core      *core.Core
	registry  *namesrv.Registry
	registrar *namesrv.Registrar // nil without external name servers
	pool      *remoting.Pool     // the registrar's connections
	srv       *remoting.Server   // what Serve uses

	handlers handlerTable              // request code → handler, built by New
	holds    *longpoll.Holder[heldReq] // long-polling pulls and pops (host_longpoll.go)
	polls    pollCounts                // the pops holds holds, for POLLING_INFO
	acks     ackPool                   // requests waiting for their messages to be durable

	sendPool sync.Pool // *core.SendResult
	pullPool sync.Pool // *pullJob

	registerMu sync.Mutex // orders registrations with the embedded registry

	repl replication // the HA stream and a slave's following (replica.go)

	roleMu       sync.Mutex   // serializes SetRole
	id           atomic.Int64 // the broker id registered (SetRole changes it)
	stateVersion atomic.Int64 // Options.StateVersion, then SetRole's

	// frontInfo, when set, adds another front end's figures (the gRPC
	// one's) to GET_BROKER_RUNTIME_INFO (SetFrontEndInfo).
	frontInfo atomic.Pointer[func() map[string]string]

	closing atomic.Bool
	stop    chan struct{}
	wg      sync.WaitGroup
}

// SetFrontEndInfo makes GET_BROKER_RUNTIME_INFO include f's figures: the
// node sets the gRPC front end's (its grpc* keys), which is made after
// the broker. f must be safe for concurrent use.
func (b *Broker) SetFrontEndInfo(f func() map[string]string) { b.frontInfo.Store(&f) }

// New opens the messaging core (the store, recovered, and the state files),
// registers the broker with the embedded registry (and starts registering
// with the external name servers), and starts the background tasks. Serve
// or Handler then put it on the network; Shutdown stops it.
func New(opts Options) (*Broker, error) {
	o := opts.withDefaults()
	b := &Broker{opts: o, stop: make(chan struct{})}
	co := o.Core
	co.TopicChanged = b.registerTopic
	if co.Role == core.RoleSlave && len(o.NamesrvAddrs) == 0 && o.HAMasterAddr == "" && !o.ControllerMode { // in controller mode FollowMaster names it
		return nil, errors.New("broker: a slave learns its master from the name servers' answers to its registration: give NamesrvAddrs (or HAMasterAddr)")
	}
	co.MasterOnline = b.masterOnline // consulted while a slave only
	c, err := core.New(co)
	if err != nil {
		return nil, err
	}
	b.core, b.copts = c, c.Options()
	b.holds = newHolder(b) // fed by the core's arrivals and POP revives

	registry := namesrv.NewRegistry(namesrv.Options{Logger: b.copts.Logger})
	var registrar *namesrv.Registrar
	b.id.Store(b.copts.BrokerID)
	b.stateVersion.Store(o.StateVersion)
	if len(o.NamesrvAddrs) > 0 || c.IsSlave() || o.ControllerMode {
		b.pool = remoting.NewPool(&remoting.ClientOptions{TLS: o.ClientTLS, Signer: o.InnerSigner}) // the registrar's and a slave's connections
	}
	if len(o.NamesrvAddrs) > 0 {
		registrar = namesrv.NewRegistrar(o.NamesrvAddrs, b.pool, b.registration, b.copts.Logger)
		registrar.Period = o.RegisterInterval
		registrar.LookupTopic = b.routeTopicConfig
		registrar.Sign = o.NamesrvSign
		if c.IsSlave() {
			registrar.OnResult = b.registered
		}
	}
	if err := b.startReplication(); err != nil {
		c.Shutdown()
		if b.pool != nil {
			b.pool.Close()
		}
		return nil, err
	}
	b.registerMu.Lock()
	b.registry, b.registrar = registry, registrar
	b.registerMu.Unlock()
	b.registerEmbedded()
	if registrar != nil {
		registrar.Start() // a full round at once, then every RegisterInterval
	}
	b.buildHandlers()
	b.srv = remoting.NewServer(b, o.Remoting)
	b.srv.OnClose(b.ConnClosed)

	b.holds.Start()
	b.wg.Add(1)
	go b.maintain()
	c.Start()
	return b, nil
}

// Handler returns the remoting handler that serves broker requests and, via
// the embedded registry, name-server requests. A caller that runs its own
// remoting.Server with it must also register ConnClosed with Server.OnClose.
func (b *Broker) Handler() remoting.Handler { return b }

// Core returns the messaging core the broker serves (for a second front
// end in the same process).
func (b *Broker) Core() *core.Core { return b.core }

// Registry returns the embedded name-server registry (serve it on a separate
// listener with its ServeRemoting for --namesrv-listen).
func (b *Broker) Registry() *namesrv.Registry { return b.registry }

// Store returns the message store.
func (b *Broker) Store() *store.Store { return b.core.Store() }

// Serve accepts connections on l and serves them until Shutdown. It may be
// called for several listeners.
func (b *Broker) Serve(l net.Listener) error { return b.srv.Serve(l) }

// ConnClosed forgets everything tied to a closed connection: its clients
// leave their groups (the remaining members are notified) and the embedded
// registry drops what the connection registered. Serve wires it; callers
// with their own remoting.Server register it with OnClose.
func (b *Broker) ConnClosed(c *remoting.Conn) {
	b.core.ClientClosed(clientOf(b, c))
	b.registry.ConnClosed(c)
}

// ConsumerGroupInfo returns the live members of a consumer group, their
// subscriptions and whether they agree; ok is false for a group without
// members.
func (b *Broker) ConsumerGroupInfo(group string) (ConsumerGroupInfo, bool) {
	info, err := b.core.Admin().ConsumerGroupInfo(group)
	return info, err == nil
}

// ResetConsumerOffset moves a consumer group's committed offsets of a topic
// (core.Core.ResetConsumerOffset) and pushes RESET_CONSUMER_CLIENT_OFFSET
// (220) to the group's live members.
func (b *Broker) ResetConsumerOffset(topic, group string, timestampMs int64, force bool, queueID int32, offset int64) ([]QueueOffset, int, error) {
	return b.core.Admin().ResetConsumerOffset(topic, group, timestampMs, force, queueID, offset)
}

// RuntimeInfo returns the broker's runtime numbers, as
// GET_BROKER_RUNTIME_INFO reports them: the core's, and the front end's
// (held pulls and pops, the remoting server's receive limits).
func (b *Broker) RuntimeInfo() map[string]string {
	m := b.core.Admin().RuntimeInfo()
	hs := b.holds.Stats()
	rs := b.srv.Stats()
	i := func(v int64) string { return fmt.Sprint(v) }
	u := func(v uint64) string { return fmt.Sprint(v) }
	b.replicationInfo(m)
	for k, v := range map[string]string{
		"pullHeldTotal":   i(hs.Parked - hs.Pops.Parked),
		"pullHeldNow":     fmt.Sprint(hs.Held - hs.Pops.Held),
		"pullHeldWoken":   i(hs.Woken - hs.Pops.Woken),
		"pullHeldInline":  i(hs.Inline), // woken pulls the store's dispatcher ran itself
		"pullHeldExpired": i(hs.Expired - hs.Pops.Expired),
		"pullHeldRefused": i(hs.Refused - hs.Pops.Refused),
		"popHeldTotal":    i(hs.Pops.Parked),
		"popHeldNow":      fmt.Sprint(hs.Pops.Held),
		"popHeldWoken":    i(hs.Pops.Woken),
		"popHeldRevived":  i(hs.Pops.Revived),
		"popHeldExpired":  i(hs.Pops.Expired),
		"popHeldRefused":  i(hs.Pops.Refused),
		// Receive limits (remoting.ServerStats): connections closed for each,
		// and the receive budget (process-wide by default).
		"remotingFrameTimeouts":            u(rs.FrameTimeouts),
		"remotingSlowSenders":              u(rs.SlowSenders),
		"remotingReceiveBudgetCloses":      u(rs.BudgetCloses),
		"remotingReceiveBudgetLimit":       i(rs.Budget.Limit),
		"remotingReceiveBudgetInUse":       i(rs.Budget.InUse),
		"remotingReceiveBudgetPeak":        i(rs.Budget.Peak),
		"remotingReceiveBudgetWaiting":     fmt.Sprint(rs.Budget.Waiting),
		"remotingReceiveBudgetExhausted":   fmt.Sprint(rs.Budget.Exhausted),
		"remotingReceiveBudgetReserves":    u(rs.Budget.Reserves),
		"remotingReceiveBudgetWaits":       u(rs.Budget.Waits),
		"remotingReceiveBudgetTimeouts":    u(rs.Budget.Timeouts),
		"remotingReceiveBudgetRefused":     u(rs.Budget.Refused),
		"remotingReceiveBudgetExhaustions": u(rs.Budget.Exhaustions),
		// Connection limits and the response budget (shared by the process's
		// servers): connections open and refused, answers queued for peers.
		"remotingConnections":                 fmt.Sprint(rs.Conns.Open),
		"remotingConnectionSources":           fmt.Sprint(rs.Conns.Sources),
		"remotingConnectionsRefused":          u(rs.Conns.RefusedTotal),
		"remotingConnectionsRefusedPerSource": u(rs.Conns.RefusedSource),
		// The process-wide limit counts every listener's connections (gRPC,
		// HA, the operator port too); its bound in all is the smaller of
		// --max-connections and what the file descriptors leave.
		"remotingConnectionsBound":      fmt.Sprint(rs.Conns.Bound()),
		"remotingConnectionsRefusedFD":  u(rs.Conns.RefusedFD),
		"remotingConnectionsFDLimit":    fmt.Sprint(rs.Conns.FDLimit),
		"remotingConnectionsFDHeld":     fmt.Sprint(rs.Conns.FDHeld),
		"remotingConnectionsFDHeadroom": fmt.Sprint(rs.Conns.FDHeadroom),
		"remotingHandshakeFailures":     u(rs.HandshakeFailures),
		"remotingResponseBudgetLimit":   i(rs.Responses.Limit),
		"remotingResponseBudgetInUse":   i(rs.Responses.InUse),
		"remotingResponseBudgetPeak":    i(rs.Responses.Peak),
		"remotingResponseBudgetStalls":  u(rs.Responses.Stalls),
	} {
		m[k] = v
	}
	if b.opts.Security != nil {
		b.opts.Security.AddRuntimeInfo(m)
	}
	if b.opts.ControllerInfo != nil {
		b.opts.ControllerInfo(m)
	}
	if f := b.frontInfo.Load(); f != nil {
		for k, v := range (*f)() {
			m[k] = v
		}
	}
	return m
}

// Shutdown stops the broker: held pulls are answered, the server Serve runs
// stops accepting and finishes the requests in flight (until ctx ends), a
// master waits (up to 5 s) until its connected slaves have its whole log
// and closes its HA stream, held pops are answered, the broker leaves the name servers, and the core
// stops (its background tasks and features; offsets, topics, groups and
// progress persisted; the store flushed and closed). It returns the errors
// met, after doing all of it; a failed unregistration from external name
// servers is logged as a WARN and is not one of them.
func (b *Broker) Shutdown(ctx context.Context) error {
	if b.closing.Swap(true) {
		return ErrClosed
	}
	b.roleMu.Lock() // a role change in progress finishes first; later ones see closing
	b.roleMu.Unlock()
	var errs []error
	b.holds.Stop()
	if err := b.srv.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("broker: shutdown server: %w", err))
	}
	b.drainSlaves(ctx)
	close(b.stop)
	b.wg.Wait()
	b.stopReplication()
	if b.registrar != nil {
		// A name server forgets a broker whose registration is not renewed
		// (after 120 s, as in RocketMQ), so a failed unregistration (a name
		// server that is down, or already stopped) costs nothing the broker's
		// data depends on: a WARN, not a failed stop.
		if err := b.registrar.Close(ctx); err != nil {
			b.copts.Logger.Warn("broker: unregister from the name servers failed; they drop this broker when its registration expires", "err", err)
		}
	}
	if b.pool != nil {
		b.pool.Close()
	}
	b.registry.UnregisterBroker(b.copts.ClusterName, b.copts.BrokerName, b.copts.AdvertiseAddr, b.brokerID())
	if err := b.core.Shutdown(); err != nil {
		errs = append(errs, err)
	}
	b.registry.Close()
	return errors.Join(errs...)
}

// registration describes this broker and all its topics, for a full
// registration. It is O(topics): New, the RegisterInterval tick, a deleted
// topic and the registrar's full rounds use it, never a created one.
func (b *Broker) registration() namesrv.BrokerRegistration {
	cfgs, v := b.core.Admin().Topics()
	if perm := b.core.BrokerPermission(); perm&protocol.PermWrite == 0 {
		// brokerPermission without write (wipeWritePerm-style): every topic
		// is advertised read-only, as the Java broker registers it.
		for i := range cfgs {
			cfgs[i].Perm &= perm
		}
	}
	reg := namesrv.BrokerRegistration{
		ClusterName:  b.copts.ClusterName,
		BrokerName:   b.copts.BrokerName,
		BrokerAddr:   b.copts.AdvertiseAddr,
		BrokerID:     b.brokerID(),
		HAServerAddr: b.haServerAddr(),
		Topics:       cfgs,
		DataVersion:  v,
	}
	if v := b.stateVersion.Load(); v != 0 {
		reg.DataVersion.StateVersion = v
	}
	return reg
}

// registerEmbedded publishes the whole topic table to the embedded
// registry (replacing this broker's topic set there): at start and every
// RegisterInterval, which brings back topics a DELETE_TOPIC_IN_NAMESRV
// removed. The registrar registers with the external name servers on its
// own period (RegisterInterval too).
func (b *Broker) registerEmbedded() {
	b.registerMu.Lock()
	b.registry.RegisterBroker(b.registration())
	b.registerMu.Unlock()
}

// registerTopic is the core's TopicChanged: it publishes one topic's
// current configuration, or its absence, to the embedded registry at once
// (this broker's other topics untouched), and hands its name to the
// registrar, which sends it to the external name servers with its next
// round (REGISTER_TOPIC_IN_NAMESRV, or a full registration for a deleted
// topic). O(1).
//
// The configuration is read from the core's table under registerMu, as a
// full registration's snapshot is: whatever order concurrent changes of a
// topic reach here in, the registry ends with the table's latest state.
// The core calls it from New on (before the registry exists: the
// registration that follows New covers those).
func (b *Broker) registerTopic(name string) {
	if b.core.IsSlave() {
		// A slave's topics follow its master's, whose registrations carry
		// them; routes never take a slave's queues.
		return
	}
	b.registerMu.Lock()
	if b.registry == nil {
		b.registerMu.Unlock()
		return
	}
	if cfg, ok := b.core.TopicConfig(name); ok {
		perm := cfg.Perm
		if bp := b.core.BrokerPermission(); bp&protocol.PermWrite == 0 {
			perm &= bp
		}
		b.registry.RegisterTopic(name, []protocol.QueueData{{BrokerName: b.copts.BrokerName,
			ReadQueueNums: cfg.ReadQueueNums, WriteQueueNums: cfg.WriteQueueNums,
			Perm: perm, TopicSysFlag: cfg.TopicSysFlag}})
	} else {
		b.registry.UnregisterTopic(b.copts.BrokerName, name)
	}
	registrar := b.registrar
	b.registerMu.Unlock()
	if registrar != nil {
		registrar.TopicsChanged(name)
	}
}

// routeTopicConfig is a topic's configuration as routes advertise it: its
// perm without write while brokerPermission lacks write.
func (b *Broker) routeTopicConfig(name string) (protocol.TopicConfig, bool) {
	cfg, ok := b.core.TopicConfig(name)
	if bp := b.core.BrokerPermission(); ok && bp&protocol.PermWrite == 0 {
		cfg.Perm &= bp
	}
	return cfg, ok
}

// maintain re-registers the whole table with the embedded registry every
// RegisterInterval.
func (b *Broker) maintain() {
	defer b.wg.Done()
	reg := time.NewTicker(b.opts.RegisterInterval)
	defer reg.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-reg.C:
			b.registerEmbedded()
		}
	}
}
