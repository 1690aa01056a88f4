// Package ctrlmode runs a broker in controller mode (RocketMQ 5's
// enableControllerMode; docs/failover.md): a Node registers with the
// controller group (package controller/client), sends its heartbeats, and
// runs a broker.Broker in the role the controller's state names, reopening
// it on the same listeners and data directory when that role changes.
//
// # Roles
//
//   - Master of epoch E: the store is opened as a master's; an entry (E, log
//     end) is appended to the epoch file (DATA/epochFileCheckpoint) before
//     the broker serves; routes name it broker id 0 with stateVersion E;
//     topics its log holds but its table lacks are created. Its SyncStateSet
//     is applied to the store (only members' acknowledgements count) and to
//     the write gate (minInSyncReplicas, inSyncReplicas).
//   - Slave of master M: the store is opened as a replica; the HA stream to
//     M starts with the epoch handshake (handshake.go), which cuts the
//     replica back to the last offset both logs share and adopts M's epoch
//     entries.
//   - A master that learns of a later epoch electing another broker (a
//     heartbeat answer, a push, a registration, or a slave's handshake that
//     follows a later epoch) closes its write gate at once, before it
//     reopens as a slave.
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
//     SyncStateSet and opens and closes broker instances; handshakes and
//     heartbeats only read the current instance (under mu) and its atomic
//     epoch.
package ctrlmode
