// Package namesrv is RocketMQ's name server: the route registry that tells clients
// which brokers host a topic, with how many queues, at which addresses.
//
// A Registry runs embedded in the broker process (the broker registers itself with
// Registry.RegisterBroker and routes the codes for which IsNamesrvCode is true to
// Registry.ServeRemoting, on its own address and on its name-server listener), or
// standalone behind Serve for clusters. A broker that registers with external name
// servers uses a Registrar.
//
// # Tables and invariants
//
// Everything lives in memory under one RWMutex. Routes are never persisted: brokers
// register again within 30 s of a restart. The KV config (PUT/GET/DELETE_KV_CONFIG,
// GET_KVLIST_BY_NAMESPACE) is kept in a file when Options.KVConfigPath is set
// (OpenRegistry; cmd/apogee-namesrv does so): RocketMQ's kvConfig.json, written by
// package internal/durable's rules before each change is applied and answered.
// The embedded registry keeps it in memory only.
//
//   - A broker name (a master, id 0, and its slaves) belongs to one cluster and maps
//     broker ids to addresses. It exists exactly while at least one of its addresses
//     is registered; an address belongs to at most one broker name and id (a broker
//     that registers the same address under another name or id replaces its old
//     identity, and a second address for the same name and id replaces the first).
//   - The topic set of a broker name is the one its master last registered (a
//     registration replaces it whole; a REGISTER_BROKER without a body keeps it),
//     changed since by single topics: REGISTER_TOPIC_IN_NAMESRV and RegisterTopic add
//     or update one topic's queues on a registered broker name, UnregisterTopic
//     removes them; the broker's next full registration replaces the set again. A
//     slave's topics are ignored, as in Java: routes carry the master's queue counts.
//     The queues stay in routes while any address of the name remains, so consumers
//     can still read from slaves when the master is gone.
//   - A topic exists exactly while some broker name hosts it. Its route is one
//     QueueData per hosting broker name (read/write queue numbers, perm, topicSysFlag;
//     sorted by broker name) plus the BrokerData (cluster, name, {id: address}) of
//     those names, and orderTopicConf from KV namespace ORDER_TOPIC_CONFIG. Nothing is
//     special about TBW102 or %RETRY% topics: they are routed when a broker registers
//     them (a broker with auto-create on registers TBW102 with perm 7, which is what
//     lets rocketmq-client-go producers send to topics that do not exist yet).
//   - Every change to the tables bumps a generation number, except a single-topic
//     change (RegisterTopic, UnregisterTopic), which drops that topic's cached body
//     only. Encoded route bodies are cached per topic, in both JSON forms, with the
//     generation they were built at; GET_ROUTEINFO_BY_TOPIC serves a current cached
//     body without allocating. Cached bodies are immutable. A single-topic change
//     costs the same whatever the number of topics.
//
// # Wire formats
//
// Routes are written by protocol.TopicRouteData.AppendJSON: compact JSON whose
// brokerAddrs ids are unquoted ({0:"addr"}, as Java's fastjson writes them) for
// clients older than V4_9_4, rocketmq-client-go (version 317) among them, and quoted
// for newer clients or those that send acceptStandardJsonOnly=true
// (protocol.RouteJSONStandard). Unknown topics get TOPIC_NOT_EXIST (17) with Java's
// remark. REGISTER_BROKER takes the uncompressed JSON body only (the compressed form
// is refused with SYSTEM_ERROR and a remark saying so); a non-zero bodyCrc32 that
// does not match the body gets SYSTEM_ERROR "crc32 not match". Headers that do not
// decode get SYSTEM_ERROR with the decoding error as remark; unknown codes get
// REQUEST_CODE_NOT_SUPPORTED. Bodies of requests older than V3_0_11 (a bare topic
// table) are not supported.
//
// # Liveness
//
//   - A broker registered by Registry.RegisterBroker (embedded, no connection) never
//     expires; only UnregisterBroker removes it.
//   - A broker registered by REGISTER_BROKER is bound to the connection it last
//     registered over. It is dropped when that connection closes (whoever owns the
//     remoting.Server must call Registry.ConnClosed from its OnClose; Serve does), or
//     when it has not registered for its timeout: the header's heartbeatTimeoutMillis
//     if positive, else Options.BrokerTimeout (120 s). The expiry scan runs every
//     Options.ScanInterval (5 s), so a silent broker goes within timeout + interval.
//   - UNREGISTER_BROKER removes a broker at once. When the last address of a broker
//     name goes, its queues leave every route, and topics left without a host cease
//     to exist (TOPIC_NOT_EXIST).
//
// The registry never touches remoting.Conn.Value (the broker owns it).
//
// # Goroutines
//
// A Registry runs one goroutine, the expiry scanner, from NewRegistry to Close.
// ServeRemoting answers inline on the connection's read goroutine and never blocks
// beyond the registry's lock, except for a KV change with a KV file, which waits for
// its write (that connection only; other requests wait for nothing but the lock).
//
// # Lock order
//
// kvMu (serialises KV changes and their writes) before mu. Nothing else nests. A Registrar runs one goroutine from Start to Close
// (plus, during a round, one per address and, in a single-topic round, up to
// topicInflight per address; and one per connection it registered over, which
// triggers a new round a second after that connection closes).
package namesrv
