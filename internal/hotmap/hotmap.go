// Package hotmap is a map from strings to pointers for tables that are read
// on every message and grow now and then by one key: topics, queues, routes.
//
// Reads of a key that has been in the map a while take no lock: they look it
// up in an immutable map (the hot one) and load the key's cell atomically.
// A new key goes into a small map under a mutex (the cold one) until it is
// merged into a new hot map, which happens when the cold map holds an eighth
// as many keys as the hot one (at once while the map is small), or, when a
// cold key is used, a second after the last merge. So n insertions copy
// O(n) cells in all, where copying the whole map per insertion (the usual
// copy-on-write map) costs O(n²): 20,000 topics created one by one took
// minutes. Replacing the value of an existing key swaps its cell and is
// seen at once by every reader.
package hotmap

import (
	"sync"
	"sync/atomic"
	"time"
)

// Map maps string keys to *T. The zero value is not usable: call New.
type Map[T any] struct {
	hot atomic.Pointer[map[string]*cell[T]]

	mu        sync.Mutex
	cold      map[string]*cell[T] // keys not yet in hot; under mu
	lastMerge time.Time           // under mu
}

type cell[T any] struct{ v atomic.Pointer[T] }

// New returns an empty map.
func New[T any]() *Map[T] {
	m := &Map[T]{cold: map[string]*cell[T]{}}
	m.hot.Store(&map[string]*cell[T]{})
	return m
}

// Load returns the value of key, nil if none.
func (m *Map[T]) Load(key string) *T {
	if c := (*m.hot.Load())[key]; c != nil {
		return c.v.Load()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cold[key]
	if c == nil {
		// A merge may have moved it into hot meanwhile.
		c = (*m.hot.Load())[key]
	}
	if c == nil {
		return nil
	}
	m.maybeMerge()
	return c.v.Load()
}

// Update sets key's value to what fn returns given the current one (nil if
// none). fn runs under the map's mutex: Updates are serialised, Loads are
// not held up. A nil result deletes the key.
func (m *Map[T]) Update(key string, fn func(old *T) *T) *T {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.cellLocked(key)
	var old *T
	if c != nil {
		old = c.v.Load()
	}
	v := fn(old)
	switch {
	case v == nil:
		if c != nil {
			m.deleteLocked(key)
		}
	case c != nil:
		c.v.Store(v)
	default:
		c = &cell[T]{}
		c.v.Store(v)
		m.cold[key] = c
		m.maybeMerge()
	}
	return v
}

// Store sets key's value; nil deletes it.
func (m *Map[T]) Store(key string, v *T) { m.Update(key, func(*T) *T { return v }) }

// Delete removes key.
func (m *Map[T]) Delete(key string) { m.Update(key, func(*T) *T { return nil }) }

// Range calls fn for every key until it returns false. It sees a snapshot
// of the keys; values are loaded as it goes.
func (m *Map[T]) Range(fn func(key string, v *T) bool) {
	m.mu.Lock()
	m.mergeLocked()
	hot := *m.hot.Load()
	m.mu.Unlock()
	for k, c := range hot {
		if v := c.v.Load(); v != nil && !fn(k, v) {
			return
		}
	}
}

// Len returns the number of keys.
func (m *Map[T]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(*m.hot.Load()) + len(m.cold)
}

func (m *Map[T]) cellLocked(key string) *cell[T] {
	if c := m.cold[key]; c != nil {
		return c
	}
	return (*m.hot.Load())[key]
}

func (m *Map[T]) deleteLocked(key string) {
	if _, ok := m.cold[key]; ok {
		delete(m.cold, key)
		return
	}
	hot := *m.hot.Load()
	next := make(map[string]*cell[T], len(hot))
	for k, c := range hot {
		if k != key {
			next[k] = c
		}
	}
	m.hot.Store(&next)
}

// maybeMerge merges when cold is large next to hot, or a second after the
// last merge. Holds mu.
func (m *Map[T]) maybeMerge() {
	if len(m.cold) >= max(1, len(*m.hot.Load())/8) || time.Since(m.lastMerge) > time.Second {
		m.mergeLocked()
	}
}

// mergeLocked publishes hot plus cold as the new hot map. Holds mu.
func (m *Map[T]) mergeLocked() {
	if len(m.cold) == 0 {
		return
	}
	hot := *m.hot.Load()
	next := make(map[string]*cell[T], len(hot)+len(m.cold))
	for k, c := range hot {
		next[k] = c
	}
	for k, c := range m.cold {
		next[k] = c
	}
	m.hot.Store(&next)
	clear(m.cold)
	m.lastMerge = time.Now()
}
