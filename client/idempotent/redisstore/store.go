package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apogeemq/apogee/client/idempotent"
	"github.com/redis/go-redis/v9"
)

// Store is an idempotent.Store in Redis. Each key is one Redis string under the
// store's prefix, whose value is "P" + owner while processing and "D" + owner
// once done, and whose expiry is the lease or the done TTL:
//
//   - TryBegin is SET key "P<owner>" NX PX lease; when the key exists, a GET tells
//     processing from done (and a key that expired between the two is tried
//     again).
//   - Renew, Done and Release are Lua scripts that compare the value with the
//     owner and then PEXPIRE, SET ... PX or DEL, atomically.
//
// An expired lease vanishes with its key, so a takeover is reported as
// StateAbsent, never StateExpired, and a holder cannot complete or release a key
// after its lease expired if it was taken over (ErrNotOwner), but can complete it
// if nobody did. Every method is one or two round trips.
type Store struct {
	rdb    redis.Cmdable
	prefix string
}

// New returns a Store that keeps its keys in rdb (a *redis.Client,
// *redis.ClusterClient, *redis.Ring, ...) under prefix. Give each consumer group
// its own prefix, for example "apogee:idem:<group>:".
func New(rdb redis.Cmdable, prefix string) *Store { return &Store{rdb: rdb, prefix: prefix} }

var (
	// renewScript: PEXPIRE the key if the caller holds it.
	renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
	return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)
	// doneScript: mark the key done unless another owner holds or completed it.
	doneScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == false or v == ARGV[1] or v == ARGV[2] then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return 1
end
return 0`)
	// releaseScript: delete the key if the caller holds it; nothing to do if absent.
	releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == false then
	return 1
end
if v == ARGV[1] then
	redis.call('DEL', KEYS[1])
	return 1
end
return 0`)
)

func ms(d time.Duration) int64 { return max(d.Milliseconds(), 1) }

// TryBegin implements idempotent.Store.
func (s *Store) TryBegin(ctx context.Context, key, owner string, lease time.Duration) (idempotent.State, error) {
	k := s.prefix + key
	for range 3 {
		ok, err := s.rdb.SetNX(ctx, k, "P"+owner, time.Duration(ms(lease))*time.Millisecond).Result()
		if err != nil {
			return 0, fmt.Errorf("redisstore: begin %q: %w", key, err)
		}
		if ok {
			return idempotent.StateAbsent, nil
		}
		v, err := s.rdb.Get(ctx, k).Result()
		switch {
		case errors.Is(err, redis.Nil):
			continue // expired meanwhile: try again
		case err != nil:
			return 0, fmt.Errorf("redisstore: begin %q: %w", key, err)
		case len(v) > 0 && v[0] == 'D':
			return idempotent.StateDone, nil
		}
		return idempotent.StateProcessing, nil
	}
	return 0, fmt.Errorf("redisstore: begin %q: the key kept expiring between SET NX and GET", key)
}

// Renew implements idempotent.Store.
func (s *Store) Renew(ctx context.Context, key, owner string, lease time.Duration) error {
	n, err := renewScript.Run(ctx, s.rdb, []string{s.prefix + key}, "P"+owner, ms(lease)).Int()
	if err != nil {
		return fmt.Errorf("redisstore: renew %q: %w", key, err)
	}
	if n != 1 {
		return fmt.Errorf("redisstore: renew %q: %w", key, idempotent.ErrNotOwner)
	}
	return nil
}

// Done implements idempotent.Store.
func (s *Store) Done(ctx context.Context, key, owner string, ttl time.Duration) error {
	n, err := doneScript.Run(ctx, s.rdb, []string{s.prefix + key}, "P"+owner, "D"+owner, ms(ttl)).Int()
	if err != nil {
		return fmt.Errorf("redisstore: done %q: %w", key, err)
	}
	if n != 1 {
		return fmt.Errorf("redisstore: done %q: %w", key, idempotent.ErrNotOwner)
	}
	return nil
}

// Release implements idempotent.Store.
func (s *Store) Release(ctx context.Context, key, owner string) error {
	n, err := releaseScript.Run(ctx, s.rdb, []string{s.prefix + key}, "P"+owner).Int()
	if err != nil {
		return fmt.Errorf("redisstore: release %q: %w", key, err)
	}
	if n != 1 {
		return fmt.Errorf("redisstore: release %q: %w", key, idempotent.ErrNotOwner)
	}
	return nil
}
