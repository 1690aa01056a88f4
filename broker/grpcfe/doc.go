// Package grpcfe is the broker's second front end: RocketMQ 5's gRPC
// MessagingService (apache.rocketmq.v2, the code in package rmqpb) served
// by the broker process itself, as RocketMQ's proxy in local mode, so the
// RocketMQ 5 SDKs (Java, Go, C++, C#, Python, Node.js, Rust) need no proxy.
// Like the remoting front end (package broker) it only translates: it
// decodes a request into the messaging core's request struct, calls one
// method of the core's messaging surface (through Core, core.go: the
// interface of what it calls, which *core.Core implements; never the
// core's Admin or Replication views), and encodes the answer; refusals become statuses in
// one place (status.go: a core refusal's Reason through reasonCodes, which
// go generate writes from broker/core/errors.json into status_gen.go; never
// the remark's text). The naming, tag, key, message-group and message-type
// rules it checks are the core's (core.CheckClientTopic, CheckTag, ...). It
// never imports remoting, namesrv or protocol's header types
// (TestNoRemotingWire, internal/importgraph).
//
// # Methods
//
// docs/grpc.md lists every method and its status. In short: QueryRoute
// (this broker's queues from the core, the cluster's from Options.Routes;
// an unknown topic is created as a send would create it), Heartbeat,
// NotifyClientTermination and Telemetry (clients.go: the client registry,
// settings, transaction checks and thread-stack requests pushed on the
// client's stream); SendMessage, EndTransaction (send.go), RecallMessage
// (recall.go); QueryAssignment (route.go), ReceiveMessage, AckMessage,
// ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue (receive.go:
// the core's POP operations); PullMessage, UpdateOffset, GetOffset,
// QueryOffset (pull.go). SyncLiteSubscription and lite receives: lite.go.
//
// # Renewal
//
// A receive with auto_renew (RocketMQ 5's PushConsumers) is renewed as
// RocketMQ's proxy renews it (renew.go): invisible for AutoRenewInvisible,
// then renewed by one goroutine for the whole server, on RocketMQ's
// schedule and up to RenewMax; an ack or a ChangeInvisibleDuration with the
// client's first handle ends it and applies to the delivery as it is now;
// the client's termination, the core's forgetting it, the loss of its
// telemetry stream (RenewOfflineGrace) and Shutdown release its deliveries
// (visible after RenewClearInvisible). Invariants: no goroutine per
// delivery; at most MaxRenewPerClient deliveries per client (a receive
// beyond is refused with TOO_MANY_REQUESTS before anything is popped).
//
// # Message types
//
// Every send asks the core to check the message's type against its
// topic's (core.SendRequest.CheckTopicType, the rule of
// core.AcceptedMessageTypes), as RocketMQ's proxy does with its default
// enableTopicMessageTypeCheck, and a producer's settings carry
// validate_message_type=true.
//
// # A group's members
//
// Every member of a broker group serves the front end in every role. With
// Options.Master naming another member as the group's master, a handler
// first forwards what the master serves (forward.go: writes, POP, reads,
// offsets and the client's session) to it over one cached grpc-go
// connection, with the caller's metadata and deadline, and answers what the
// master answered; routes and assignments are this member's, naming every
// member (Options.Members). Invariants: a call carrying the forwarded mark
// is never forwarded again; at most MaxForwarded calls are forwarded at
// once; a call whose master is out of reach waits, within its deadline,
// for the next one (ForwardRetryWait) and is sent there; without a known
// master the member's own core answers.
//
// # Messages across protocols
//
// A message is stored as a remoting producer's would be (convert.go):
// message_id is UNIQ_KEY, tag TAGS, keys KEYS, message_group
// __SHARDINGKEY (and picks the queue, by its hash, so a group stays in
// order), delivery_timestamp TIMER_DELIVER_MS, a transactional message a
// half message whose producer group is its topic (RocketMQ 5's clients
// have none). A stored record is delivered with the same mapping back,
// whichever protocol stored it; reserved properties never show as user
// properties.
//
// # Who owns what
//
//   - A request's messages are read during the call: core.Send copies what
//     it stores; the properties are built in a pooled sendJob, a request's
//     batch (send.go: sendMany) its messages' back to back, their bodies
//     the request's (a GZIP one's decoded copy) until core.Send returns.
//   - ReceiveMessage's records are the POP manager's copies in a pooled
//     core.PopResult: each message's body is a slice of it, copied once
//     more by protobuf's encoding into the stream's frame, then the result
//     returns to its pool. PullMessage's records are views of the mapped
//     commit log (core.PullResult), released after the stream's last Send
//     (grpc-go encodes a message before Send returns).
//   - A client (clients.go) is the core's ClientConn for its id: the
//     registry's key. It holds the current telemetry stream's outgoing
//     queue (256 commands; a full queue refuses the push, the core retries
//     a check later) and the settings it last sent.
//
// # Goroutines and long polling
//
// grpc-go runs each call on a pool of stream workers (more when all are
// busy). A receive or pull that finds nothing is parked in the server's
// long-poll holder (package broker/longpoll, longpoll.go), fed by the
// core's OnArrival and OnRevive listeners: a receive is woken by an
// arrival in its topic, a revive of its group's messages, or the time the
// next of them becomes visible again (no periodic look); a pull by an
// arrival past its offset. The holder's one goroutine re-runs it
// (core.PopAgain, PullAgain); the call's own goroutine waits (a grpc-go
// handler must not return before its answer) until the holder lets it
// answer, its long-polling timeout or deadline less a reserve passes, or
// its client cancels it (Cancel takes it back). At most MaxHeldReceives
// wait at once, at most MaxHeldPerClient from one connection and from one
// client id over all its connections (TOO_MANY_REQUESTS beyond, counted
// and logged once per cause per minute). A telemetry stream has two goroutines
// (receive, send) while it is open; a relayed one (forward.go) has the
// call's, one receiving from the client and one ending it at Shutdown.
// Shutdown stops the holder, which
// answers the held calls (with nothing), ends the streams, then stops the
// server; the core is its owner's to shut down after.
//
// # Transport and security
//
// Without Options.TLSServer, TLS (a self-signed certificate, or
// Options.TLS) and plaintext are accepted on the one port (transport.go),
// as RocketMQ's proxy does by default: RocketMQ 5's SDKs connect with TLS
// unless told otherwise. With Options.TLSServer (the broker's --tls-*
// settings), the port serves its mode: TLS only, or TLS and plaintext by
// the first byte, with the operator's certificate reloaded on change.
// With Options.Guard, grpc-go's tap authenticates every call's
// "authorization" header from its headers, before the stream exists and
// before a byte of its request is read (admit.go), and two interceptors
// authorize each request as RocketMQ 5's proxy does, before the method
// runs (security.go). Options.ServerOptions adds further interceptors,
// which run after these.
//
// # What a call may hold
//
// Invariants (admit.go): no request or answer message is larger than
// MaxRecvMsgSize / MaxSendMsgSize (the core's MaxMessageSize plus
// MsgSizeHeadroom by default; grpc-go refuses a larger request from its
// length prefix); with Options.Budget, every call holds a reservation of
// MaxRecvMsgSize in the process's receive budget from its headers until
// its first request has been read (or its stream ends, or RequestTimeout
// ends it), so the bytes held for requests being received never exceed
// the budget; a call that finds no room is refused from its headers.
//
// # Cost per call
//
// No stats handler is installed (grpc-go builds a dozen events per call
// for one): the size refusals are counted by the service's wrapped
// handlers and the server's codec (admit.go), and the interceptors are
// installed only with a Guard. Message buffers come from bufpool.go's
// tiers, which clear what they hand out, not a whole 1 MiB buffer.
//
// # Lock order
//
// The client table's mutex is taken before a client's; neither is held
// while the core is called, except that forget calls core.ClientClosed
// after releasing both. The forwarder's mutex is a leaf (held while the
// connection to the master is swapped, never during a call). The long-poll
// holder's mutex is a leaf (its
// listeners take it on the store's dispatcher and on an ack's goroutine,
// and never block).
package grpcfe
