package opauth

import (
	"net/netip"
	"sync"
	"time"
)

// Failed logins are limited per source address: MaxFailures within Window,
// then every login from it is refused until the window ends. At most
// MaxSources sources are counted one by one.
const (
	MaxFailures = 10
	Window      = 10 * time.Minute
	MaxSources  = 4096
)

// Failures counts failed logins per source (the dashboard's login form,
// the basic authentication of Require). Safe for concurrent use.
type Failures struct {
	mu sync.Mutex
	m  map[netip.Addr]failCount // the zero Addr: the shared count
}

type failCount struct {
	n     int
	since time.Time
}

// NewFailures returns an empty count.
func NewFailures() *Failures { return &Failures{m: map[netip.Addr]failCount{}} }

// Blocked reports whether ip has failed too often, and until when. A
// source not counted on its own while the map is full is judged by the
// shared count (see Fail).
func (f *Failures) Blocked(ip netip.Addr, now time.Time) (bool, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.m[ip]
	if !ok && len(f.m) >= MaxSources {
		c, ok = f.m[netip.Addr{}]
	}
	if !ok || now.Sub(c.since) >= Window {
		return false, time.Time{}
	}
	return c.n >= MaxFailures, c.since.Add(Window)
}

// Fail counts a failed login from ip.
func (f *Failures) Fail(ip netip.Addr, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.m) >= MaxSources {
		for k, v := range f.m {
			if now.Sub(v.since) >= Window {
				delete(f.m, k)
			}
		}
		if len(f.m) >= MaxSources {
			// Many sources failing at once: they share one count (the
			// unspecified address), so the map stays bounded.
			ip = netip.Addr{}
		}
	}
	c := f.m[ip]
	if c.n == 0 || now.Sub(c.since) >= Window {
		c = failCount{since: now}
	}
	c.n++
	f.m[ip] = c
}

// Clear forgets ip's failures (after a login that succeeded).
func (f *Failures) Clear(ip netip.Addr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, ip)
}

// sources is how many counts are held (tests).
func (f *Failures) sources() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}
