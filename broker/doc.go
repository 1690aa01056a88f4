// Package broker is Apogee's RocketMQ broker: the request processors that
// serve the official clients (rocketmq-client-go first) on top of the store,
// with long polling, the topic / subscription-group / consumer-offset
// managers, the client registry, queue locks, and registration with the
// embedded (and optional external) name servers. docs/protocol.md lists every
// request code and its status.
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
//     registered at once; the stored properties (the producer's plus
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
//     the pull holder until the store's OnArrival reports a message in its
//     queue or its deadline (suspendTimeoutMillis, capped by LongPollMax)
//     passes; the holder's goroutine then runs it again and answers it.
//   - Heartbeat (34), consumer list (38), offsets (14, 15, 29-32), query and
//     view (12, 33), admin (17, 21, 28, 201, 215) and locks (41, 42) are
//     answered inline. NOTIFY_CONSUMER_IDS_CHANGED (40) is pushed with
//     InvokeOneway to every member of a group whose members or subscriptions
//     changed: on a heartbeat, UNREGISTER_CLIENT, a closed connection
//     (ConnClosed, wired to Server.OnClose) or a client silent for
//     ClientTimeout (the scanner closes its connection).
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
//   - Config files (DataDir/config: topics.json, subscriptionGroup.json,
//     consumerOffset.json) are written whole through Options.WriteConfigFile
//     (temporary file, fsync, rename, directory fsync). Topics and groups are
//     written on every change, offsets every OffsetFlushInterval when they
//     changed, and everything at Shutdown. A failed write is logged and
//     counted, answered with SYSTEM_ERROR to the admin request that caused
//     it, and returned by Shutdown; it never stops serving.
//
// # Goroutines
//
// Besides the connections' and the store's, a Broker runs three: the pull
// holder's loop (re-runs and answers woken and expired pulls), the sync
// acker's loop (waits for flushes in sync-flush mode) and maintain (offset
// persistence, the client scanner, lock expiry, re-registration every
// RegisterInterval). The embedded registry runs its scanner, the Registrar
// (with external name servers) its own.
//
// # Lock order
//
// Each manager's persistMu is taken before its mu. registerMu is taken
// before the topic table's mu (to snapshot it) and the registry's lock. The
// client manager's, lock table's, pull holder's, sync acker's and filter
// cache's mutexes are leaves: nothing else is locked, and nothing calls into
// the store or remoting, while one is held (notifications are sent after
// the client manager's lock is released; held pulls are re-run outside the
// holder's lock). The store's dispatcher calls OnArrival, which takes only
// the pull holder's mutex.
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
//   - Retry topics, delay levels, transactions and timers are not implemented
//     yet: DELAY, TIMER_* and the transaction sysflag are stored as ordinary
//     messages (delivered at once), CONSUMER_SEND_MSG_BACK and END_TRANSACTION
//     answer REQUEST_CODE_NOT_SUPPORTED (the Go client then resends failed
//     messages to %RETRY%<group> itself, which is accepted).
package broker
