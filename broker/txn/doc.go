// Package txn is the broker's transactional messages (RocketMQ's
// two-phase transactions): half messages, END_TRANSACTION's operation, and
// the checker that asks producers about the transactions nobody ended.
//
// It holds no broker. It reads and stores through a Host, which the
// messaging core implements (broker/core/host_txn.go) over its store, topic
// table, delay and timer routing, client registry and state files; it knows
// no wire format: a front end decodes END_TRANSACTION and calls the core's
// EndTransaction, which calls End, and the check that Host.SendCheck is
// handed goes to a producer's connection through the front end's
// core.ClientConn (the remoting one encodes CHECK_TRANSACTION_STATE).
//
// # The queues
//
//   - A producer's transactional message becomes a half message (HalfProps,
//     on the send path): stored in HalfTopic queue 0 with REAL_TOPIC,
//     REAL_QID, PGROUP and __transactionId__, its transaction sysflag bits
//     cleared so the store dispatches it there. Its queue offset is the
//     protocol's transaction state table offset.
//   - End validates the half message, then stores in one append the
//     committed message (real topic and queue, COMMIT sysflag, a delay or
//     timer applied by Host.RouteDelay) and an op record, or for a rollback
//     the op record alone. An op record sits in OpHalfTopic queue 0 with tag
//     "d"; its body is the half queue offsets it resolves, decimal and
//     comma-separated.
//   - The checker loads half messages and op records as the store dispatches
//     them (Arrived wakes it). A half message without an op record is
//     checked back Config.Timeout after it was stored (its
//     CHECK_IMMUNITY_TIME_IN_SECONDS overrides the timeout), then every
//     Config.CheckInterval. A check sent to no one (ErrNoProducer) is not
//     counted and is sent again as soon as ProducerJoined names its group.
//     After Config.CheckMax counted checks the half message is copied to
//     CheckMaxTopic and resolved with an op record, in one append.
//
// # Invariants
//
//   - A half message is resolved once: End and the checker's give-up claim
//     it in the resolved table (under mu) before storing anything, so two
//     ENDs of one transaction (the producer's and its check path's), or an
//     END racing the give-up, store one outcome; the loser stores nothing.
//     A claim whose put failed is undone, and the half message is pending
//     again.
//   - halfLoaded and opLoaded only grow while running (retention may move
//     them up to a queue's minimum); every half message below halfLoaded is
//     pending, resolved, or was unreadable (logged and dropped).
//   - The checkpoint (CheckpointFileName, written through Host.WriteState):
//     every half message below HalfOffset is resolved by an op record that
//     the checker has read back from the op queue (a claimed half message
//     whose op record was not read back keeps the floor below it); every op
//     record naming a half message at or above HalfOffset sits at or above
//     OpOffset; Checks holds the counted checks of pending half messages.
//     Start reads both queues from there before anything is served, so an
//     END_TRANSACTION right after a restart finds earlier ends resolved.
//   - Records End and the give-up re-store are read with Host.ReadMessage
//     and stay pinned until the put that copies them returns.
//
// # Lock order and goroutines
//
// persistMu (Persist) is taken before mu and is held while the checkpoint is
// written. mu is a leaf: no Host method is called while it is held. The
// checker is one goroutine, from Start until Stop (which waits for it); its
// scratch and the give-up are its own. End runs on its callers' goroutines
// (the broker's connections), HalfProps on the send path (it reads the
// send's properties as parsed once, message.SendProps, and does not
// allocate); both only take mu briefly.
//
// # What a crash costs
//
// The half messages and op records are in the store; the checkpoint only
// saves reading them from the start. A crash loses what the checkpoint had
// not recorded: the counted checks since the last Persist (a half message
// may be checked a few more times than CheckMax in all) and nothing else,
// as the queues are read again from the checkpoint. A transaction whose
// committed message was kept but whose op record was lost (a torn append,
// or an asynchronously flushed log on a machine crash) is checked back
// again, and the producer's answer may deliver the message a second time:
// transactional messages are delivered at least once. The give-up waits
// for its append to be durable; a failed wait leaves the half message
// pending (it is given up again a second later).
package txn
