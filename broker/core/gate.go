package core

// Write gate (controller mode, docs/failover.md). A master in controller mode
// closes its gate the moment it learns it is no longer master (fenced: a
// later epoch elected another broker), and while its SyncStateSet is
// smaller than minInSyncReplicas: every send, send-back and ended
// transaction is then refused with the gate's answer, before anything is
// stored, instead of being acknowledged with less safety than configured.
// Reads, offsets and queries are served as usual.

// SetWriteGate closes the gate with a reason (its response code is the
// one clients see; ReasonInSyncReplicasNotEnough and ReasonFenced are the
// controller mode's) and the remark, or opens it with ReasonNone.
func (rp Replication) SetWriteGate(reason Reason, remark string) {
	c := rp.c
	if reason == ReasonNone {
		c.gate.Store(nil)
		return
	}
	c.gate.Store(newError(reason, remark))
}

// WriteGate returns the gate's answer (nil while writes are taken): its
// Reason says why it is closed.
func (rp Replication) WriteGate() *Error { return rp.c.gate.Load() }
