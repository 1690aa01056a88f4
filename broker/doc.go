// Package broker is Apogee's RocketMQ broker: the request processors that
// serve the official clients (rocketmq-client-go first) on top of the store,
// with long polling, the topic / subscription-group / consumer-offset
// managers, the client registry, queue locks, registration with the
// embedded (and optional external) name servers, and the messaging features:
// retry and dead-letter queues, delay levels, timer messages, transactions,
// tag and SQL92 filters, RocketMQ 5 topic and group settings, offset resets.
// docs/protocol.md lists every request code and its status; docs/features.md
// describes each feature, its guarantees and limits.
//
// # Request flow
//
// A Broker is a remoting.Handler. Each connection's read goroutine calls
// ServeRemoting inline, once per request, which dispatches on the code;
// name-server codes (namesrv.IsNamesrvCode) go to the embedded registry.
// No handler blocks the connection:
//
//   - Send (10, 310, 320): the typed header is a view of the request; topic,
//     body and properties are checked; back-pressure answers SYSTEM_BUSY at
//     once when the in-flight message bytes exceed MaxInFlightBytes or the
//     store has completed no put for BusyTimeout; an unknown topic is
//     auto-created from TBW102 (or a %RETRY% topic with 1 queue) and
//     registered at once (that topic alone, see "Topics and groups"); the
//     stored properties (the producer's plus
//     CLUSTER) are built in a pooled buffer; a batch body is split into
//     entries that go to the store in one PutBatch. In async-flush mode the
//     answer is written inline. In sync-flush mode the store is told not to
//     wait, the request is deferred, and the sync acker answers it once one
//     WaitFlushed covers it (one wait serves every send queued meanwhile).
//   - Pull (11): the filter is the subscription the group's heartbeats
//     registered (compiled once per subscription version) or, with sysFlag
//     bit 2, the request's own (compiled once per expression, cached).
//     store.Get returns views of the commit log; they become the response
//     body as they are (written with the header in one writev) and are
//     released by the connection after the write. A pull that finds nothing
//     new (PULL_NOT_FOUND) with the suspend flag is deferred and parked in
//     the pull holder (package broker/longpoll; host_longpoll.go is its
//     host) until the store's OnArrival reports a message in its queue or
//     its deadline (suspendTimeoutMillis, capped by LongPollMax) passes; the
//     holder's goroutine then runs it again and answers it, or parks it
//     again at the offset the scan reached when the arrival brought nothing
//     its filter accepts. Shutdown stops the holder first, which answers
//     every held pull.
//   - Messaging features on the send path (routeSend, allocation-free):
//     a send to %RETRY%<group> beyond the group's max reconsume times (or
//     while the group consumes orderly) goes to %DLQ%<group>; a half
//     message (TRAN_MSG=true or the PREPARED sysflag) to
//     RMQ_SYS_TRANS_HALF_TOPIC; TIMER_DELIVER_MS / TIMER_DELAY_SEC /
//     TIMER_DELAY_MS in the future to the timer topic (rmq_sys_wheel_timer);
//     DELAY > 0 to SCHEDULE_TOPIC_XXXX queue level-1. The real topic and
//     queue travel in REAL_TOPIC / REAL_QID. The topic's message.type
//     attribute and the per-type size limits are checked there too.
//   - CONSUMER_SEND_MSG_BACK (36) re-stores the record found at the
//     request's commit-log offset to the group's retry topic through a delay
//     level (or the group's retry policy, through the timer wheel), or to its
//     DLQ. END_TRANSACTION (37) is decoded here and ended by the transaction
//     manager (broker/txn, Manager.End), which validates the half message and
//     stores the committed message and the op record in one append (a
//     rollback: the op record alone). Both answer inline (deferred to the
//     sync acker in sync-flush mode).
//   - POP_MESSAGE (3442), ACK_MESSAGE (3443) and
//     CHANGE_MESSAGE_INVISIBLETIME (3445) are decoded and checked (topic,
//     queue, group, filter, receipt handle) in pop.go and served by package
//     broker/pop's Manager through popHost (host_pop.go): the store's
//     queues, the offset table, %DLQ%<group> and popState.json. A pop that
//     finds nothing and has a pollTime is deferred and re-run every 20 ms on
//     a goroutine of its own (at most 4096 held) until it finds messages,
//     its time passes or the broker shuts down.
//   - Heartbeat (34), consumer list (38), offsets (14, 15, 29-32), query and
//     view (12, 33), admin (17, 21, 28, 200, 201, 203, 207, 215, 222, 352),
//     CHECK_CLIENT_CONFIG (46) and locks (41, 42) are answered inline.
//     NOTIFY_CONSUMER_IDS_CHANGED (40) is pushed with InvokeOneway to every
//     member of a group whose members or subscriptions changed: on a
//     heartbeat, UNREGISTER_CLIENT, a closed connection (ConnClosed, wired
//     to Server.OnClose) or a client silent for ClientTimeout (the scanner
//     closes its connection). RESET_CONSUMER_CLIENT_OFFSET (220) is pushed
//     the same way by a reset (222), CHECK_TRANSACTION_STATE (39) for the
//     transaction checker (broker/txn asks through its Host; host_txn.go
//     encodes and sends) to one live connection of a producer group.
//
// Every decode failure of a client's bytes becomes an error response with a
// remark (SYSTEM_ERROR for headers and bodies, as the Java broker answers);
// unknown codes get REQUEST_CODE_NOT_SUPPORTED. Malformed frames are
// remoting's business: it closes that connection only.
//
// # Who owns what
//
//   - A request and everything decoded from it are valid only while its
//     handler runs. What outlives the handler is copied or owned elsewhere:
//     a held pull keeps the topic entry's name (an immutable string of the
//     topic table), the compiled filter (immutable, shared) and its pooled
//     pullJob; a pending sync ack keeps copies of the msgId and UNIQ_KEY.
//   - A pullJob owns a store.GetResult; its views pin commit-log segments
//     until the connection has written them and calls the job's Release,
//     which also returns the job to its pool.
//   - Topic entries, subscription-group configurations and subscriptions are
//     immutable once published; a change publishes a new value.
//   - State files (DataDir/config: topics.json, subscriptionGroup.json,
//     consumerOffset.json, delayOffset.json, timerCheckpoint.json,
//     transactionCheckpoint.json, popState.json) are written whole through
//     Options.WriteConfigFile (temporary file, fsync, the current file kept
//     as FILE.bak, rename, directory fsync) and read by loadStateFile, which
//     falls back to FILE.bak with a WARN when FILE is missing or does not
//     parse, and refuses to start, naming both, when neither parses (see
//     persist.go). Topics and groups are written by their stateWriter (below),
//     offsets every OffsetFlushInterval when they changed, the progress of
//     the delay scanners, the timer wheel, the transaction checker and POP
//     every ProgressFlushInterval when it changed, and everything at
//     Shutdown. A failed write is logged and counted, answered with
//     SYSTEM_ERROR to the admin request that caused it, and returned by
//     Shutdown; it never stops serving.
//
// # Topics and groups
//
// Creating, changing or deleting a topic or a subscription group costs the
// same whatever the number of topics and groups: the table change is a map
// update under the manager's mu, and nothing per change copies or encodes
// the table.
//
//   - Registration: a changed topic is published alone (registerTopic): to
//     the embedded registry at once (Registry.RegisterTopic /
//     UnregisterTopic, under registerMu, reading the topic's latest entry),
//     and to the external name servers by the Registrar's next round
//     (REGISTER_TOPIC_IN_NAMESRV per topic, rounds coalesced; a deleted
//     topic makes it a full registration). The whole table is registered
//     only at start and every RegisterInterval.
//   - Files: topics.json and subscriptionGroup.json are written by a
//     background stateWriter each, many changes per write: a change is on
//     disk within max(200 ms, 10 × the last write's duration) plus two
//     writes, and Shutdown writes whatever is left. A crash in that window
//     loses the configuration of the topics and groups created in it (an
//     auto-created topic is created again by the producer's next send, a
//     group by its next heartbeat; their messages and consume queues are in
//     the store); admin requests (UPDATE_AND_CREATE_TOPIC, DELETE_TOPIC,
//     subscription-group updates and deletions) are answered only after a
//     write that covers them.
//   - The delay levels and the timer wheel are packages of their own
//     (broker/delay, broker/timerwheel; their doc.go states what they own):
//     they hold no *Broker, and reach the store, the inner put and their
//     state files through innerHost (host_inner.go). The broker keeps the
//     routing of DELAY and timer properties on the send path, their
//     request code (GET_ALL_DELAY_OFFSET, host_delay.go) and the wiring
//     of the store's TagCode and OnArrival hooks to them.
//   - The transaction manager (broker/txn; its package doc states its
//     invariants) keeps its pending and resolved tables under its own mu:
//     END_TRANSACTION claims a half message there before storing anything,
//     so a commit and a check-path commit of the same half message store
//     one message.
//   - Records the scanners, the wheel and the checker re-store are read
//     with store.ReadMessage and stay pinned until the put that copies them
//     returns (pinnedRecords, a reput.Records, through the feature
//     packages' hosts; broker/txn keeps its own).
//
// # Goroutines
//
// Besides the connections' and the store's, a Broker runs: the pull
// holder's loop (broker/longpoll: re-runs and answers woken and expired
// pulls; Shutdown stops it before the server), the sync
// acker's loop (waits for flushes in sync-flush mode), maintain (offset and
// progress persistence, the client scanner, lock expiry, the embedded
// registry's full re-registration every RegisterInterval), the writers of
// topics.json and subscriptionGroup.json, and one goroutine per held pop;
// its feature packages run the POP manager's persister, one delay scanner
// per delay level (each sleeps until its next message is due or, when its
// queue is empty, until the store reports an arrival), the timer wheel's
// loop and the transaction checker, on their own stop channels and wait
// groups. All of them stop (Shutdown calls the packages' Stop after its own
// goroutines ended) before Shutdown persists and closes the store.
// The store's dispatcher reports arrivals in the system topics to the
// scanner, wheel or checker concerned (a non-blocking channel send), never
// to the pull holder. The embedded registry runs its scanner, the Registrar
// (with external name servers) its own.
//
// # Lock order
//
// Each manager's persistMu is taken before its mu. The POP manager's mutex
// (broker/pop) is taken before the offset table's, the topic table's (to
// create %DLQ%<group>) and the store's: popHost is called with it held and
// calls nothing back. registerMu is taken
// before the topic table's mu (to snapshot it or read one entry) and the
// registry's lock; the Registrar is told of a change after registerMu is
// released. A stateWriter's mu is a leaf. The
// client manager's, lock table's, pull holder's, sync acker's, filter
// cache's, transaction checker's, and (in their packages) the delay
// scheduler's and timer wheel's mutexes are leaves: nothing else is locked,
// and nothing calls into the store or remoting, while one is held (notifications are sent after the client
// manager's lock is released; held pulls are re-run outside the holder's
// lock; the client manager logs a group's subscription inconsistency under
// its lock, which calls nothing of the broker). The store's dispatcher
// calls OnArrival, which takes only the pull holder's mutex, and TagCode,
// which takes none.
//
// # Compatibility decisions
//
//   - QUERY_CONSUMER_OFFSET without a committed offset follows the Java
//     broker's quirk: offset 0 when the queue's min offset is 0 and its first
//     message is still "in memory" (within 40% of RAM of the commit log's
//     end) or the queue is empty; QUERY_NOT_FOUND (22) otherwise. A new group
//     therefore reads a young queue from its start whatever its
//     consume-from-where, as with a Java broker.
//   - A pull at a negative offset is answered PULL_OFFSET_MOVED (21) with the
//     min offset, as the Java store's OFFSET_TOO_SMALL does, so a client
//     corrects itself instead of retrying an error.
//   - A heartbeat is a client's complete declaration: a group its connection
//     no longer lists is left.
//   - Retry and DLQ follow RocketMQ 5: send-back with reconsumeTimes >=
//     maxReconsumeTimes or a negative level, and a send to %RETRY% with
//     reconsumeTimes > maxReconsumeTimes or from a group holding orderly
//     locks, go to %DLQ%<group>. Apogee also sends the failures of a group
//     configured consumeMessageOrderly there, and applies a group's 5.x
//     groupRetryPolicy to send-backs without a level (any interval, through
//     the timer wheel).
//   - Transactions are checked first TransactionTimeout after the half
//     message was stored, then every TransactionCheckInterval (RocketMQ
//     checks on a fixed 30 s tick), and a check that finds no live producer
//     connection is not counted: it is sent as soon as a producer of the
//     group sends its heartbeat. Ending a transaction twice stores nothing
//     the second time.
//   - SQL92 filtering is on by default (RocketMQ's enablePropertyFilter is
//     false); DisablePropertyFilter restores RocketMQ's refusal. Retry
//     topics are read unfiltered (filterSupportRetry=false).
//   - A FIFO topic accepts NORMAL messages: the Go client marks nothing on a
//     message sent through a queue selector.
//   - A reset to a timestamp (222) commits the new offsets on the broker
//     and succeeds even when no consumer is online (they read them when
//     they start); RocketMQ answers CONSUMER_NOT_ONLINE then.
//   - docs/features.md states each feature's guarantees and limits.
package broker
