package core

import "github.com/apogeemq/apogee/store"

// Lite consumer offsets on replicas. Lite offsets are the store's (its
// lite-topic index, store.CommitLiteOffset), not the consumer-offset
// table's, so GET_ALL_CONSUMER_OFFSET does not carry them; a slave follows
// them with LiteConsumerOffsets (the master's side, served as the
// Apogee-only APOGEE_GET_LITE_CONSUMER_OFFSETS) and SyncLiteConsumerOffsets
// (the slave's), every SlaveSyncInterval with the other tables:
//
//   - Each offset change on the master takes the next change number of
//     its index's run (the run named by an epoch): a slave asks for what
//     changed after the last number it applied, a page of at most
//     LiteOffsetPageMax offsets at a time, so a million lite topics × groups
//     never make one frame, and a sync with nothing new is one short
//     answer. A slave that does not know the master's epoch (its first
//     sync, a restarted or another master) starts again from 0.
//   - The master's offset replaces the slave's, as for regular offsets.
//     No client commits a lite offset on a slave (its gRPC front end
//     forwards lite receives and acks to the master), so there are no
//     pending offsets to keep or forward.
//   - The slave's index journals what it applied as its own commits: a
//     promoted slave (SetRole, or a restart as master) serves them.
//   - A lite topic the master deletes (expiry, DeleteLite) is not mirrored
//     (its offsets vanish without a change number); the slave keeps them
//     until its own index deletes the lite topic.

// LiteOffsetPageMax bounds one page of lite consumer offsets (about 100
// bytes each in JSON: under 1 MB a frame).
const LiteOffsetPageMax = 8192

// LiteOffsetPage is a page of the lite consumer offsets changed since a
// follower's last sync: the index run's epoch, the offsets in change
// order, and whether more remain after the last one.
type LiteOffsetPage struct {
	Epoch   int64
	Offsets []store.LiteOffsetRecord
	More    bool
}

// LiteConsumerOffsets returns up to limit (at most LiteOffsetPageMax) lite
// consumer offsets changed after change number since of run epoch; when
// epoch is not this store's run, from the start (since 0).
func (rp Replication) LiteConsumerOffsets(epoch int64, since uint64, limit int) LiteOffsetPage {
	s := rp.c.store
	e := s.LiteOffsetEpoch()
	if epoch != e {
		since = 0
	}
	limit = min(max(limit, 1), LiteOffsetPageMax)
	offs, more := s.LiteOffsetsSince(since, limit, nil)
	return LiteOffsetPage{Epoch: e, Offsets: offs, More: more}
}

// SyncLiteConsumerOffsets applies lite consumer offsets of the master
// (a page of LiteConsumerOffsets) and returns how many changed; it stops
// at the first the store refuses (it closed). On a
// master it does nothing.
func (rp Replication) SyncLiteConsumerOffsets(offs []store.LiteOffsetRecord) (int, error) {
	c := rp.c
	if !c.slave.Load() {
		return 0, nil
	}
	n := 0
	for _, o := range offs {
		if cur, ok := c.store.LiteOffset(o.Group, o.Parent, o.Lite); ok && cur == o.Offset {
			continue
		}
		if err := c.store.CommitLiteOffset(o.Group, o.Parent, o.Lite, o.Offset); err != nil {
			return n, err // the store closed (names were checked on the master)
		}
		n++
	}
	return n, nil
}
