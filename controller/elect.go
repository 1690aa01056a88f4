package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/protocol"
)

// choice is the election policy's decision.
type choice struct {
	master int64 // 0: nobody
	// unclean is set when the master comes from outside the SyncStateSet;
	// loss is then how many bytes of log the best in-sync replica last
	// reported beyond the new master's end.
	unclean bool
	loss    int64
}

// choose is RocketMQ's DefaultElectPolicy on this node's liveness: among
// the alive members of the SyncStateSet (and, with ElectUncleanMaster, of
// every replica when none of those is alive), keep the old master if it is
// alive and no other broker was designated, take the designated broker if
// it is a candidate, and otherwise the candidate with the highest (epoch,
// max offset) from its last heartbeat, then the lowest election priority,
// then the lowest id. A group that never had a master takes the broker that
// asks (requester), as RocketMQ's first election does.
func (n *Node) choose(g *Group, requester int64, designate bool, now time.Time) choice {
	if g.MasterEpoch == 0 && requester > 0 && !designate && g.replica(requester) != nil {
		return choice{master: requester}
	}
	pick := func(ids []int64) int64 {
		var alive []int64
		for _, id := range ids {
			if n.live.alive(g.Broker, id, now) {
				alive = append(alive, id)
			}
		}
		if len(alive) == 0 {
			return 0
		}
		if g.MasterID != 0 && slices.Contains(alive, g.MasterID) && (!designate || requester == g.MasterID) {
			return g.MasterID
		}
		if designate {
			if slices.Contains(alive, requester) {
				return requester
			}
			return 0
		}
		slices.SortFunc(alive, func(a, b int64) int { return n.compareCandidates(g.Broker, a, b) })
		return alive[0]
	}
	if m := pick(g.SyncStateSet); m != 0 {
		return choice{master: m}
	}
	if !n.electUnclean() {
		return choice{}
	}
	all := make([]int64, len(g.Replicas))
	for i, r := range g.Replicas {
		all[i] = r.ID
	}
	m := pick(all)
	if m == 0 {
		return choice{}
	}
	c := choice{master: m, unclean: !g.InSync(m)}
	if c.unclean {
		mine, _ := n.live.info(g.Broker, m)
		for _, id := range g.SyncStateSet {
			if e, ok := n.live.info(g.Broker, id); ok && e.maxOffset-mine.maxOffset > c.loss {
				c.loss = e.maxOffset - mine.maxOffset
			}
		}
	}
	return c
}

// compareCandidates orders a before b when a is the better master.
func (n *Node) compareCandidates(broker string, a, b int64) int {
	x, _ := n.live.info(broker, a)
	y, _ := n.live.info(broker, b)
	switch {
	case x.epoch != y.epoch:
		return cmpInt(int64(y.epoch), int64(x.epoch))
	case x.maxOffset != y.maxOffset:
		return cmpInt(y.maxOffset, x.maxOffset)
	case prio(x.priority) != prio(y.priority):
		return cmpInt(prio(x.priority), prio(y.priority))
	}
	return cmpInt(a, b)
}

func prio(p int32) int64 {
	if p == 0 {
		return 1 << 31
	}
	return int64(p)
}

// electOutcome is an election's answer: the code and remark of
// CONTROLLER_ELECT_MASTER, the group afterwards, and whether the unclean
// rule chose.
type electOutcome struct {
	code   int32
	remark string
	group  *Group
	choice choice
}

// elect decides and commits an election for broker (requester 0: the
// controller's own trigger), and pushes the outcome to the group's brokers
// when a master was elected. Leader only.
func (n *Node) elect(broker string, requester int64, designate bool) (electOutcome, error) {
	n.electMu.Lock()
	defer n.electMu.Unlock()
	g := n.fsm.group(broker)
	if g == nil {
		return electOutcome{code: wire.RespBrokerNeedToRegister, remark: fmt.Sprintf("broker %s is not registered", broker)}, nil
	}
	if designate && g.replica(requester) == nil {
		return electOutcome{code: wire.RespElectMasterFailed, group: g, remark: fmt.Sprintf("broker %s has no replica %d", broker, requester)}, nil
	}
	now := time.Now()
	c := n.choose(g, requester, designate, now)
	if c.master != 0 && c.master == g.MasterID {
		return electOutcome{code: wire.RespMasterStillExist, group: g,
			remark: fmt.Sprintf("the master %d of %s is alive: no election", g.MasterID, broker)}, nil
	}
	if c.master == 0 {
		if requester == 0 && g.MasterID != 0 {
			// The master died and nobody may replace it: record that the
			// group has none (a new epoch fences the old master).
			res, err := n.propose(&command{Op: opElect, Broker: broker, MasterEpoch: g.MasterEpoch, SetEpoch: g.SyncStateSetEpoch}, false)
			if err != nil {
				return electOutcome{}, err
			}
			if res.Code == 0 {
				n.log.Warn("controller: master dead and no in-sync replica alive: the group has no master",
					"broker", broker, "oldMaster", g.MasterID, "syncStateSet", g.SyncStateSet, "masterEpoch", res.Group.MasterEpoch)
				return electOutcome{code: wire.RespMasterNotAvailable, group: res.Group,
					remark: fmt.Sprintf("the master of %s is down and no in-sync replica is alive to replace it", broker)}, nil
			}
			return electOutcome{code: res.Code, remark: res.Remark, group: res.Group}, nil
		}
		return electOutcome{code: wire.RespElectMasterFailed, group: g,
			remark: fmt.Sprintf("no alive replica of %s may become master (SyncStateSet %v)", broker, g.SyncStateSet)}, nil
	}
	res, err := n.propose(&command{Op: opElect, Broker: broker, NewMaster: c.master,
		MasterEpoch: g.MasterEpoch, SetEpoch: g.SyncStateSetEpoch}, false)
	if err != nil {
		return electOutcome{}, err
	}
	if res.Code != 0 {
		return electOutcome{code: res.Code, remark: res.Remark, group: res.Group}, nil
	}
	attrs := []any{"broker", broker, "master", c.master, "address", res.Group.Addr(c.master),
		"oldMaster", g.MasterID, "masterEpoch", res.Group.MasterEpoch}
	if c.unclean {
		attrs = append(attrs, "lossBytesAtMost", c.loss)
		n.log.Warn("controller: UNCLEAN election: the new master was not in the SyncStateSet; acknowledged messages may be lost", attrs...)
	} else {
		n.log.Info("controller: master elected", attrs...)
	}
	n.notify(res.Group)
	return electOutcome{code: protocol.RespSuccess, group: res.Group, choice: c}, nil
}

// scan is the leader's liveness scan: a group whose master is dead (or that
// has none) while some replica is alive gets an election.
func (n *Node) scan() {
	now := time.Now()
	for _, g := range n.fsm.groups() {
		if g.MasterID != 0 && n.maybeAlive(g.Broker, g.MasterID, now) {
			continue
		}
		someone := false
		for _, r := range g.Replicas {
			if n.live.alive(g.Broker, r.ID, now) {
				someone = true
				break
			}
		}
		if !someone {
			continue
		}
		if g.MasterID == 0 {
			// Nothing to do unless a replica may become master.
			if c := n.choose(g, 0, false, now); c.master == 0 {
				continue
			}
		} else if e, ok := n.live.info(g.Broker, g.MasterID); ok && e.closedLive {
			n.log.Warn("controller: master's connection closed and it was not heard from again; electing", "broker", g.Broker,
				"master", g.MasterID, "masterEpoch", g.MasterEpoch, "lastHeartbeat", e.seen.Format(time.RFC3339Nano))
		} else {
			n.log.Warn("controller: master's heartbeats stopped; electing", "broker", g.Broker, "master", g.MasterID,
				"masterEpoch", g.MasterEpoch)
		}
		if _, err := n.elect(g.Broker, 0, false); err != nil {
			n.log.Warn("controller: election failed; the next scan retries", "broker", g.Broker, "err", err)
		}
	}
}

// notify pushes NOTIFY_BROKER_ROLE_CHANGED to every replica of g that may
// be alive (RocketMQ's ControllerManager.notifyBrokerRoleChanged), oneway,
// each on its own goroutine. A broker that misses it learns from its next
// heartbeat's answer.
func (n *Node) notify(g *Group) {
	if !n.notifyEnabled() {
		return
	}
	now := time.Now()
	rc := wire.RoleChange{MasterInfo: g.MasterInfo(), SyncStateSet: g.SyncStateSet}
	for _, r := range g.Replicas {
		if r.Addr == "" || !n.maybeAlive(g.Broker, r.ID, now) {
			continue
		}
		addr := r.Addr
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			cl, err := n.pool.Get(ctx, addr)
			if err == nil {
				var cmd protocol.Command
				rc.Encode(&cmd)
				err = cl.InvokeOneway(&cmd)
			}
			if err != nil {
				n.log.Info("controller: role-change notification not delivered (the broker learns from its next heartbeat)",
					"broker", g.Broker, "address", addr, "err", err)
			}
		}()
	}
}
