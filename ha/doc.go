// Package ha replicates a broker's commit log from a master to its slaves
// over TCP, with RocketMQ's classic HA protocol (DefaultHAService,
// HAConnection, DefaultHAClient): a Master serves its store's log to every
// slave that connects to its HA address; a Slave keeps a replica's store
// (store.Options.Replica) a copy of it. The store does the rest: it
// validates and appends what arrives (store.AppendReplicated), dispatches it
// to consume queues and the index as it does for Put, flushes it by its own
// flush mode, and turns the slaves' acknowledgements into the durability
// that SYNC_MASTER waits for (store.Options.SyncReplicas, store.AddReplica).
// docs/replication.md describes the model and the guarantees.
//
// # Wire format
//
// Big-endian throughout. The connection is plain TCP or
// TLS (MasterOptions.Secure on the master, for a broker its tlsconf server's
// handshake: TLS, plain, or either by the first byte; SlaveOptions.TLS on
// the slave); the stream inside is the same. Every connection a Slave makes
// starts with the identity handshake (identity.go; docs/replication.md):
//
//	slave → master  hello:     "AHI1", cluster, broker name, broker id (8)
//	master → slave  challenge: status (1), cluster, broker name, nonce (16)
//	slave → master  proof:     access key, signature
//	master → slave  verdict:   status (1)
//
// (strings: a length byte and the bytes). The master refuses a slave that
// names another cluster or broker name than MasterOptions.Cluster and
// BrokerName (an ERROR naming both sides), and, with MasterOptions.Verify,
// one that has neither a verified client certificate (mutual TLS) nor
// credentials Verify accepts: SlaveOptions.Sign's signature of the hello
// and the nonce. A connection whose first bytes are not the hello's magic
// is a slave without the handshake (RocketMQ's, an earlier Apogee's): it
// is served as it is unless Verify is set and no client certificate
// verified. In controller mode the two sides
// then run a handshake their owner supplies (MasterOptions.Handshake,
// SlaveOptions.Handshake: the epoch exchange of docs/failover.md); then the
// stream starts with the first report, as RocketMQ's classic one:
//
//	slave → master  report: offset (8)
//	master → slave  frame:  offset (8), length (4), body (length bytes)
//
// A report is the offset below which the slave holds the whole log. The
// first one, sent at once on connecting, is its log's end and names where
// the stream starts; every later one acknowledges (the slave sends one after
// each read that appended something, once it is durable by the slave's flush
// mode, and at least every 5 s). A frame's body is the master's commit-log
// bytes [offset, offset+length), raw: records, blank-end markers with the
// padding after them, hole markers with the damaged bytes they cover. Frames
// are contiguous (each offset is the previous one's end), a body never
// crosses a segment end and may cut a record anywhere; an empty frame is a
// heartbeat (after 5 s without a frame) and names the stream's position.
//
// # Where the stream starts
//
// The master streams from the slave's first report R, except:
//
//   - R beyond the master's end: the logs diverged (an asynchronously flushed
//     master that crashed lost a tail its slave holds). The master logs an
//     ERROR and closes the connection; the slave keeps its log and retries.
//     Cutting the slave back is the failover issue's.
//   - R below the master's oldest segment (retention removed what the slave
//     needs next): the master logs a WARN and streams from its oldest
//     segment's base. The slave, seeing its first frame start beyond its end
//     at a segment boundary, sets its log aside (store.ResetReplica) and
//     starts over there, with a WARN.
//
// Any other frame whose offset is not the slave's end, and any byte that
// fails validation, ends the connection with an ERROR on the slave; nothing
// after the first bad record is appended.
//
// # Invariants
//
//  1. The master sends only bytes below its written position, never beyond
//     it, in log order, each byte once per connection. It does not wait for
//     its own flush (RocketMQ does not either): an asynchronously flushed
//     master can lose, in a machine crash, bytes its slave holds.
//  2. The slave appends at exactly its log's end, after validating every
//     record (magic, size, structure, body CRC, PHYSICALOFFSET equal to its
//     position, room for a blank-end marker after it); a blank-end marker
//     must close its segment exactly. A record cut by a frame waits in the
//     receive buffer for the rest of its bytes; marker padding is not copied
//     (the replica keeps zeros there).
//  3. A report never exceeds what the slave holds as durably as its flush
//     mode says: without sync flush, what it appended (RocketMQ's rule); with
//     sync flush, what it flushed. The first report is made durable first.
//  4. A connection counts as a replica for sync replication (store.Replica)
//     from its accepted first report until it closes; a refused slave never
//     counts. No slave of another group, and under MasterOptions.Verify no
//     unauthenticated peer, gets a byte of the log or counts.
//  5. An acknowledgement never counts beyond the master's written position:
//     a report beyond it (no slave can hold what was never sent) closes the
//     connection with an ERROR before it reaches the store.
//
// # Goroutines
//
// Master: one per Serve call (accept), and two per connection (with
// MasterOptions.Secure, the writer's goroutine runs it first, so that a
// slow handshake never holds up the accept loop): readLoop
// (the identity handshake, bounded by HandshakeTimeout, and the owner's;
// then reports: the first decides the start, the rest are
// acknowledgements) and
// writeLoop (frames; it waits on store.LogWritten when caught up and, once
// woken, yields while producers are still appending so that one frame
// carries them all). Either one's end closes the connection, which ends the
// other. Slave: one loop (connect, receive, reconnect after RetryInterval,
// doubling while nothing is appended, up to MaxRetryInterval) and, per
// connection, a reporter goroutine for heartbeats and, with sync flush, for
// the reports that wait for the replica's flush.
//
// # Lock order
//
// Master.mu is held only to change the set of listeners and connections
// (and to rename one); the refusal log's lock is a leaf;
// masterConn.repMu (the connection's store.Replica) → the store's replica
// set. Slave.mu guards the address and the current connection and is never
// held across I/O; reporter.mu serialises a connection's reports.
//
// # For the broker
//
// A master (ASYNC_MASTER, or SYNC_MASTER with store.Options.SyncReplicas =
// 1) creates a Master on its store (with its cluster and broker name, and
// under access control a Verify from its ACL), listens on its HA address (haListenPort,
// default the remoting port + 1) and runs Serve; it closes the Master before
// its store. It waits for durability when store.Store.DurableWaits says so,
// and maps store.ErrReplicaNotAvailable (StatusSlaveNotAvailable) to
// SLAVE_NOT_AVAILABLE (11), store.ErrReplicaTimeout (StatusFlushSlaveTimeout)
// to FLUSH_SLAVE_TIMEOUT (12), both with the send result's fields, as for
// FLUSH_DISK_TIMEOUT; its own re-puts treat store.NotDurable errors as stored.
// A slave opens its store with store.Options.Replica, creates a Slave (with
// its names, and a Sign with its inner credentials when it has some), calls
// Start, and SetMasterAddr whenever it learns the master's HA address (the
// name server's answer to its registration carries it, haServerAddr), and
// closes the Slave before its store; Put on
// its store fails with store.ErrReplica, which RocketMQ answers with
// SERVICE_NOT_AVAILABLE (14). Runtime information: Master.Slaves,
// Slave.Status, store.Store.Stats (Replicas, ReplicatedOffset,
// ReplicatedBytes, ReplicaResets).
package ha
