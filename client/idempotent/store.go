package idempotent

import (
	"context"
	"errors"
	"strconv"
	"time"
)

// State is what a Store found for a key when TryBegin was called.
type State uint8

const (
	// StateAbsent: the key had no record (never seen, released after a failure, or
	// its done record outlived its TTL). TryBegin moved it to processing for the
	// caller, who now holds it.
	StateAbsent State = iota
	// StateExpired: the key was processing under a lease that has expired (its
	// holder died or stopped renewing). TryBegin took it over: the caller now holds
	// it. A store that cannot tell an expired lease from an absent key (Redis, where
	// the entry vanishes with its lease) reports StateAbsent instead.
	StateExpired
	// StateProcessing: another owner holds the key under a lease that has not
	// expired. The caller does not hold it: try again later.
	StateProcessing
	// StateDone: the key was consumed and its done record has not expired. The
	// caller does not hold it: the delivery is a duplicate.
	StateDone
)

// Acquired reports whether TryBegin gave the caller the key (StateAbsent or
// StateExpired).
func (s State) Acquired() bool { return s == StateAbsent || s == StateExpired }

func (s State) String() string {
	switch s {
	case StateAbsent:
		return "absent"
	case StateExpired:
		return "expired"
	case StateProcessing:
		return "processing"
	case StateDone:
		return "done"
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// Store keeps the state of every key: absent → processing (held by one owner
// under a lease) → done (for a TTL) → absent. It is shared by every consumer that
// must not consume a key twice, typically the processes of one consumer group, and
// holds the keys of that group only: give each group its own Store (its own
// broker topic, Redis key prefix, or MemoryStore).
//
// Owners are opaque strings that identify a holder (a Guard uses one per
// process and instance). Every method is safe for concurrent use, and each one is
// atomic with respect to the others on the same key, within the limits each
// implementation documents (BrokerStore is eventually consistent; read its
// documentation).
type Store interface {
	// TryBegin atomically moves key from absent, or from processing under an
	// expired lease, or from done past its TTL, to processing held by owner for
	// lease, and reports the state it found (StateAbsent or StateExpired: the caller
	// holds the key now). A key processing under an unexpired lease, even one held
	// by owner itself, reports StateProcessing; a done key StateDone; neither
	// changes anything.
	TryBegin(ctx context.Context, key, owner string, lease time.Duration) (State, error)
	// Renew extends owner's lease on key to lease from now. It returns an error
	// wrapping ErrNotOwner when owner does not hold the key under a live lease: the
	// lease expired (a store may forget an expired lease at once, so a late
	// renewal fails even if nobody took the key over), or the key was released,
	// completed, or taken over.
	Renew(ctx context.Context, key, owner string, lease time.Duration) error
	// Done records key as done, kept for ttl: from processing held by owner, or
	// from a state in which nobody holds it (absent, or a lease or TTL that has
	// expired without anyone taking the key over), since the work was done and later
	// deliveries are duplicates. When another owner holds the key under a live
	// lease, or completed it within its TTL, nothing changes and it returns an error
	// wrapping ErrNotOwner. Done by an owner that already completed the key only
	// restarts its TTL (a retried Done is harmless).
	Done(ctx context.Context, key, owner string, ttl time.Duration) error
	// Release deletes key when owner holds it (a lease that expired without anyone
	// taking the key over still counts), so that the next delivery runs again. A
	// key nobody holds is left as it is (nil). When another owner holds it, or it is
	// done, nothing changes and it returns an error wrapping ErrNotOwner.
	Release(ctx context.Context, key, owner string) error
}

// Sentinel errors.
var (
	// ErrNotOwner: Renew, Done or Release by an owner that does not hold the key.
	ErrNotOwner = errors.New("idempotent: key not held by this owner")
	// ErrLeaseLost is the cause of the listener's context when the Guard learns
	// that its lease on a key was lost (a renewal found another owner): someone
	// else may be consuming the same key, so the listener should stop.
	ErrLeaseLost = errors.New("idempotent: lease lost")
	// ErrConfig: an option is invalid.
	ErrConfig = errors.New("idempotent: invalid configuration")
	// ErrNotVisible: BrokerStore could not read back the record it wrote within
	// its visibility timeout (the broker's index is behind, or the broker is
	// unreachable for queries).
	ErrNotVisible = errors.New("idempotent: state record not visible in the broker's index")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("idempotent: store closed")
)
