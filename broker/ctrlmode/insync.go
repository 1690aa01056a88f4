package ctrlmode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/controller/client"
	"github.com/apogeemq/apogee/controller/wire"
)

// The master's SyncStateSet (RocketMQ's syncStateSet, docs/failover.md).
//
// The controller elects a new master only from the set, so the master
// counts only the set's members' acknowledgements (store.SetInSyncReplicas
// with their replica names) and changes the set in the order that keeps
// every acknowledged message on every member the controller may elect:
//
//   - a slave joins in two steps: once it holds the whole log as it was at
//     the previous review, the store starts counting it (every later
//     acknowledgement needs it) and the log's end E is noted; once it has
//     acknowledged E (so it holds everything acknowledged before it was
//     counted), the controller is asked (a refusal, or a slave that falls
//     away meanwhile, takes it out of the store's count again);
//   - a member leaves after MaxTimeSlaveNotCatchup without catching up (or
//     disconnected): the controller is asked first, and only once it agreed
//     does the store stop waiting for it.
//
// The gate: with fewer members than MinInSyncReplicas, or fewer than the
// acknowledgements InSyncReplicas asks for, writes are refused
// (SYSTEM_ERROR "in-sync replicas not enough", RocketMQ's
// IN_SYNC_REPLICAS_NOT_ENOUGH answer) instead of being acknowledged with
// less safety than configured.

// caughtUp records, per slave id, when it last held the whole log as it
// was at the previous review (a master's; run's goroutine only).
type caughtUp struct {
	prevEnd int64
	at      map[int64]time.Time
	// pending are the slaves the store counts but the controller has not
	// added yet: the log's end when the store began counting each.
	pending map[int64]int64
}

// applySyncStateSet makes the store and the gate follow the set of s (when
// it is the state of inst's epoch).
func (n *Node) applySyncStateSet(inst *instance, s client.State) {
	if s.MasterEpoch != inst.epoch.Load() || s.SyncStateSet == nil || s.SyncStateSetEpoch <= inst.sset && inst.set != nil {
		if inst.set == nil {
			n.setPolicy(inst, []int64{n.id}) // until the controller's set is known: the master alone
		}
		return
	}
	inst.sset = s.SyncStateSetEpoch
	n.setPolicy(inst, s.SyncStateSet)
}

// setPolicy applies set to the store's count and the write gate.
func (n *Node) setPolicy(inst *instance, set []int64) {
	inst.set = slices.Clone(set)
	var members []string
	for _, id := range set {
		if id != n.id {
			members = append(members, replicaName(id))
		}
	}
	inSet := len(members) // the gate counts the controller's set only
	if n.allAck() && n.cu != nil && n.cuInst == inst {
		// A joining slave is waited for before the controller hears of it.
		for id := range n.cu.pending {
			if !slices.Contains(set, id) {
				members = append(members, replicaName(id))
			}
		}
	}
	need := n.opts.InSyncReplicas - 1
	if n.allAck() {
		need = len(members)
	} else if need > inSet {
		need = inSet // the gate below refuses writes meanwhile
	}
	c := inst.b.Core()
	fenced := c.Replication().WriteGate() != nil && c.Replication().WriteGate().Reason != core.ReasonInSyncReplicasNotEnough
	switch {
	case fenced:
	case len(set) < n.opts.MinInSyncReplicas:
		c.Replication().SetWriteGate(core.ReasonInSyncReplicasNotEnough, fmt.Sprintf("in-sync replicas not enough: the SyncStateSet has %d of minInSyncReplicas %d", len(set), n.opts.MinInSyncReplicas))
	case n.opts.InSyncReplicas-1 > inSet:
		c.Replication().SetWriteGate(core.ReasonInSyncReplicasNotEnough, fmt.Sprintf("in-sync replicas not enough: the SyncStateSet has %d of inSyncReplicas %d", len(set), n.opts.InSyncReplicas))
	default:
		if g := c.Replication().WriteGate(); g != nil && g.Reason == core.ReasonInSyncReplicasNotEnough {
			c.Replication().SetWriteGate(0, "")
		}
	}
	if members == nil {
		members = []string{}
	}
	inst.b.Store().SetInSyncReplicas(min(need, len(members)), members)
}

// reviewSyncStateSet grows or shrinks the master's set (run's goroutine).
func (n *Node) reviewSyncStateSet(inst *instance) {
	if inst.b.Core().Replication().WriteGate() != nil && inst.b.Core().Replication().WriteGate().Reason != core.ReasonInSyncReplicasNotEnough {
		return // fenced
	}
	if inst.sset < 0 {
		// The set of this epoch is not known yet (the election's answer
		// reached the controller client; its heartbeats bring the set).
		if s, ok := n.ctl.State(); ok {
			n.applySyncStateSet(inst, s)
		}
		if inst.sset < 0 {
			return
		}
	}
	if n.cu == nil || n.cuInst != inst {
		n.cu, n.cuInst = &caughtUp{prevEnd: inst.b.Store().WrittenOffset(), at: map[int64]time.Time{}, pending: map[int64]int64{}}, inst
		now := time.Now()
		for _, id := range inst.set {
			n.cu.at[id] = now // members start with a full allowance
		}
	}
	cu := n.cu
	st := inst.b.Store()
	now := time.Now()
	end := st.WrittenOffset()
	var joining, counting []int64
	acked := map[int64]int64{}
	for _, r := range st.Replicas() {
		id, ok := parseReplicaName(r.Name)
		if !ok {
			continue
		}
		acked[id] = r.Acked
		if r.Acked >= cu.prevEnd {
			cu.at[id] = now
		}
		if slices.Contains(inst.set, id) {
			continue
		}
		if from, ok := cu.pending[id]; ok {
			if r.Acked >= from {
				joining = append(joining, id)
			}
		} else if r.Acked >= cu.prevEnd {
			counting = append(counting, id)
		}
	}
	cu.prevEnd = end
	for id := range cu.pending {
		if _, ok := acked[id]; !ok || now.Sub(cu.at[id]) >= n.opts.MaxTimeSlaveNotCatchup {
			delete(cu.pending, id) // gone, or fell behind: no longer counted
			n.setPolicy(inst, inst.set)
		}
	}
	if len(counting) > 0 {
		for _, id := range counting {
			cu.pending[id] = end
		}
		n.setPolicy(inst, inst.set)
	}
	var keep []int64
	for _, id := range inst.set {
		if id == n.id || now.Sub(cu.at[id]) < n.opts.MaxTimeSlaveNotCatchup {
			keep = append(keep, id)
		}
	}
	if len(keep) < len(inst.set) {
		loopLogs.Warn(n.log, n.opts.AdvertiseAddr+"|shrink", "ctrlmode: SyncStateSet members have not caught up; removing them", "from", inst.set, "to", keep,
			"maxTimeSlaveNotCatchup", n.opts.MaxTimeSlaveNotCatchup)
		if !n.alterSet(inst, keep) {
			return
		}
		n.setPolicy(inst, keep)
	}
	if len(joining) > 0 {
		grown := append(slices.Clone(inst.set), joining...)
		slices.Sort(grown)
		for _, id := range joining {
			delete(cu.pending, id)
		}
		if !n.alterSet(inst, grown) {
			n.setPolicy(inst, inst.set)
			return
		}
		n.setPolicy(inst, inst.set)
		n.log.Info("ctrlmode: slaves caught up; SyncStateSet grown", "joined", joining, "set", grown)
	}
}

// alterSet asks the controller for set; false when it refused or failed.
func (n *Node) alterSet(inst *instance, set []int64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	out, err := n.ctl.AlterSyncStateSet(ctx, n.id, inst.epoch.Load(), wire.SyncStateSet{Set: set, Epoch: inst.sset})
	if err != nil {
		if client.IsFenced(err) {
			n.log.Warn("ctrlmode: the controller refused a SyncStateSet change as stale; reading the group's state", "err", err)
			n.refresh()
		} else {
			loopLogs.Warn(n.log, n.opts.AdvertiseAddr+"|alter", "ctrlmode: changing the SyncStateSet failed (is the controller reachable?); retried at the next review", "set", set, "err", err)
		}
		return false
	}
	inst.sset = out.Epoch
	inst.set = slices.Clone(out.Set)
	return true
}

func parseReplicaName(name string) (int64, bool) {
	s, ok := strings.CutPrefix(name, "id:")
	if !ok {
		return 0, false
	}
	var id int64
	_, err := fmt.Sscan(s, &id)
	return id, err == nil
}

func splitLines(s string) []string { return strings.Split(strings.ReplaceAll(s, "\r\n", "\n"), "\n") }

func cut(s string, sep byte) (string, string, bool) {
	i := strings.IndexByte(s, sep)
	if i < 0 {
		return "", "", false
	}
	return strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:]), true
}

// allAck reports whether a SEND_OK waits for every SyncStateSet member:
// allAckInSyncStateSet, or minInSyncReplicas above 1 (a group that refuses
// writes with fewer members wants each of them to hold every acknowledged
// message; RocketMQ only gates writes on minInSyncReplicas).
func (n *Node) allAck() bool { return n.opts.AllAckInSyncStateSet || n.opts.MinInSyncReplicas > 1 }
