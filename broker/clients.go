package broker

import (
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/apogeemq/apogee/filter"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
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

// member is one connection's membership of a group.
type member struct {
	conn     *remoting.Conn
	clientID string
}

// consumerGroup is the live state of a consumer group: its members and the
// subscriptions their heartbeats declare.
type consumerGroup struct {
	name             string
	members          map[*remoting.Conn]*member
	subs             map[string]*subscription // by topic
	consumeType      string
	messageModel     string
	consumeFromWhere string
}

// connClient is what the broker knows of one client connection.
type connClient struct {
	clientID       string
	lastSeen       time.Time
	consumerGroups []string
	producerGroups []string
}

// clientManager tracks clients by connection: producer groups, consumer
// groups, their subscriptions. Its lock is taken after no other broker lock.
type clientManager struct {
	mu        sync.RWMutex
	consumers map[string]*consumerGroup
	producers map[string]map[*remoting.Conn]*member
	conns     map[*remoting.Conn]*connClient
}

func newClientManager() *clientManager {
	return &clientManager{
		consumers: make(map[string]*consumerGroup),
		producers: make(map[string]map[*remoting.Conn]*member),
		conns:     make(map[*remoting.Conn]*connClient),
	}
}

// heartbeat registers or refreshes a client's groups and returns the consumer
// groups whose membership or subscriptions changed (their members are to be
// notified) and the producer groups the connection joined.
func (m *clientManager) heartbeat(c *remoting.Conn, hb *protocol.HeartbeatData, now time.Time) (changed, joined []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cc := m.conns[c]
	if cc == nil {
		cc = &connClient{}
		m.conns[c] = cc
	}
	cc.clientID = hb.ClientID
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
			g = make(map[*remoting.Conn]*member)
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
func (m *clientManager) joinConsumerLocked(c *remoting.Conn, clientID string, d *protocol.ConsumerData) bool {
	g := m.consumers[d.GroupName]
	if g == nil {
		g = &consumerGroup{name: d.GroupName, members: make(map[*remoting.Conn]*member), subs: make(map[string]*subscription)}
		m.consumers[d.GroupName] = g
	}
	changed := false
	if mb := g.members[c]; mb == nil || mb.clientID != clientID {
		g.members[c] = &member{conn: c, clientID: clientID}
		changed = true
	}
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
func (m *clientManager) leaveConsumerLocked(c *remoting.Conn, group string) bool {
	g := m.consumers[group]
	if g == nil || g.members[c] == nil {
		return false
	}
	delete(g.members, c)
	if len(g.members) == 0 {
		delete(m.consumers, group)
	}
	return true
}

func (m *clientManager) leaveProducerLocked(c *remoting.Conn, group string) {
	if g := m.producers[group]; g != nil {
		delete(g, c)
		if len(g) == 0 {
			delete(m.producers, group)
		}
	}
}

// unregister removes a client's connection from the named groups
// (UNREGISTER_CLIENT) and returns the consumer groups to notify.
func (m *clientManager) unregister(c *remoting.Conn, producerGroup, consumerGroup string) (changed []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cc := m.conns[c]
	if producerGroup != "" {
		m.leaveProducerLocked(c, producerGroup)
		if cc != nil {
			cc.producerGroups = slices.DeleteFunc(cc.producerGroups, func(s string) bool { return s == producerGroup })
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
func (m *clientManager) remove(c *remoting.Conn) (changed []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.removeLocked(c)
}

func (m *clientManager) removeLocked(c *remoting.Conn) (changed []string) {
	cc := m.conns[c]
	if cc == nil {
		return nil
	}
	delete(m.conns, c)
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
func (m *clientManager) expire(deadline time.Time) (conns []*remoting.Conn, changed []string) {
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
func (m *clientManager) memberConns(group string) []*remoting.Conn {
	m.mu.RLock()
	defer m.mu.RUnlock()
	g := m.consumers[group]
	if g == nil {
		return nil
	}
	out := make([]*remoting.Conn, 0, len(g.members))
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
func (m *clientManager) producerConns(group string) []*remoting.Conn {
	m.mu.RLock()
	defer m.mu.RUnlock()
	g := m.producers[group]
	out := make([]*remoting.Conn, 0, len(g))
	for c := range g {
		if c != nil {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID() < out[j].ID() })
	return out
}
