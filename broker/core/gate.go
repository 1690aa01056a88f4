package core

// Write gate (controller mode, docs/failover.md). A master in controller mode
// closes its gate the moment it learns it is no longer master (fenced: a
// later epoch elected another broker), and while its SyncStateSet is
// smaller than minInSyncReplicas: every send, send-back and ended
// transaction is then refused with the gate's answer, before anything is
// stored, instead of being acknowledged with less safety than configured.
// Reads, offsets and queries are served as usual.

// SetWriteGate closes the gate with the answer code and remark (the
// response code clients see), or opens it with code 0.
func (c *Core) SetWriteGate(code int32, remark string) {
	if code == 0 {
		c.gate.Store(nil)
		return
	}
	c.gate.Store(newError(code, remark))
}

// WriteGate returns the gate's answer (nil while writes are taken).
func (c *Core) WriteGate() *Error { return c.gate.Load() }
