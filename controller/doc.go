// Package controller is Apogee's controller for automatic failover
// (RocketMQ 5's controller mode): a Raft group of three or five Nodes
// (hashicorp/raft; the log and Raft's metadata in bbolt through
// raft-boltdb, snapshots in files) whose replicated state is, per broker
// group, its replicas, its master, the master epoch, the SyncStateSet and
// its epoch. It serves RocketMQ's controller requests over package remoting
// (codes and formats in controller/wire); brokers use controller/client.
// docs/failover.md describes the state machine, the flags and the failover
// budget.
//
// # Invariants
//
//  1. The replicated state changes only by applying Raft log entries, in
//     log order, on every node (fsm.Apply); every check an entry makes is
//     made at apply time on the state alone, so all nodes reach the same
//     result, and a refused entry changes nothing. What depends on the
//     clock or on liveness (who is alive, which candidate is best) is
//     decided by the leader before it proposes, and an election's entry
//     carries the epochs it was decided at: it applies only if they are
//     still current (compare and set), so two elections decided on the same
//     state cannot both take effect.
//  2. Epochs only grow: the master epoch by one at every election (also one
//     that finds nobody), the SyncStateSet epoch by one at every change of
//     the set. A SyncStateSet change applies only for the current master at
//     both current epochs.
//  3. Only a leader that has applied an entry of its own term (its first,
//     which also announces its remoting address) serves requests, and every
//     read confirms its leadership with a Raft round first: answers reflect
//     every acknowledged write.
//  4. Liveness is local to each node and never replicated: each node records
//     the heartbeats it receives and the closes of their connections; the
//     leader decides with its own record. A new leader declares a master
//     dead at once only on its own evidence (a timeout that ran out while it
//     led, or a close of the connection the master's heartbeats came on,
//     not followed by a heartbeat); otherwise it waits a heartbeat timeout.
//  5. With Options.Authorize, no request reaches a handler (not even a
//     heartbeat or a metadata read) unless it allows it: a refused request
//     is answered with its code and changes nothing. With
//     Options.RaftAuth, no byte of an accepted Raft connection reaches Raft
//     before its peer answered this connection's nonce with a signature
//     Authorize allows (raftauth.go); a connection that fails is closed.
//  6. The run-time configuration (UPDATE_CONTROLLER_CONFIG: unclean
//     elections, role-change pushes; config.go) is local to each node, as
//     RocketMQ's, never replicated nor persisted: a restart takes Options'
//     again.
//
// # Concurrency
//
// Handlers that need the leader run on a goroutine per request (they wait
// for Raft). Elections are serialised by Node.electMu (the liveness scan and
// requests). fsm.mu guards the state (Apply writes, handlers copy groups
// out under the read lock); liveness.mu guards the heartbeat records. Lock
// order: electMu → (Raft apply, which takes fsm.mu on the FSM goroutine);
// fsm.mu and liveness.mu are leaves.
package controller
