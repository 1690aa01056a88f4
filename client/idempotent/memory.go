package idempotent

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"
)

// memShards is the number of independently locked parts of a MemoryStore.
const memShards = 32

// MemoryStore is a Store in this process's memory: keys are shared by the Guards
// of one process only, and forgotten when it exits. It suits tests, a single
// consumer process, and a first line in front of a shared store.
//
// Entries expire by time: a processing entry when its lease ends, a done entry
// when its TTL ends. An expired entry is treated as absent at once and deleted by
// a sweep that runs inside the store's own calls: each of its shards is swept when
// it has doubled (plus 64 entries) since its last sweep, so the store needs no
// goroutine, the sweeps cost O(1) per call amortised, and it holds at most about
// twice the entries that are live.
//
// Every method is atomic per key (one mutex per shard of keys) and never fails.
type MemoryStore struct {
	seed   maphash.Seed
	now    func() time.Time
	shards [memShards]memShard
}

type memShard struct {
	mu   sync.Mutex
	m    map[string]memEntry
	next int // sweep when len(m) reaches it
	_    [40]byte
}

type memEntry struct {
	owner   string
	expires int64 // unix nanoseconds
	state   State // StateProcessing or StateDone
}

// MemoryOption configures a MemoryStore.
type MemoryOption func(*MemoryStore)

// MemoryClock sets the clock leases and TTLs are measured with. Default time.Now.
// Tests use it to expire entries without waiting.
func MemoryClock(now func() time.Time) MemoryOption {
	return func(s *MemoryStore) { s.now = now }
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore(opts ...MemoryOption) *MemoryStore {
	s := &MemoryStore{seed: maphash.MakeSeed(), now: time.Now}
	for _, o := range opts {
		o(s)
	}
	for i := range s.shards {
		s.shards[i].m = make(map[string]memEntry)
		s.shards[i].next = 64
	}
	return s
}

func (s *MemoryStore) shard(key string) *memShard {
	return &s.shards[maphash.String(s.seed, key)%memShards]
}

// lockLive locks key's shard and returns the key's entry if it
// has one that has not expired at now.
func (s *MemoryStore) lockLive(key string, now int64) (*memShard, memEntry, bool) {
	sh := s.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[key]
	if ok && e.expires <= now {
		delete(sh.m, key)
		ok = false
	}
	return sh, e, ok
}

// maybeSweep deletes the shard's expired entries when it has grown enough since
// the last sweep.
func (sh *memShard) maybeSweep(now int64) {
	if len(sh.m) < sh.next {
		return
	}
	for k, e := range sh.m {
		if e.expires <= now {
			delete(sh.m, k)
		}
	}
	sh.next = 2*len(sh.m) + 64
}

// TryBegin implements Store.
func (s *MemoryStore) TryBegin(_ context.Context, key, owner string, lease time.Duration) (State, error) {
	now := s.now().UnixNano()
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.maybeSweep(now)
	found := StateAbsent
	if e, ok := sh.m[key]; ok {
		switch {
		case e.expires > now:
			return e.state, nil
		case e.state == StateProcessing:
			found = StateExpired
		}
	}
	sh.m[key] = memEntry{owner: owner, expires: now + int64(lease), state: StateProcessing}
	return found, nil
}

// Renew implements Store.
func (s *MemoryStore) Renew(_ context.Context, key, owner string, lease time.Duration) error {
	now := s.now().UnixNano()
	sh, e, ok := s.lockLive(key, now)
	defer sh.mu.Unlock()
	if !ok || e.state != StateProcessing || e.owner != owner {
		return fmt.Errorf("idempotent: renew %q: %w", key, ErrNotOwner)
	}
	e.expires = now + int64(lease)
	sh.m[key] = e
	return nil
}

// Done implements Store.
func (s *MemoryStore) Done(_ context.Context, key, owner string, ttl time.Duration) error {
	now := s.now().UnixNano()
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.m[key]; ok && e.expires > now && e.owner != owner {
		return fmt.Errorf("idempotent: done %q: %w", key, ErrNotOwner)
	}
	sh.maybeSweep(now)
	sh.m[key] = memEntry{owner: owner, expires: now + int64(ttl), state: StateDone}
	return nil
}

// Release implements Store.
func (s *MemoryStore) Release(_ context.Context, key, owner string) error {
	now := s.now().UnixNano()
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.m[key]
	switch {
	case !ok:
		return nil
	case e.state == StateProcessing && e.owner == owner, e.expires <= now:
		delete(sh.m, key)
		return nil
	}
	return fmt.Errorf("idempotent: release %q: %w", key, ErrNotOwner)
}

// Len returns the number of entries held, expired ones not yet swept included.
func (s *MemoryStore) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// Lookup returns key's state as TryBegin would find it, without changing it: the
// state (StateAbsent for no live entry), the owner that holds or completed it, and
// when its lease or TTL ends.
func (s *MemoryStore) Lookup(key string) (State, string, time.Time) {
	now := s.now().UnixNano()
	sh, e, ok := s.lockLive(key, now)
	defer sh.mu.Unlock()
	if !ok {
		return StateAbsent, "", time.Time{}
	}
	return e.state, e.owner, time.Unix(0, e.expires)
}
