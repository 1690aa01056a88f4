// Package core is the broker's messaging core: every operation a RocketMQ
// broker offers, on plain Go types, with no wire format. A front end (the
// remoting front end in package broker today, RocketMQ 5's gRPC protocol
// next) decodes a request, calls one method of a Core and encodes the
// answer; none of it is repeated per front end.
//
// A Core owns the message store, the topic, subscription-group and
// consumer-offset tables, the client registry, queue locks, offset resets,
// the messaging features (delay levels in broker/delay, the timer wheel in
// broker/timerwheel, transactions in broker/txn, POP in broker/pop) and
// their hosts (host_*.go), the state files under DataDir/config and the
// background tasks. Its lifecycle is New (load the state files, open and
// recover the store, put the system topics in the table), Start (the
// background tasks and the features' goroutines) and Shutdown (stop them,
// persist everything, close the store).
//
// # Audiences
//
// The core's surface is split by who calls it; each view holds only the
// *Core (views.go), so a method lives in one place:
//
//   - Messaging, on *Core: what both front ends call per message. Send
//     (send and send-batch): validation, back-pressure, topic lookup and
//     auto-creation, the routing of retried, half, timer and delay messages
//     (routeSend), the put. A send's properties are read in one pass
//     (checkSend: validation and message.SendProps, kept in the send's
//     pooled scratch); every later step of the send (routing, the
//     transaction's and the timer's helpers, WAIT, the answer's UNIQ_KEY)
//     reads that, never the string again. Pull, PullAgain: the filter (the request's own,
//     or the group's registered subscription), the store's zero-copy views,
//     the next/min/max offsets. Pop, PopAgain, Ack, ChangeInvisible,
//     OnArrival, OnRevive. SendBack (retry and dead letters),
//     ForwardToDeadLetter, EndTransaction, WaitDurable, WhenDurable, Recall.
//     QueryMessage, ViewMessage, ViewMessageByOffsetID; QueryConsumerOffset,
//     UpdateConsumerOffset, CommittedOffset, MaxOffset, MinOffset,
//     SearchOffset, EarliestStoreTime; LockQueues, UnlockQueues. Heartbeat,
//     UnregisterClient, ClientClosed, ConsumerIDs, CheckSubscription (the
//     client registry); request-reply's ReplyTopic (<cluster>_REPLY_TOPIC,
//     in the table from New on), ReplyConn (the connection of the client
//     ID a reply names: one that declared a producer group), ReplyTo and
//     PushedReplyProperties; TopicConfig, RouteTopic, SubscriptionGroup,
//     BrokerPermission, Role, IsSlave. The lifecycle (New, Start,
//     Checkpoint, Shutdown, Closing) and Options, Store, StartTime.
//   - Administration and monitoring, on Admin ((*Core).Admin()): what the
//     admin protocol's handlers, the dashboard and the metrics exporter
//     call. CreateTopic, DeleteTopic, Topics, SystemTopics,
//     UpdateSubscriptionGroup, DeleteSubscriptionGroup,
//     SubscriptionGroupNames; ResetConsumerOffset, CloneGroupOffset,
//     CleanExpired; BrokerConfig, UpdateBrokerConfig, RuntimeInfo,
//     DelayOffsets; ConsumerGroupInfo, ConsumerGroupNames, ConsumerConn,
//     ConsumerMembers, GroupSysFlag, Subscription, TopicsByConsumer,
//     TopicConsumeByWho, AllProducers, ProducerConnections; the reports
//     (ConsumeStats, BrokerConsumeStats, TopicStats, ConsumeTimeSpan,
//     QueryConsumeQueue, StatsData, ConsumerLags, StoreTimeAt) and the
//     statistics (Stats, EngineStats, Uptime).
//   - Replication and controller mode, on Replication
//     ((*Core).Replication()): what a master serves its slaves
//     (TopicTable, SubscriptionGroupTable, AllConsumerOffsets), what a slave
//     follows its master with (SyncTopics, SyncSubscriptionGroups,
//     SyncConsumerOffsets, OffsetForwarded, SyncDelayOffsets), role changes
//     (SetRole, AdoptStoredTopics), the write gate controller mode closes
//     (SetWriteGate, WriteGate) and ConfigLogStats.
//
// The core names no JSON body of the remoting protocol in what it takes
// or returns: the tables a slave follows are TopicTable, GroupTable and
// OffsetTable; a consume queue's view is ConsumeQueueEntries; the reports
// are GroupStats, BrokerGroupStats, TopicQueueStats and StatsWindows; and
// package broker encodes and decodes the bodies. TestNoWireFormat keeps it
// so: the heartbeat (HeartbeatData, which both front ends hand to
// Heartbeat) is the one exception it lists, and the state files' managers
// use the tables' wrappers as the files' codec.
//
// # Refusals
//
// A refusal is one type, *Error: its Reason, the RocketMQ response code it
// is answered with over remoting, the Java broker's remark (for the wire
// and for people: nothing branches on it; internal/errtext's test keeps
// the repository so) and the cause, when there is one, for errors.Is.
// Every reason is a row of one table, errors.json, in the manner of
// nats-server's server/errors.json: its Go constant, its remoting code, the
// status code of RocketMQ 5's gRPC protocol and a description. go generate
// (//go:generate in errors.go) runs internal/errgen, which checks the table
// and writes errors_gen.go (the Reason constants, the table behind
// Reason.Code, String and Description, and the generic reason of a bare
// code) and broker/grpcfe's status_gen.go (each reason's status code);
// errgen's test fails when either file is not what the table generates. To
// add a refusal: add a row, run go generate ./broker/core, return
// newError(ReasonX, remark) or wrapError(ReasonX, remark, cause).
//
// Callers read a refusal with ReasonOf (switch on it), Code and Remark.
// The sentinels (ErrTopicNotExist, ...) are the generic reason of each code
// and match every error of that code with errors.Is; any other *Error
// target (ErrNoTopic) matches by reason. The write gate's answer
// (WriteGate) carries the reason it was closed with (controller mode's
// ReasonInSyncReplicasNotEnough and ReasonFenced).
//
// # Names and message rules
//
// The rules of topic and group names, tags, keys, message groups and
// message types are the core's (names.go), written once: the core applies
// them to what it is asked, and a front end calls CheckTopicName,
// CheckClientTopic, CheckGroupName, CheckClientGroup, CheckTag, CheckKey,
// CheckMessageGroup, InferMessageType, CheckMessageType and
// AcceptedMessageTypes for what its protocol names, each refusal an *Error
// of its reason. Lite topics' names (CheckLiteTopic), the LITE type and
// the lite.* attributes are in lite_names.go.
//
// # Lite topics
//
// RocketMQ 5.5's lite topics (lite.go, lite_expiry.go; docs/lite-topics.md):
// the store indexes a LITE parent's messages by lite topic and reports
// each lite topic that grew (store.Options.OnLiteArrival); the lite
// messaging state (subscriptions, events, FIFO per (group, lite topic)) is
// package broker/lite's registry, in memory, whose host the core is
// (liteHost: the store's lite offsets, the front ends' listeners). A front
// end calls SyncLiteSubscription, PopLite, AckLite, ChangeInvisibleLite,
// DeadLetterLite and DropLiteClient, and registers OnLiteNotify (wake a
// client's parked lite receive) and OnLiteUnsubscribe (tell a client it
// lost a lite topic). Lite offsets are the store's, never in
// consumerOffset.json. All of it is the master's: a slave refuses it as it
// refuses POPs.
//
// # What a front end provides
//
//   - A ClientConn per client connection, given to Heartbeat and the other
//     client operations: the registry's key and the way the core pushes
//     NOTIFY_CONSUMER_IDS_CHANGED, RESET_CONSUMER_CLIENT_OFFSET and
//     CHECK_TRANSACTION_STATE to a client (and closes a silent one).
//   - Long polling: a front end parks its own requests (a pull that found
//     nothing, PullNoNewMessage; a pop with no message) and registers an
//     OnArrival listener; the core reports every growth of a client topic's
//     queue (the features' system topics go to the features), and the
//     front end runs the request again (PullAgain, PopAgain).
//   - Durability: in sync-flush mode Send, SendBack and EndTransaction
//     return a Pending; the front end answers once WhenDurable calls its
//     DurableWaiter (the store's durability goroutine, one sync for every
//     waiting operation, no goroutine per request), or blocks in
//     WaitDurable when it has no way to answer later.
//   - Options.TopicChanged, to register topics with its name servers.
//
// # Invariants
//
//   - Send and Pull allocate nothing per request in steady state: the
//     caller owns SendResult and PullResult and reuses them; properties are
//     built in a pooled scratch; errors are allocated only when returned.
//   - The records of a PullResult are views of the mapped commit log (the
//     stored format is the pull wire format): they pin their segments until
//     PullResult.Release, which the front end calls once they are written.
//     QueryMessage's and ViewMessage's views likewise (ReleaseViews,
//     View.Release).
//   - A request's byte slices are read during the call only; what outlives
//     it is copied or owned by the core's tables (a PullResult keeps the
//     topic table's string and the compiled, immutable filter).
//   - In-flight bytes: a send's body counts against MaxInFlightBytes from
//     its admission until its answer may go (at return, or when its Pending
//     is answered by WaitDurable or WhenDurable): a Pending that waits must
//     be handed to exactly one of them.
//   - Topic entries, subscription-group configurations and subscriptions
//     are immutable once published; a change publishes a new value.
//   - Creating, changing or deleting a topic or a group is O(1) whatever
//     the number of topics: on a master, one append of the change's record
//     to the commit log (configlog.go) and a map update under the table's
//     mu. The record is in the log before the change is in the table, so
//     a message stored under a configuration follows its record: a replica
//     holding the message holds the configuration, and every broker applies
//     the records of its log in log order (a slave as they arrive, every
//     broker at New and at promotion: AdoptStoredTopics). The log wins over
//     the state files and the periodic slave sync. The file is written
//     whole by a background stateWriter, many changes per write, within
//     max(200 ms, 10 × the last write's duration) plus two writes. Admin
//     operations (CreateTopic, DeleteTopic, UpdateSubscriptionGroup,
//     DeleteSubscriptionGroup) return only after a write that covers them.
//     A crash in that window loses nothing: New applies the log's records.
//   - A slave never creates a topic or a group (ReasonSlaveCreate): its tables
//     are its master's, through the log.
//   - State files are written whole through Options.WriteConfigFile (the
//     previous version kept as FILE.bak; durable once the write returned)
//     and read with a fallback to the .bak (statefiles.go), both on
//     Options.FS, which also carries the store's files; offsets every
//     OffsetFlushInterval, the features' progress every
//     ProgressFlushInterval, each when it changed, and everything at
//     Shutdown. A failed write is logged and counted
//     (configPersistErrors), returned by the admin operation that caused it
//     and by Shutdown; it never stops serving.
//
// # Goroutines
//
// The core's own, between Start and Shutdown: maintain (offset and progress
// persistence, the client scanner, which closes the connections of clients
// silent for ClientTimeout, lock expiry) and the writers of topics.json and
// subscriptionGroup.json. The features run theirs (one delay scanner per
// level, the timer wheel's loop, the transaction checker, POP's persister)
// on their own stop channels; Shutdown stops them after its own, before it
// persists and closes the store. The store's dispatcher calls the arrival
// hook: the features' Arrived for their system topics (a non-blocking
// channel send), the application of configuration records for
// rmq_sys_apogee_config (when it gets the configuration lock without
// waiting; its holder applies them otherwise), the front ends' OnArrival
// listeners for the rest.
// Everything else runs on the callers' goroutines.
//
// # Lock order
//
// The configuration lock (cfg.mu, configlog.go: every change of the topic
// and group tables, and the application of records) is taken before the
// tables' persistMu and mu and before the store's put path (a master
// appends its records under it); the store's dispatcher only tries it (a
// put may wait for the dispatcher), and Options.TopicChanged is called
// after it is released. Each table's persistMu is taken before its mu. The
// POP manager's mutex
// (broker/pop) is taken before the offset table's, the topic table's (to
// create %DLQ%<group>) and the store's: popHost is called with it held and
// calls nothing back. A stateWriter's mu is a leaf. The client registry's,
// the lock table's, the filter cache's and (in their packages) the
// transaction manager's, the delay scheduler's and the timer wheel's
// mutexes are leaves: nothing else is locked, and no ClientConn method,
// store call or TopicChanged runs, while one is held (pushes go out after
// the registry's lock is released). The arrival listeners' list is copy on
// write: the dispatcher reads it without a lock.
//
// # Compatibility decisions
//
//   - QueryConsumerOffset without a committed offset follows the Java
//     broker's quirk: offset 0 when the queue's min offset is 0 and its
//     first message is still "in memory" (within 40% of RAM of the commit
//     log's end) or the queue is empty; QUERY_NOT_FOUND (22) otherwise.
//   - A pull at a negative offset is PullOffsetMoved with the min offset,
//     as the Java store's OFFSET_TOO_SMALL.
//   - A heartbeat is a client's complete declaration: a group its
//     connection no longer lists is left.
//   - Retry and DLQ follow RocketMQ 5: send-back with reconsumeTimes >=
//     maxReconsumeTimes or a negative level, and a send to %RETRY% with
//     reconsumeTimes > maxReconsumeTimes or from a group holding orderly
//     locks, go to %DLQ%<group>; so do the failures of a group configured
//     consumeMessageOrderly, and a group's 5.x groupRetryPolicy applies to
//     send-backs without a level (any interval, through the timer wheel).
//   - SQL92 filtering is on by default; DisablePropertyFilter restores
//     RocketMQ's refusal. Retry topics are read unfiltered.
//   - A FIFO topic accepts NORMAL messages: the Go client marks nothing on a
//     message sent through a queue selector.
//   - A reset to a timestamp commits the new offsets and succeeds even when
//     no consumer is online (RocketMQ answers CONSUMER_NOT_ONLINE then).
package core
