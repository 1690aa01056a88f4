// Package client is Apogee's own Go client for RocketMQ's remoting protocol: a
// producer (sync, async, oneway, batch and transactional sends), a push consumer
// (clustering or broadcasting, concurrent or orderly) and a pull consumer. It talks
// to Apogee brokers and to Java RocketMQ 4.x/5.x brokers and name servers.
//
// It imports only the module's remoting, protocol and message packages (zlib/zstd
// from github.com/klauspost/compress, the LZ4 reader from github.com/pierrec/lz4/v4);
// never broker or store.
//
// # Configuration
//
// Clients are built from typed functional options, validated once by the constructor
// (NewProducer, NewPushConsumer, NewPullConsumer), which reports every problem at
// once wrapped in ErrConfig. An Opt (NameServer, InstanceName, RequestTimeout,
// HeaderEncoding, ...) fits any client; a ConsumerOpt (ConsumerGroup, Subscribe,
// Allocation, ...) either consumer; ProducerOpt, PushConsumerOpt and PullConsumerOpt
// only their own kind: passing a producer option to a consumer does not compile. Every
// option documents its default; docs/client.md lists them all.
//
// # Instances: one connection per broker
//
// Clients of one process with the same client ID ("ip@instanceName", instance name
// defaulting to the pid) share an instance: one TCP connection per broker and name
// server (remoting.Pool), one route table refreshed every RouteRefreshInterval (30 s),
// one heartbeat to every known broker every HeartbeatInterval (30 s, and at once when a
// client or a broker is added), and one handler for the requests brokers push
// (NOTIFY_CONSUMER_IDS_CHANGED, CHECK_TRANSACTION_STATE,
// PUSH_REPLY_MESSAGE_TO_CLIENT). Instance-level options must
// agree between the clients sharing it (ErrInstanceConflict otherwise); a second
// consumer of one group in one instance is refused (ErrGroupInUse): give it its own
// InstanceName. When the last client of an instance closes, the instance stops and
// closes its connections, so brokers see the client leave at once; every client also
// sends UNREGISTER_CLIENT for its group when it closes.
//
// Requests carry the ROCKETMQ binary header by default (HeaderEncoding selects JSON,
// which is what the official Go client sends).
//
// # Producer
//
// A send chooses a queue with the producer's QueueSelector (RoundRobinSelector by
// default, HashSelector, ManualSelector or your own), encodes the SEND_MESSAGE
// header (SEND_BATCH_MESSAGE with the short-key V2 header for batches) into a pooled
// request, compresses bodies of CompressOver bytes or more (zlib; zstd as an option),
// adds a UNIQ_KEY, and sends it asynchronously on the broker's connection. Failures
// that another queue or broker may not have (transport errors, codes 1, 14, 16, 17,
// 501) are retried elsewhere, SYSTEM_BUSY (2) after an exponential back-off; a broker
// that failed or answered slowly is avoided for a while (FaultTolerance). Those
// failures, and timeouts, may mean the broker's group has a new master: the retry
// first refreshes the topic's route (at most once per RouteRefreshOnFailure gap per
// topic, 500 ms), so it goes where the route names now, and a route naming another
// master for a broker name replaces the old address in every cached route. A send is
// bounded by SendTimeout, retries included, enforced by one sweeper goroutine per
// producer that exists while sends are in flight.
//
// The async path allocates nothing in the client in the steady state: requests,
// their Commands and buffers are pooled, results are values with inline id buffers,
// and callbacks are bound once per pooled request (remoting's InvokeAsync allocates
// its own call record). Callbacks run on a connection's read goroutine and must not
// block. A message must not be modified until its send has completed.
//
// # Request-reply
//
// RocketMQ 4.6's request-reply: Producer.Request sends a message and waits for its
// reply, bounded by the context's deadline (ReplyTimeout, 3 s, without one), failing
// with ErrReplyTimeout; a consumer answers a request it received with Producer.Reply
// (or sends NewReply's message itself). The reply goes to the reply topic of the
// request's cluster ("<cluster>_REPLY_TOPIC") with SEND_REPLY_MESSAGE_V2, and the
// broker pushes it to the requesting client's connection, where the instance hands it
// to the waiting Request by its CORRELATION_ID. The broker pushes only to a client
// it knows as a producer: Request heartbeats the brokers it knows before its first
// request to a topic. Replies work with the official clients on either side. See
// Example_requestReply.
//
// # Push consumer
//
// Rebalancing gives each consumer of a clustering group its share of every subscribed
// topic's queues (AllocateStrategy; averaging by default), every RebalanceInterval
// (20 s) and at once when a broker sends NOTIFY_CONSUMER_IDS_CHANGED. Broadcasting
// consumers take every queue. Each assigned queue has a process queue: its messages
// pulled but not consumed, in offset order, and one puller goroutine that sends
// long-polling PULL_MESSAGE requests (the broker holds them up to LongPollTimeout)
// and pauses, without failing, while the queue holds more than QueueCacheLimits
// (1,000 messages, 100 MiB) or, for concurrent consumption, spans more than MaxSpan
// (2,000) offsets. Pull bodies are walked with message.ForEachRecord; each message's
// Body aliases its response, which gets an array of its own for that (one copy per
// pull, none per message), compressed bodies are inflated (zlib, zstd or LZ4, as the sysflag's compression type says), and tags
// are checked again by exact string.
//
// A concurrent listener runs on at most ConsumeGoroutines (20) goroutines that exist
// only while there are batches; a failed message is sent back for redelivery
// (CONSUMER_SEND_MSG_BACK), or, when the broker refuses, sent to %RETRY%group by the
// client itself. An orderly listener runs one goroutine per queue, only while the
// consumer holds the queue's broker lock (LOCK_BATCH_MQ, renewed every LockInterval),
// retries a failed batch locally after SuspendTime up to MaxReconsumeTimes, then
// sends it to the dead-letter queue.
//
// Offsets: the commit offset of a queue is its lowest message not yet consumed (never
// past one still being consumed). Clustering offsets are written to the broker every
// CommitInterval (5 s), synchronously for a queue a rebalance takes away, and at
// shutdown, to the queue's master, or while the route names none (the master is
// down) to its slave, which keeps them for the master's return; offsets, queue
// offsets and the group's members are read there too, so queues assigned while a
// master is down are consumed from its slave. Broadcasting offsets go to a local
// file per client and group, written by temporary file, fsync and rename.
// ConsumerStats.RebalanceDuplicates estimates the redeliveries that moving queues
// can cause.
//
// # Pull consumer
//
// A PullConsumer uses the same pullers and process queues, but the application
// drives consumption: Poll returns what was fetched, Commit (or AutoCommit) moves the
// offsets, Seek and SeekToTimestamp reposition a queue. Queues come from rebalancing
// (Subscribe) or from Assign.
//
// # Goroutines and locks
//
// Per instance: one loop (routes, heartbeats) and two per connection (remoting's).
// Per producer: a timeout sweeper while sends are in flight, a goroutine per retry
// (and per route refresh after a timeout or a failed oneway send), at
// most 16 transaction-check goroutines. Per consumer: one loop (rebalance, commits,
// lock renewal), one puller per assigned queue, the consume pool (push) or one
// goroutine per orderly queue while it has messages. Lock order: consumer.rebalanceMu,
// then consumer.mu, then a processQueue's mu; instance.mu is taken alone (never while
// holding a consumer or process-queue lock it could wait on), as is registry; under
// instance.mu the route table's and the producers' fault tables' own locks may be
// taken (a moved master), never the other way round. The refresh gate's lock is a
// leaf.
//
// # Ownership
//
// A Producer, PushConsumer and PullConsumer are safe for concurrent use. Messages
// handed to listeners and returned by Poll (MessageExt) are the caller's. A
// SendResult is a value. Nothing returned aliases a connection's buffers.
package client
