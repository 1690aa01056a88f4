package grpcfe

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"

	"google.golang.org/grpc/metadata"

	"github.com/apogeemq/apogee/broker/core"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/rmqpb"
)

// QueryRoute answers the queues of a topic: this broker's (from the core's
// topic table) and, with Options.Routes, the other brokers' of a cluster,
// each with its gRPC endpoint. An unknown topic is created as a send to it
// would create it (from TBW102, unless auto-creation is off: then
// TOPIC_NOT_FOUND), since RocketMQ 5's clients look up the route of every
// topic before they use it. A slave's core creates nothing: it answers the
// topics its table follows from the master and TOPIC_NOT_FOUND for the
// others (core.RouteTopic).
func (s *Server) QueryRoute(ctx context.Context, r *rmqpb.QueryRouteRequest) (*rmqpb.QueryRouteResponse, error) {
	topic := r.GetTopic().GetName()
	if err := core.CheckClientTopic(topic); err != nil {
		return &rmqpb.QueryRouteResponse{Status: errStatus(err)}, nil
	}
	routes, err := s.routes(topic, true, peerAddr(ctx))
	if err != nil {
		if errors.Is(err, core.ErrTopicNotExist) {
			if resp, fwd, err := s.forwardRoute(ctx, r); fwd {
				return resp, err
			}
		}
		return &rmqpb.QueryRouteResponse{Status: errStatus(err)}, nil
	}
	var mqs []*rmqpb.MessageQueue
	for _, rt := range routes {
		b := s.brokerOf(ctx, rt)
		// As RocketMQ's proxy: one entry per queue id, with the permission
		// that queue has (read queues beyond the write ones are read-only).
		n := max(rt.ReadQueues, rt.WriteQueues)
		for q := int32(0); q < n; q++ {
			perm := permOf(rt.Perm, q < rt.ReadQueues, q < rt.WriteQueues)
			mqs = append(mqs, &rmqpb.MessageQueue{
				Topic: &rmqpb.Resource{Name: topic, ResourceNamespace: r.GetTopic().GetResourceNamespace()},
				Id:    q, Permission: perm, Broker: b, AcceptMessageTypes: rt.MessageTypes,
			})
		}
	}
	return &rmqpb.QueryRouteResponse{Status: okStatus, MessageQueues: mqs}, nil
}

// QueryAssignment answers the queues a push consumer of a group receives
// from: one per readable broker, queue id -1 (the broker hands out the
// messages of every queue, message by message, as RocketMQ's proxy
// assigns).
func (s *Server) QueryAssignment(ctx context.Context, r *rmqpb.QueryAssignmentRequest) (*rmqpb.QueryAssignmentResponse, error) {
	topic := r.GetTopic().GetName()
	if err := core.CheckClientTopic(topic); err != nil {
		return &rmqpb.QueryAssignmentResponse{Status: errStatus(err)}, nil
	}
	if err := core.CheckClientGroup(r.GetGroup().GetName()); err != nil {
		return &rmqpb.QueryAssignmentResponse{Status: errStatus(err)}, nil
	}
	routes, err := s.routes(topic, false, netip.AddrPort{})
	if err != nil {
		if errors.Is(err, core.ErrTopicNotExist) {
			if resp, fwd, err := s.forwardAssignment(ctx, r); fwd {
				return resp, err
			}
		}
		return &rmqpb.QueryAssignmentResponse{Status: errStatus(err)}, nil
	}
	var as []*rmqpb.Assignment
	for _, rt := range routes {
		if rt.ReadQueues <= 0 || rt.Perm&protocol.PermRead == 0 {
			continue
		}
		as = append(as, &rmqpb.Assignment{MessageQueue: &rmqpb.MessageQueue{
			Topic: r.GetTopic(), Id: -1, Permission: rmqpb.Permission_READ_WRITE, Broker: s.brokerOf(ctx, rt),
			AcceptMessageTypes: rt.MessageTypes,
		}})
	}
	if len(as) == 0 {
		return &rmqpb.QueryAssignmentResponse{Status: status(rmqpb.Code_FORBIDDEN, "topic "+topic+" has no readable queue")}, nil
	}
	return &rmqpb.QueryAssignmentResponse{Status: okStatus, Assignments: as}, nil
}

// routes returns the brokers of a topic: this one first, then the others
// Options.Routes knows. A topic created for the query counts against the
// auto-creation caps with src, the client's address.
func (s *Server) routes(topic string, create bool, src netip.AddrPort) ([]Route, error) {
	cfg, err := s.core.RouteTopic(topic, create, src)
	if err != nil {
		return nil, err
	}
	out := []Route{{BrokerName: s.brokerName, Addr: s.opts.Addr, ReadQueues: cfg.ReadQueueNums,
		WriteQueues: cfg.WriteQueueNums, Perm: cfg.Perm, MessageTypes: messageTypes(cfg)}}
	if s.opts.Routes != nil {
		for _, rt := range s.opts.Routes(topic) {
			if rt.BrokerName != s.brokerName {
				if rt.MessageTypes == nil {
					rt.MessageTypes = out[0].MessageTypes
				}
				out = append(out, rt)
			}
		}
	}
	return out, nil
}

// metaLanguage is the header naming a client's SDK.
const metaLanguage = "x-mq-language"

// oneEndpoint reports whether a call's client takes a broker's endpoints
// as one address only: the Node.js SDK (language "HTTP"), whose 1.0.x
// releases use the addresses joined with "," as one gRPC target, which
// fails name resolution.
func oneEndpoint(ctx context.Context) bool {
	v := metadata.ValueFromIncomingContext(ctx, metaLanguage)
	return len(v) > 0 && v[0] == "HTTP"
}

// brokerOf is the protocol's broker of a route entry. Its endpoints are
// the entry's Addr, then its Addrs (for this broker: the master
// Options.Master names when it is another member, this member's Addr,
// then Options.Members), each once, those of the first one's scheme: any
// member serves every call (forward.go), so a client whose member fails
// goes on with another (the Go and Java SDKs make one connection of the
// addresses, which moves to the next one reachable) and none depends on
// which member is master. A client that takes one address (oneEndpoint)
// gets the member it asked, the one address valid across a failover for
// as long as the client can reach it.
func (s *Server) brokerOf(ctx context.Context, rt Route) *rmqpb.Broker {
	addrs := rt.Addrs
	ours := rt.Addr == s.opts.Addr && rt.BrokerName == s.brokerName
	if ours && s.opts.Members != nil {
		addrs = s.opts.Members()
	}
	one := oneEndpoint(ctx)
	ep := &rmqpb.Endpoints{}
	seen := make(map[string]bool, 1+len(addrs))
	add := func(a string) {
		if seen[a] || (one && len(ep.Addresses) == 1) {
			return
		}
		seen[a] = true
		host, portStr, err := net.SplitHostPort(a)
		if err != nil {
			return
		}
		port, err := strconv.ParseUint(portStr, 10, 16)
		if err != nil {
			return
		}
		scheme := schemeOf(host)
		if len(ep.Addresses) == 0 {
			ep.Scheme = scheme
		} else if scheme != ep.Scheme {
			return
		}
		ep.Addresses = append(ep.Addresses, &rmqpb.Address{Host: host, Port: int32(port)})
	}
	if ours && !one && s.opts.Master != nil {
		if m, self := s.opts.Master(); m != "" && !self {
			add(m) // the master first: a client that takes the first saves the hop
		}
	}
	add(rt.Addr)
	for _, a := range addrs {
		add(a)
	}
	if len(ep.Addresses) == 0 { // an entry without a usable address: this member's
		ep.Scheme = schemeOf(s.selfHost)
		ep.Addresses = []*rmqpb.Address{{Host: s.selfHost, Port: s.selfPort}}
	}
	return &rmqpb.Broker{Name: rt.BrokerName, Id: 0, Endpoints: ep}
}

// schemeOf is the address scheme of a host: an IP address's family, else
// a domain name.
func schemeOf(host string) rmqpb.AddressScheme {
	a, err := netip.ParseAddr(host)
	switch {
	case err != nil:
		return rmqpb.AddressScheme_DOMAIN_NAME
	case a.Is6() && !a.Is4In6():
		return rmqpb.AddressScheme_IPv6
	}
	return rmqpb.AddressScheme_IPv4
}

// permOf is a queue's permission: the topic's, limited to what the queue
// is (a read queue, a write queue, or both).
func permOf(perm int32, read, write bool) rmqpb.Permission {
	r := read && perm&protocol.PermRead != 0
	w := write && perm&protocol.PermWrite != 0
	switch {
	case r && w:
		return rmqpb.Permission_READ_WRITE
	case r:
		return rmqpb.Permission_READ
	case w:
		return rmqpb.Permission_WRITE
	}
	return rmqpb.Permission_NONE
}

// messageTypes are the message types a topic accepts
// (core.AcceptedMessageTypes).
func messageTypes(cfg protocol.TopicConfig) []rmqpb.MessageType {
	ts := core.AcceptedMessageTypes(cfg)
	out := make([]rmqpb.MessageType, len(ts))
	for i, t := range ts {
		out[i] = protoTypes[t]
	}
	return out
}
