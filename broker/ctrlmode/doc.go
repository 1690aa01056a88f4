// Package ctrlmode runs a broker in controller mode (RocketMQ 5's
// enableControllerMode; docs/failover.md): a Node registers with the
// controller group (package controller/client), sends its heartbeats, and
// gives its broker.Broker the role the controller's state names, changing
// it in place (broker.Broker.SetRole) when the controller says so: the
// store, the core, the listeners, every front end on the core and every
// client connection stay. Package node runs it: New (register), the
// broker opened with BrokerOptions (every member opens as a slave), Start.
//
// # Roles
//
//   - Master of epoch E: the HA slave stops; an entry (E, log end) is
//     appended to the epoch file (DATA/epochFileCheckpoint); then the store
//     takes writes (core.Core.SetRole); routes name it broker id 0 with
//     stateVersion E;
//     topics its log holds but its table lacks are created. Its SyncStateSet
//     is applied to the store (only members' acknowledgements count) and to
//     the write gate (minInSyncReplicas, inSyncReplicas).
//   - Slave of master M: the store becomes a replica again; the HA stream to
//     M starts with the epoch handshake (handshake.go), which cuts the
//     replica back to the last offset both logs share and adopts M's epoch
//     entries.
//   - A master that learns of a later epoch electing another broker (a
//     heartbeat answer, a push, a registration, or a slave's handshake that
//     follows a later epoch) closes its write gate at once, before it
//     becomes a slave.
//
// # Invariants
//
//  1. A master's epoch entry is durable before the broker instance of that
//     epoch takes a write; epochs in the file only grow.
//  2. Every member of the controller's SyncStateSet holds every message
//     acknowledged (with allAckInSyncStateSet, or minInSyncReplicas > 1)
//     while it was a member: a slave is counted by the store before the
//     controller is asked to add it, and only once it acknowledged the log's
//     end at the moment it began to be counted; a member is removed from the
//     store's count only after the controller agreed to remove it.
//  3. A replica appends nothing between the handshake's truncation and its
//     first report: the log it reports is a prefix of the master's.
//  4. One goroutine (run) applies the controller's state, reviews the
//     SyncStateSet and changes the broker's role; each role begins a new
//     instance (a term: role, epoch, SyncStateSet); handshakes and
//     heartbeats only read the current instance (under mu) and its atomic
//     epoch. A master's instance is current before its store takes writes
//     (slaves' handshakes then find it master) and after its epoch entry
//     is durable.
package ctrlmode
