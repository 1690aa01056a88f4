package store

// In-sync replica sets (controller mode, docs/failover.md). A master in
// controller mode counts only the replicas of its SyncStateSet: the
// controller elects a new master only from that set, so a message is
// acknowledged only once the set's members the policy requires hold it.

// SetInSyncReplicas makes need replicas, among members (by the names the
// replicas were added with, AddReplica), required for a message to be
// durable; members nil counts every connected replica, as Options.SyncReplicas
// does. need 0 makes the master's own durability enough. It overrides
// Options.SyncReplicas and SetSyncReplicas from then on. DurableWaits
// follows it: a caller that decided once whether to wait (a broker that
// answers sends at once when DurableWaits was false) opens the store with
// SyncReplicas 1 or more to use this. Waits in progress recheck at once;
// what was durable stays durable (the replicated offset never moves back,
// except when a replica is promoted: see SetReplica). It applies while the
// store is a master; a replica keeps it for when it is promoted.
func (s *Store) SetInSyncReplicas(need int, members []string) {
	rs := &s.repl
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.explicit = true
	rs.confirm.Store(true)
	defer rs.confirmMoved()
	if members == nil {
		rs.members = nil
	} else {
		rs.members = make(map[string]bool, len(members))
		for _, m := range members {
			rs.members[m] = true
		}
	}
	s.setNeedLocked(need)
}

// SetSyncReplicas changes the requirement Options.SyncReplicas set at Open
// (n replicas, among every connected one), as a broker's role changes
// between SYNC_MASTER and ASYNC_MASTER. Once SetInSyncReplicas was called
// the SyncStateSet it set wins and this does nothing. It applies while the
// store is a master, as SetInSyncReplicas.
func (s *Store) SetSyncReplicas(n int) {
	rs := &s.repl
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.explicit {
		return
	}
	s.setNeedLocked(n)
}

// SyncReplicas returns how many replicas a master's message needs now
// (Options.SyncReplicas, SetSyncReplicas or SetInSyncReplicas), and
// whether SetInSyncReplicas set it.
func (s *Store) SyncReplicas() (need int, inSyncSet bool) {
	rs := &s.repl
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return int(rs.need.Load()), rs.explicit
}

// setNeedLocked sets the requirement. Called with repl.mu held.
func (s *Store) setNeedLocked(need int) {
	rs := &s.repl
	rs.need.Store(int64(max(need, 0)))
	if need <= 0 {
		// Everything written is as durable as the master alone makes it.
		if w := s.log.WrittenOffset(); w > rs.replicated.Load() {
			rs.replicated.Store(w)
		}
	}
	rs.updateLocked()
	rs.wakeLocked()
}

// ReplicaAcked returns the offset replica name acknowledged (ok false when
// no replica of that name is connected).
func (s *Store) ReplicaAcked(name string) (int64, bool) {
	rs := &s.repl
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, r := range rs.list {
		if r.name == name {
			return r.acked.Load(), true
		}
	}
	return 0, false
}

// counts reports whether r's acknowledgements count. Called with mu held.
func (rs *replicaSet) counts(r *Replica) bool {
	return rs.members == nil || rs.members[r.name]
}

// countingLocked is the number of connected replicas that count.
func (rs *replicaSet) countingLocked() int {
	if rs.members == nil {
		return len(rs.list)
	}
	n := 0
	for _, r := range rs.list {
		if rs.members[r.name] {
			n++
		}
	}
	return n
}

// dispatchLimit is where dispatch stops: the log's written position, or, on
// a master whose replica requirement a SyncStateSet sets (controller mode:
// SetInSyncReplicas), the confirm offset: what the SyncStateSet's members
// the policy requires acknowledged (ReplicatedOffset), or the log's end
// when the store became master, whichever is higher. As RocketMQ's
// ReputMessageService stops at the commit log's confirm offset, a message
// reaches the consume queues, and so consumers, only once a new master
// elected from the SyncStateSet is sure to hold it: a consumer never reads
// (and commits an offset past) a message a failover may take back. With
// no replica required (need 0) it is the written position.
func (s *Store) dispatchLimit() int64 {
	w := s.log.WrittenOffset()
	rs := &s.repl
	if s.replica.Load() || !rs.confirm.Load() || rs.need.Load() == 0 {
		return w
	}
	return min(w, max(rs.replicated.Load(), rs.confirmFloor.Load()))
}

// ConfirmOffset is the offset dispatch stops at (dispatchLimit): the
// written position unless a SyncStateSet's replicas are required.
func (s *Store) ConfirmOffset() int64 { return s.dispatchLimit() }
