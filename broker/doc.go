// Package broker is Apogee's RocketMQ broker process: the remoting front
// end that serves the official clients (rocketmq-client-go first) on top of
// the messaging core (package broker/core), and the wiring around it: the
// embedded name-server registry (and the registrar for external name
// servers), the remoting server, long polling. Everything a request does
// to messages, offsets, topics, groups and clients is the core's; this
// package decodes a frame, calls one core method and encodes the answer.
// docs/protocol.md lists every request code and its status; docs/features.md
// describes each feature, its guarantees and limits; docs/design.md walks a
// send and a pull through both packages.
//
// # Request flow
//
// A Broker is a remoting.Handler. Each connection's read goroutine calls
// ServeRemoting inline, once per request, which looks the code up in the
// handler table (handlers.go: built once by New from each file's
// register* function, then read without a lock); name-server codes
// (namesrv.IsNamesrvCode) go to the embedded registry, unknown codes get
// REQUEST_CODE_NOT_SUPPORTED. A handler decodes the typed header (views of
// the request for the hot paths: the generated decoders, field presence in
// the struct), fills the core's request struct, calls the core, and
// encodes. Errors become responses in one place, fail: a *core.Error's
// code and remark, or SYSTEM_ERROR with the text of a header or body that
// does not decode (as the Java broker answers). No handler blocks the
// connection:
//
//   - Send (10, 310, 320): core.Send into a pooled core.SendResult; the
//     answer's msgId, queueId, queueOffset and transactionId come from it.
//     In sync-flush mode the result carries a core.Pending: the request is
//     deferred (Conn.Defer) and a pooled pendingAck, the core's
//     DurableWaiter, answers it when core.WhenDurable reports the sync that
//     covers it (answerWhenDurable, durable.go: the one place that chooses
//     between deferring and, without a connection, core.WaitDurable).
//     CONSUMER_SEND_MSG_BACK (36) and END_TRANSACTION (37) answer the same
//     way, with the code alone.
//   - SEND_REPLY_MESSAGE (324, 325; reply.go): core.Send stores the reply
//     (in the cluster's reply topic, or wherever the replier sends it), then
//     the request is deferred while PUSH_REPLY_MESSAGE_TO_CLIENT (326) goes,
//     with InvokeAsync and a 10 s bound, to the connection core.ReplyConn
//     names for the reply's REPLY_TO_CLIENT; the requester's answer, or its
//     absence, decides the replier's code (SUCCESS, or SYSTEM_ERROR with
//     RocketMQ's remark), the stored reply's send fields go with it. A sync
//     flush's wait runs on a goroutine of its own before the push.
//   - Pull (11): core.Pull into a pooled pullJob's core.PullResult. Its
//     records are views of the commit log and become the response body as
//     they are: the connection writes them with the header in one writev
//     and then calls the job's Release, which unpins them. The four offset
//     headers always go (also for an error of the read itself). A pull that
//     finds nothing new (PULL_NOT_FOUND) with the suspend flag is deferred
//     and parked in the long-poll holder (package broker/longpoll;
//     host_longpoll.go is its host) until the core's OnArrival reports a
//     message in its queue or its deadline (suspendTimeoutMillis, capped
//     by LongPollMax) passes; the holder's goroutine then runs it again
//     (core.PullAgain) and answers it, or parks it again at the offset the
//     scan reached when the arrival brought nothing its filter accepts. An
//     arrival that wakes at most 4 pulls while the holder's goroutine is
//     idle has the store's dispatcher run them itself
//     (longpoll.Options.InlineArrivals: a pull's re-run only reads and
//     queues its answer). Held answers are queued (Responder.Queue) and
//     each connection is flushed once after the batch (Conn.Flush), which
//     writes a few answers directly when the connection's writer is idle.
//   - POP_MESSAGE (3442): core.Pop; a pop that finds nothing and has a
//     pollTime is deferred and parked in the same holder, keyed by its
//     topic, queue (or all) and group, until an arrival there, a revive of
//     the group's messages (core.OnRevive), the time the next of them
//     becomes visible again, its pollTime (capped by LongPollMax) or the
//     broker's shutdown; the holder's goroutine then runs it again
//     (core.PopAgain) and answers it (POLLING_FULL when the holder is
//     full; a pull is answered SYSTEM_BUSY then). ACK_MESSAGE (3443) and
//     CHANGE_MESSAGE_INVISIBLETIME (3445): the receipt handle is parsed
//     here (protocol.ParseExtraInfo), the rest is core.Ack and
//     core.ChangeInvisible.
//   - Heartbeat (34), unregister (35), consumer list (38), connections
//     (203), CHECK_CLIENT_CONFIG (46), locks (41, 42), offsets (14, 15,
//     29-32, 222), query and view (12, 33), topics and groups (17, 21, 200,
//     201, 207, 215, 352), runtime info (28) and delay offsets (45) are
//     answered inline from the core method of the same name.
//   - Pushes: the core reaches a client through clientConn
//     (clientconn.go), this front end's core.ClientConn: a value of the
//     connection and the broker, so every call about one connection is the
//     same registry key. It sends NOTIFY_CONSUMER_IDS_CHANGED (40),
//     RESET_CONSUMER_CLIENT_OFFSET (220, its fastjson-shaped body built
//     here) and CHECK_TRANSACTION_STATE (39) as oneway requests, and closes
//     a connection the core's client scanner found silent. ConnClosed
//     (wired to Server.OnClose) tells the core (core.ClientClosed) and the
//     embedded registry.
//
// Malformed frames are remoting's business: it closes that connection only.
//
// # Registration
//
// The core tells the front end of every topic created, changed or deleted
// (core.Options.TopicChanged = registerTopic): the topic alone is published
// to the embedded registry at once (under registerMu, reading the topic's
// latest configuration from the core) and handed to the Registrar, which
// sends it to the external name servers with its next round. The whole
// table is registered at start and every RegisterInterval (maintain).
//
// # Who owns what
//
//   - A request and everything decoded from it are valid only while its
//     handler runs; the core keeps none of it. What outlives the handler is
//     owned elsewhere: a held pull keeps its pooled pullJob (whose
//     PullResult holds the topic table's string and the compiled filter)
//     and its Responder; a pending sync answer keeps copies of the msgId
//     and UNIQ_KEY; a held pop its core.PopResult.
//   - A pullJob pins commit-log segments until the connection has written
//     its views and calls its Release, which also returns it to its pool.
//     The views of QUERY_MESSAGE and VIEW_MESSAGE_BY_ID likewise
//     (viewsRelease).
//
// # Goroutines and shutdown
//
// Besides the connections' (remoting) and the core's (see broker/core), a
// Broker runs the pull holder's loop, maintain (the registry's full
// re-registration every RegisterInterval) and one goroutine per held pop;
// the embedded registry runs its scanner, the Registrar (with external
// name servers) its own. Shutdown stops the holder first (it answers every
// held pull), then the server (finishing the requests in flight), maintain
// and the held pops, unregisters from the name servers, and shuts the core
// down (which persists everything and closes the store).
//
// # Lock order
//
// registerMu is taken before the core's topic table lock (reading one
// topic, or a snapshot) and the registry's; the Registrar is told of a
// change after registerMu is released. The pull holder's mutex is a leaf
// (broker/longpoll). The core's locks are its own (broker/core's doc); no
// front-end lock is held while the core is called, except registerMu
// around TopicConfig and Topics.
package broker
