package core

import (
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the auto-creation caps (Options.MaxAutoCreateTopics,
// MaxAutoCreateGroups, MaxAutoCreatePerSource).
const (
	DefaultMaxAutoCreateTopics    = 10000
	DefaultMaxAutoCreateGroups    = 10000
	DefaultMaxAutoCreatePerSource = 1000
	// autoCreateWindow is the period over which MaxAutoCreatePerSource
	// creations are allowed to one source (a bucket of that many tokens,
	// refilled evenly over the window).
	autoCreateWindow = time.Hour
	// maxAutoCreateSources bounds the sources tracked; the oldest buckets,
	// full again by then, are dropped first.
	maxAutoCreateSources = 65536
)

// autoCreateLimiter caps what requests create by themselves (a send to an
// unknown topic, a heartbeat or a pull of an unknown group): topics and
// groups in all, and creations per source address, so that a client
// flooding new names cannot grow the tables, the state files and the
// registrations without bound. Topics and groups created by the admin
// codes are not capped. Its methods are safe for concurrent use.
type autoCreateLimiter struct {
	maxTopics, maxGroups, perSource int

	mu      sync.Mutex
	sources map[netip.Addr]*createBucket

	refusedTopics, refusedGroups, refusedSource atomic.Int64
	lastLog                                     atomic.Int64
}

type createBucket struct {
	tokens float64
	at     time.Time
}

func newAutoCreateLimiter(o *Options) *autoCreateLimiter {
	return &autoCreateLimiter{maxTopics: o.MaxAutoCreateTopics, maxGroups: o.MaxAutoCreateGroups,
		perSource: o.MaxAutoCreatePerSource, sources: map[netip.Addr]*createBucket{}}
}

// allow decides whether src may auto-create one more topic (or group, by
// kind) while the table holds n; nil, or the refusal's text. It spends the
// source's token only when it allows.
func (l *autoCreateLimiter) allow(kind string, n int, src netip.Addr, log *slog.Logger) error {
	max, refused := l.maxTopics, &l.refusedTopics
	if kind == "group" {
		max, refused = l.maxGroups, &l.refusedGroups
	}
	if max > 0 && n >= max {
		refused.Add(1)
		return l.refuse(log, fmt.Sprintf("the broker holds %d %ss, the most it creates on demand (maxAutoCreate%ss); create it with the admin API", n, kind, capital(kind)), kind, src)
	}
	if l.perSource <= 0 || !src.IsValid() {
		return nil
	}
	now := time.Now()
	l.mu.Lock()
	b := l.sources[src]
	if b == nil {
		if len(l.sources) >= maxAutoCreateSources {
			l.pruneLocked(now)
		}
		b = &createBucket{tokens: float64(l.perSource), at: now}
		l.sources[src] = b
	}
	b.tokens = min(float64(l.perSource), b.tokens+now.Sub(b.at).Seconds()*float64(l.perSource)/autoCreateWindow.Seconds())
	b.at = now
	ok := b.tokens >= 1
	if ok {
		b.tokens--
	}
	l.mu.Unlock()
	if !ok {
		l.refusedSource.Add(1)
		return l.refuse(log, fmt.Sprintf("%s created %d topics and groups on demand within an hour, the most one address may (maxAutoCreatePerSource); create it with the admin API", src, l.perSource), kind, src)
	}
	return nil
}

// pruneLocked drops the buckets that are full again, or the older half.
func (l *autoCreateLimiter) pruneLocked(now time.Time) {
	for src, b := range l.sources {
		if now.Sub(b.at) >= autoCreateWindow {
			delete(l.sources, src)
		}
	}
	if len(l.sources) < maxAutoCreateSources {
		return
	}
	cut := now.Add(-autoCreateWindow / 2)
	for src, b := range l.sources {
		if b.at.Before(cut) || len(l.sources) >= maxAutoCreateSources {
			delete(l.sources, src)
		}
	}
}

// refuse logs a refusal (one line a minute, the rest counted) and returns
// its text.
func (l *autoCreateLimiter) refuse(log *slog.Logger, why, kind string, src netip.Addr) error {
	now := time.Now().UnixNano()
	if last := l.lastLog.Load(); (last == 0 || now-last >= int64(time.Minute)) && l.lastLog.CompareAndSwap(last, now) {
		log.Warn("broker: auto-creation refused (further refusals within a minute are only counted)", "kind", kind, "source", src.String(), "why", why,
			"refused_topics", l.refusedTopics.Load(), "refused_groups", l.refusedGroups.Load(), "refused_per_source", l.refusedSource.Load())
	}
	return fmt.Errorf("auto-creation refused: %s", why)
}

func capital(s string) string { return string(s[0]-'a'+'A') + s[1:] }

// addRuntimeInfo adds the counters: autoCreateRefusedTopics,
// autoCreateRefusedGroups, autoCreateRefusedPerSource.
func (l *autoCreateLimiter) addRuntimeInfo(m map[string]string) {
	m["autoCreateRefusedTopics"] = strconv.FormatInt(l.refusedTopics.Load(), 10)
	m["autoCreateRefusedGroups"] = strconv.FormatInt(l.refusedGroups.Load(), 10)
	m["autoCreateRefusedPerSource"] = strconv.FormatInt(l.refusedSource.Load(), 10)
}

// count returns the number of groups.
func (g *groupManager) count() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.m)
}

// sourceAddr parses a ClientConn's host:port ("" or garbage: no source).
func sourceAddr(hostPort string) netip.Addr {
	ap, err := netip.ParseAddrPort(hostPort)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// capDefault is a cap option's value: 0 its default, negative none (0).
func capDefault(v, def int) int {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}
