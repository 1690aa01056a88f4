package core

import (
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/apogeemq/apogee/broker/txn"
	"github.com/apogeemq/apogee/filter"
	"github.com/apogeemq/apogee/protocol"
)

// subscription is a consumer group's subscription of one topic, as the
// latest heartbeat declared it, with its compiled filter. Immutable once
// published.
type subscription struct {
	topic      string
	subString  string
	exprType   string
	subVersion int64
	filter     filter.Filter // nil when it accepts every message
	err        error         // compile error: pulls answer SUBSCRIPTION_PARSE_FAILED
}

// sameExpr reports whether s filters like (exprType, subString).
func (s *subscription) sameExpr(exprType, subString string) bool {
	return normType(s.exprType) == normType(exprType) && s.subString == subString
}

func normType(t string) string {
	if t == "" {
		return filter.TypeTag
	}
	return t
}

// compileFilter compiles a subscription; a filter that accepts everything is
// returned as nil so that the store skips filtering altogether.
func compileFilter(exprType, expr string) (filter.Filter, error) {
	f, err := filter.New(normType(exprType), expr)
	if err != nil {
		return nil, err
	}
	if t, ok := f.(*filter.Tags); ok && t.All() {
		return nil, nil
	}
	return f, nil
}

// ClientConn is a front end's handle on one client connection, registered
// by Heartbeat: the key of the client registry (it must be comparable, and
// equal for every call about the same connection: a pointer, or a small
// struct of pointers) and the way the core pushes requests to the client.
// A front end implements it per protocol (the remoting front end sends
// oneway requests on the connection). Its methods must not block for long
// (they run on the goroutine that changed the group, the client scanner or
// the transaction checker) and are never called with a core lock held.
type ClientConn interface {
	// RemoteAddr is the client's address, as host:port.
	RemoteAddr() string
	// NotifyConsumerIDsChanged tells a member of group that the group's
	// members or subscriptions changed (NOTIFY_CONSUMER_IDS_CHANGED).
	NotifyConsumerIDsChanged(group string) error
	// ResetOffset tells a member of a group to drop what it holds of the
	// topic's queues and resume from the offsets given
	// (RESET_CONSUMER_CLIENT_OFFSET).
	ResetOffset(r *OffsetReset) error
	// CheckTransaction asks a producer of the group for the outcome of a
	// transaction (CHECK_TRANSACTION_STATE); c and its Record are valid
	// during the call only.
	CheckTransaction(producerGroup string, c *TransactionCheck) error
	// Close closes the connection: the client was silent for
	// Options.ClientTimeout. The front end then calls ClientClosed.
	Close() error
}

// TransactionCheck is what CheckTransaction asks a producer about: the half
// message (its queue and commit-log offsets, ids, real topic) and its
// stored record (package broker/txn's Check).
type TransactionCheck = txn.Check

// OffsetReset is what ResetOffset pushes: the group's new offsets of a
// topic, by queue, and the reset's request (timestamp, force).
type OffsetReset struct {
	Topic, Group string
	Timestamp    int64 // ms; -1: the end of each queue
	Force        bool
	Offsets      []QueueOffset // sorted by queue id
}

// member is one connection's membership of a group. For consumer groups
// it keeps what the member's last heartbeat subscribed (sorted by topic)
// and a fingerprint of it, to detect members that subscribe differently.
type member struct {
	conn        ClientConn
	clientID    string
	subs        []protocol.SubscriptionData
	fingerprint string
}

// consumerGroup is the live state of a consumer group: its members and the
// subscriptions their heartbeats declare.
type consumerGroup struct {
	name             string
	members          map[ClientConn]*member
	subs             map[string]*subscription // by topic
	consumeType      string
	messageModel     string
	consumeFromWhere string
	// inconsistency describes how the members' subscriptions differ ("" when
	// they agree); it is logged when it changes.
	inconsistency string
}

// connClient is what the broker knows of one client connection.
type connClient struct {
	clientID       string
	language       string
	version        int32
	lastSeen       time.Time
	consumerGroups []string
	producerGroups []string
}

// clientManager tracks clients by connection: producer groups, consumer
// groups, their subscriptions. Its lock is a leaf: nothing else is locked
// and no ClientConn method is called while it is held.
type clientManager struct {
	log *slog.Logger

	mu        sync.RWMutex
	consumers map[string]*consumerGroup
	producers map[string]map[ClientConn]*member
	conns     map[ClientConn]*connClient
	// replyTo is RocketMQ's ProducerManager.clientChannelTable: the
	// connection of each client ID whose heartbeat declared a producer
	// group, the last one to do so; a reply is pushed there.
	replyTo map[string]ClientConn
}

func newClientManager(log *slog.Logger) *clientManager {
	return &clientManager{
		log:       log,
		consumers: make(map[string]*consumerGroup),
		producers: make(map[string]map[ClientConn]*member),
		conns:     make(map[ClientConn]*connClient),
		replyTo:   make(map[string]ClientConn),
	}
}

// heartbeat registers or refreshes a client's groups and returns the consumer
// groups whose membership or subscriptions changed (their members are to be
// notified) and the producer groups the connection joined.
func (m *clientManager) heartbeat(c ClientConn, hb *protocol.HeartbeatData, lang string, version int32, now time.Time) (changed, joined []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cc := m.conns[c]
	if cc == nil {
		cc = &connClient{}
		m.conns[c] = cc
	}
	cc.clientID = hb.ClientID
	cc.language, cc.version = lang, version
	cc.lastSeen = now

	// Producer groups: the heartbeat is the client's complete declaration.
	var prods []string
	for _, p := range hb.ProducerDataSet {
		if p.GroupName == "" || slices.Contains(prods, p.GroupName) {
			continue
		}
		prods = append(prods, p.GroupName)
		g := m.producers[p.GroupName]
		if g == nil {
			g = make(map[ClientConn]*member)
			m.producers[p.GroupName] = g
		}
		if g[c] == nil {
			joined = append(joined, p.GroupName)
		}
		g[c] = &member{conn: c, clientID: hb.ClientID}
	}
	for _, old := range cc.producerGroups {
		if !slices.Contains(prods, old) {
			m.leaveProducerLocked(c, old)
		}
	}
	cc.producerGroups = prods
	if len(prods) > 0 {
		m.replyTo[hb.ClientID] = c
	} else {
		m.forgetReplyToLocked(c, cc)
	}

	var cons []string
	for i := range hb.ConsumerDataSet {
		d := &hb.ConsumerDataSet[i]
		if d.GroupName == "" || slices.Contains(cons, d.GroupName) {
			continue
		}
		cons = append(cons, d.GroupName)
		if m.joinConsumerLocked(c, hb.ClientID, d) {
			changed = append(changed, d.GroupName)
		}
	}
	for _, old := range cc.consumerGroups {
		if !slices.Contains(cons, old) && m.leaveConsumerLocked(c, old) {
			changed = append(changed, old)
		}
	}
	cc.consumerGroups = cons
	return changed, joined
}

// joinConsumerLocked applies one group's heartbeat data; it reports whether
// the group's membership or subscriptions changed.
func (m *clientManager) joinConsumerLocked(c ClientConn, clientID string, d *protocol.ConsumerData) bool {
	g := m.consumers[d.GroupName]
	if g == nil {
		g = &consumerGroup{name: d.GroupName, members: make(map[ClientConn]*member), subs: make(map[string]*subscription)}
		m.consumers[d.GroupName] = g
	}
	changed := false
	subs, fp := memberSubscriptions(d.SubscriptionDataSet)
	if mb := g.members[c]; mb == nil || mb.clientID != clientID {
		g.members[c] = &member{conn: c, clientID: clientID, subs: subs, fingerprint: fp}
		changed = true
	} else if mb.fingerprint != fp {
		g.members[c] = &member{conn: c, clientID: clientID, subs: subs, fingerprint: fp}
	}
	defer m.checkConsistencyLocked(g)
	g.consumeType, g.messageModel, g.consumeFromWhere = d.ConsumeType, d.MessageModel, d.ConsumeFromWhere

	// Subscriptions: RocketMQ's ConsumerGroupInfo.updateSubscription. New
	// topics are added, newer versions replace older ones, topics the
	// heartbeat no longer lists are dropped.
	seen := make(map[string]bool, len(d.SubscriptionDataSet))
	for i := range d.SubscriptionDataSet {
		sd := &d.SubscriptionDataSet[i]
		if sd.Topic == "" {
			continue
		}
		seen[sd.Topic] = true
		old := g.subs[sd.Topic]
		switch {
		case old == nil:
			g.subs[sd.Topic] = newSubscription(sd)
			changed = true
		case sd.SubVersion > old.subVersion:
			if old.sameExpr(sd.ExpressionType, sd.SubString) {
				cp := *old
				cp.subVersion = sd.SubVersion
				g.subs[sd.Topic] = &cp
			} else {
				g.subs[sd.Topic] = newSubscription(sd)
				changed = true
			}
		}
	}
	for topic := range g.subs {
		if !seen[topic] {
			delete(g.subs, topic)
			changed = true
		}
	}
	return changed
}

func newSubscription(sd *protocol.SubscriptionData) *subscription {
	s := &subscription{topic: sd.Topic, subString: sd.SubString, exprType: sd.ExpressionType, subVersion: sd.SubVersion}
	s.filter, s.err = compileFilter(sd.ExpressionType, sd.SubString)
	return s
}

// leaveConsumerLocked removes c from a consumer group (dropping the group
// when it empties) and reports whether it was a member.
func (m *clientManager) leaveConsumerLocked(c ClientConn, group string) bool {
	g := m.consumers[group]
	if g == nil || g.members[c] == nil {
		return false
	}
	delete(g.members, c)
	if len(g.members) == 0 {
		delete(m.consumers, group)
		if g.inconsistency != "" {
			m.log.Info("broker: consumer group is gone; its members had subscribed differently", "group", group)
		}
	} else {
		m.checkConsistencyLocked(g)
	}
	return true
}

// memberSubscriptions copies a heartbeat's subscriptions, sorted by topic,
// and returns their fingerprint (topic, expression type and expression of
// each).
func memberSubscriptions(set []protocol.SubscriptionData) ([]protocol.SubscriptionData, string) {
	subs := make([]protocol.SubscriptionData, 0, len(set))
	for _, sd := range set {
		if sd.Topic == "" {
			continue
		}
		subs = append(subs, protocol.SubscriptionData{Topic: sd.Topic, SubString: sd.SubString,
			ExpressionType: normType(sd.ExpressionType), SubVersion: sd.SubVersion, TagsSet: sd.TagsSet})
	}
	sort.Slice(subs, func(i, j int) bool { return subs[i].Topic < subs[j].Topic })
	var b strings.Builder
	for _, sd := range subs {
		b.WriteString(sd.Topic)
		b.WriteByte(0)
		b.WriteString(sd.ExpressionType)
		b.WriteByte(0)
		b.WriteString(sd.SubString)
		b.WriteByte(1)
	}
	return subs, b.String()
}

// checkConsistencyLocked compares the members' subscriptions and logs once
// when the group becomes inconsistent (members subscribe to different topics
// or with different expressions: each heartbeat then overwrites the group's
// subscription and messages are lost) or consistent again.
func (m *clientManager) checkConsistencyLocked(g *consumerGroup) {
	desc := inconsistency(g)
	if desc == g.inconsistency {
		return
	}
	if desc != "" {
		m.log.Warn("broker: consumers of one group subscribe differently; messages will be missed", "group", g.name, "members", desc)
	} else {
		m.log.Info("broker: consumers of the group subscribe alike again", "group", g.name)
	}
	g.inconsistency = desc
}

// inconsistency describes the distinct subscriptions of a group's members
// ("" when they all agree).
func inconsistency(g *consumerGroup) string {
	byFP := map[string][]string{}
	var fps []string
	for _, mb := range g.members {
		if _, ok := byFP[mb.fingerprint]; !ok {
			fps = append(fps, mb.fingerprint)
		}
		byFP[mb.fingerprint] = append(byFP[mb.fingerprint], mb.clientID)
	}
	if len(fps) <= 1 {
		return ""
	}
	sort.Strings(fps)
	var b strings.Builder
	for i, fp := range fps {
		if i > 0 {
			b.WriteString("; ")
		}
		ids := byFP[fp]
		sort.Strings(ids)
		b.WriteString(strings.Join(ids, ","))
		b.WriteString(" -> ")
		b.WriteString(strings.NewReplacer("\x00", " ", "\x01", " | ").Replace(strings.TrimSuffix(fp, "\x01")))
	}
	return b.String()
}

// forgetReplyToLocked drops c as its client's reply target, if it is.
func (m *clientManager) forgetReplyToLocked(c ClientConn, cc *connClient) {
	if cc != nil && m.replyTo[cc.clientID] == c {
		delete(m.replyTo, cc.clientID)
	}
}

// replyConn is RocketMQ's ProducerManager.findChannel: the connection of
// the client with this ID that declared a producer group.
func (m *clientManager) replyConn(clientID string) (ClientConn, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	c, ok := m.replyTo[clientID]
	return c, ok
}

func (m *clientManager) leaveProducerLocked(c ClientConn, group string) {
	if g := m.producers[group]; g != nil {
		delete(g, c)
		if len(g) == 0 {
			delete(m.producers, group)
		}
	}
}

// unregister removes a client's connection from the named groups
// (UNREGISTER_CLIENT) and returns the consumer groups to notify.
func (m *clientManager) unregister(c ClientConn, producerGroup, consumerGroup string) (changed []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cc := m.conns[c]
	if producerGroup != "" {
		m.leaveProducerLocked(c, producerGroup)
		if cc != nil {
			cc.producerGroups = slices.DeleteFunc(cc.producerGroups, func(s string) bool { return s == producerGroup })
			if len(cc.producerGroups) == 0 {
				m.forgetReplyToLocked(c, cc)
			}
		}
	}
	if consumerGroup != "" {
		if m.leaveConsumerLocked(c, consumerGroup) {
			changed = append(changed, consumerGroup)
		}
		if cc != nil {
			cc.consumerGroups = slices.DeleteFunc(cc.consumerGroups, func(s string) bool { return s == consumerGroup })
		}
	}
	if cc != nil && len(cc.consumerGroups) == 0 && len(cc.producerGroups) == 0 {
		delete(m.conns, c)
	}
	return changed
}

// remove forgets a connection entirely (closed, or silent too long) and
// returns the consumer groups it left.
func (m *clientManager) remove(c ClientConn) (changed []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.removeLocked(c)
}

func (m *clientManager) removeLocked(c ClientConn) (changed []string) {
	cc := m.conns[c]
	if cc == nil {
		return nil
	}
	delete(m.conns, c)
	m.forgetReplyToLocked(c, cc)
	for _, g := range cc.producerGroups {
		m.leaveProducerLocked(c, g)
	}
	for _, g := range cc.consumerGroups {
		if m.leaveConsumerLocked(c, g) {
			changed = append(changed, g)
		}
	}
	return changed
}

// expire removes the clients whose last heartbeat is older than deadline; it
// returns their connections (to be closed) and the groups they left.
func (m *clientManager) expire(deadline time.Time) (conns []ClientConn, changed []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for c, cc := range m.conns {
		if cc.lastSeen.Before(deadline) {
			conns = append(conns, c)
			for _, g := range m.removeLocked(c) {
				if !slices.Contains(changed, g) {
					changed = append(changed, g)
				}
			}
		}
	}
	return conns, changed
}

// consumerIDs returns the clientIDs of a group's members, sorted, without
// duplicates; nil for an unknown group.
func (m *clientManager) consumerIDs(group string) []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	g := m.consumers[group]
	if g == nil {
		return nil
	}
	ids := make([]string, 0, len(g.members))
	for _, mb := range g.members {
		if !slices.Contains(ids, mb.clientID) {
			ids = append(ids, mb.clientID)
		}
	}
	sort.Strings(ids)
	return ids
}

// memberConns returns the connections of a consumer group's members.
func (m *clientManager) memberConns(group string) []ClientConn {
	m.mu.RLock()
	defer m.mu.RUnlock()
	g := m.consumers[group]
	if g == nil {
		return nil
	}
	out := make([]ClientConn, 0, len(g.members))
	for c := range g.members {
		out = append(out, c)
	}
	return out
}

// subscriptionOf returns a group's registered subscription of a topic, and
// whether the group is known at all. It does not allocate.
func (m *clientManager) subscriptionOf(group, topic []byte) (*subscription, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	g := m.consumers[string(group)]
	if g == nil {
		return nil, false
	}
	return g.subs[string(topic)], true
}

// counts returns the number of client connections, consumer groups and
// producer groups.
func (m *clientManager) counts() (conns, consumerGroups, producerGroups int) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return len(m.conns), len(m.consumers), len(m.producers)
}

// producerConns returns the live connections of a producer group.
func (m *clientManager) producerConns(group string) []ClientConn {
	m.mu.RLock()
	defer m.mu.RUnlock()
	g := m.producers[group]
	out := make([]ClientConn, 0, len(g))
	for c := range g {
		if c != nil {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].RemoteAddr() < out[j].RemoteAddr() })
	return out
}

// ConsumerGroupInfo is what the broker knows of a consumer group's live
// members (GET_CONSUMER_CONNECTION_LIST, 203; Core.ConsumerGroupInfo).
type ConsumerGroupInfo struct {
	Group            string           `json:"group"`
	ConsumeType      string           `json:"consumeType"`
	MessageModel     string           `json:"messageModel"`
	ConsumeFromWhere string           `json:"consumeFromWhere"`
	Connections      []ConsumerMember `json:"connectionSet"`
	// Subscriptions is the group's subscription table as the latest
	// heartbeat left it, by topic.
	Subscriptions map[string]protocol.SubscriptionData `json:"subscriptionTable"`
	// Consistent is false when members subscribe differently (different
	// topics or expressions); Inconsistency then says how.
	Consistent    bool   `json:"consistent"`
	Inconsistency string `json:"inconsistency,omitempty"`
}

// ConsumerMember is one member connection of a consumer group, with the
// subscriptions its last heartbeat declared.
type ConsumerMember struct {
	ClientID      string                      `json:"clientId"`
	ClientAddr    string                      `json:"clientAddr"`
	Language      string                      `json:"language"`
	Version       int32                       `json:"version"`
	Subscriptions []protocol.SubscriptionData `json:"subscriptions"`
}

// groupInfo returns a consumer group's live state; ok is false when it has
// no member.
func (m *clientManager) groupInfo(group string) (ConsumerGroupInfo, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	g := m.consumers[group]
	if g == nil {
		return ConsumerGroupInfo{}, false
	}
	info := ConsumerGroupInfo{
		Group: g.name, ConsumeType: g.consumeType, MessageModel: g.messageModel, ConsumeFromWhere: g.consumeFromWhere,
		Subscriptions: make(map[string]protocol.SubscriptionData, len(g.subs)),
		Consistent:    g.inconsistency == "", Inconsistency: g.inconsistency,
	}
	for topic, s := range g.subs {
		info.Subscriptions[topic] = protocol.SubscriptionData{Topic: topic, SubString: s.subString,
			ExpressionType: normType(s.exprType), SubVersion: s.subVersion}
	}
	for c, mb := range g.members {
		cm := ConsumerMember{ClientID: mb.clientID, Subscriptions: mb.subs}
		if c != nil {
			cm.ClientAddr = c.RemoteAddr()
		}
		if cc := m.conns[c]; cc != nil {
			cm.Language, cm.Version = cc.language, cc.version
		}
		info.Connections = append(info.Connections, cm)
	}
	sort.Slice(info.Connections, func(i, j int) bool {
		a, b := info.Connections[i], info.Connections[j]
		return a.ClientID < b.ClientID || (a.ClientID == b.ClientID && a.ClientAddr < b.ClientAddr)
	})
	return info, true
}

// Heartbeat registers a client's groups and subscriptions (HEART_BEAT, 34):
// the heartbeat is the connection's complete declaration, so a group it no
// longer lists is left. On a master it creates the consumer groups it
// names (valid names only) and their %RETRY% topics (a slave creates
// nothing: its tables follow its master's), notifies the members of every group
// whose members or subscriptions changed, and tells the transaction checker
// of producer groups the connection joined. conn may be nil (a caller with
// no connection: nothing is pushed to it).
func (c *Core) Heartbeat(conn ClientConn, hb *protocol.HeartbeatData, language string, version int32) error {
	if hb.ClientID == "" {
		return newError(ReasonClientIDRequired, "the heartbeat carries no clientID")
	}
	groupsCreated := false
	var src netip.Addr
	if conn != nil {
		src = sourceAddr(conn.RemoteAddr())
	}
	for i := range hb.ConsumerDataSet {
		if c.slave.Load() {
			break // a slave creates nothing: its tables follow its master's (configlog.go)
		}
		name := hb.ConsumerDataSet[i].GroupName
		if !validGroupName([]byte(name)) {
			c.opts.Logger.Warn("broker: heartbeat names an illegal consumer group; not creating it", "group", name)
			continue
		}
		if c.groups.get([]byte(name)) == nil {
			if err := c.autoCreate.allow("group", c.groups.count(), src, c.opts.Logger); err != nil {
				continue // logged by allow (rate-limited); the group's pulls are refused too
			}
		}
		_, created, err := c.setGroup(protocol.DefaultSubscriptionGroupConfig(name), true)
		if err != nil {
			c.opts.Logger.Warn("broker: creating a heartbeat's consumer group failed", "group", name, "err", err)
			continue
		}
		groupsCreated = groupsCreated || created
		retry := retryTopicPrefix + name
		if _, ok := checkTopicName([]byte(retry)); !ok {
			c.opts.Logger.Warn("broker: consumer group name cannot make a retry topic", "group", name)
			continue
		}
		if _, _, err := c.setTopic(newTopicConfig(retry, 1, protocol.PermRead|protocol.PermWrite), true); err != nil {
			c.opts.Logger.Warn("broker: creating a consumer group's retry topic failed", "topic", retry, "err", err)
		}
	}
	if groupsCreated {
		c.groupsChanged(false)
	}
	changed, joined := c.clients.heartbeat(conn, hb, language, version, time.Now())
	c.notify(changed)
	for _, g := range joined {
		c.features().tx.ProducerJoined(g)
	}
	return nil
}

// UnregisterClient removes a connection from the named groups
// (UNREGISTER_CLIENT, 35; either may be ""); the remaining members of a
// consumer group it left are notified.
func (c *Core) UnregisterClient(conn ClientConn, producerGroup, consumerGroup string) {
	c.notify(c.clients.unregister(conn, producerGroup, consumerGroup))
}

// ClientClosed forgets everything tied to a closed connection: its clients
// leave their groups and the remaining members are notified.
func (c *Core) ClientClosed(conn ClientConn) {
	c.notify(c.clients.remove(conn))
}

// ReplyConn is the connection of the client with this ID (a client's
// "ip@instance" name) that declared a producer group in its heartbeat:
// where a reply to its request is pushed (SEND_REPLY_MESSAGE, as
// RocketMQ's ProducerManager.findChannel). ok is false when no such client
// is connected to this broker.
func (c *Core) ReplyConn(clientID string) (conn ClientConn, ok bool) {
	return c.clients.replyConn(clientID)
}

// ConsumerIDs returns the client ids of a consumer group's live members,
// sorted (GET_CONSUMER_LIST_BY_GROUP, 38); SYSTEM_ERROR when it has none.
func (c *Core) ConsumerIDs(group string) ([]string, error) {
	ids := c.clients.consumerIDs(group)
	if len(ids) == 0 {
		return nil, newError(ReasonNoConsumer, "no consumer for this group, "+group)
	}
	return ids, nil
}

// ConsumerGroupInfo returns the live members of a consumer group, their
// subscriptions and whether they agree (GET_CONSUMER_CONNECTION_LIST, 203);
// ErrConsumerNotOnline's code when the group has no member.
func (a Admin) ConsumerGroupInfo(group string) (ConsumerGroupInfo, error) {
	c := a.c
	info, ok := c.clients.groupInfo(group)
	if !ok {
		return info, newError(ReasonConsumerNotOnline, "the consumer group["+group+"] not online")
	}
	return info, nil
}

// CheckSubscription checks that a subscription compiles
// (CHECK_CLIENT_CONFIG, 46, which Java clients send for SQL92):
// SUBSCRIPTION_PARSE_FAILED (23, with the position) for an expression that
// does not compile, SYSTEM_ERROR (1) when SQL92 filtering is disabled.
func (c *Core) CheckSubscription(exprType, expr string) error {
	typ := normType(exprType)
	if typ == filter.TypeTag {
		return nil
	}
	if typ == filter.TypeSQL92 && c.opts.DisablePropertyFilter {
		return newError(ReasonFilterTypeUnsupported, "The broker does not support consumer to filter message by "+typ)
	}
	if _, err := compileFilter(typ, expr); err != nil {
		return wrapError(ReasonSubscriptionParseFailed, err.Error(), err)
	}
	return nil
}

// notify tells every member of each group that the group changed
// (ClientConn.NotifyConsumerIDsChanged), outside the client manager's lock.
func (c *Core) notify(groups []string) {
	for _, g := range groups {
		for _, cc := range c.clients.memberConns(g) {
			if cc == nil {
				continue
			}
			if err := cc.NotifyConsumerIDsChanged(g); err == nil {
				c.stats.notifies.Add(1)
			}
		}
	}
}
