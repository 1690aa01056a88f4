package remoting

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of the process-wide connection and response limits.
const (
	// DefaultMaxConns is how many connections the servers of a process
	// sharing a ConnLimit may hold at once.
	DefaultMaxConns = 10000
	// DefaultMaxConnsPerSource is how many of them may come from one source
	// address.
	DefaultMaxConnsPerSource = 1000
	// DefaultResponseBudget is how many bytes of answers the servers of a
	// process may hold queued for peers that do not read them (see
	// ResponseBudget).
	DefaultResponseBudget = 512 << 20
	// responseFloor is what a connection may keep owing while the response
	// budget is exhausted: its reading stops only when it owes more.
	responseFloor = 256 << 10
)

// ConnLimit bounds the connections of the servers and listeners that share
// it (a process's, with SharedConnLimit: every remoting Server and every
// LimitListener): in all, per source address (IPv4 by address, IPv6 by
// /64) and, once ReserveFDs is called, by the file descriptors the process
// has left. A connection over a bound is closed as soon as it is accepted,
// before anything is read from it, with a Warn line (one per minute for
// each of the three bounds, the rest counted). Its methods are safe for
// concurrent use.
type ConnLimit struct {
	max, perSource atomic.Int64

	mu      sync.Mutex
	total   int
	sources map[netip.Addr]int

	fd fdReserve // the bound from file descriptors (fdreserve.go)

	refusedTotal, refusedSource, refusedFD atomic.Uint64
	// One Warn line a minute per reason (refusal's values), the rest counted.
	lastLog  [3]atomic.Int64
	unlogged [3]atomic.Uint64
}

// The reasons a ConnLimit refuses a connection, each logged on its own.
const (
	refusalTotal = iota
	refusalFD
	refusalSource
)

// NewConnLimit returns a limit of max connections in all and perSource
// from one source (<= 0: unlimited).
func NewConnLimit(max, perSource int) *ConnLimit {
	l := &ConnLimit{sources: map[netip.Addr]int{}}
	l.SetLimits(max, perSource)
	return l
}

var (
	sharedConnLimit     *ConnLimit
	sharedConnLimitOnce sync.Once
)

// SharedConnLimit is the process-wide ConnLimit of the Servers whose
// Options name none (DefaultMaxConns, DefaultMaxConnsPerSource).
func SharedConnLimit() *ConnLimit {
	sharedConnLimitOnce.Do(func() { sharedConnLimit = NewConnLimit(DefaultMaxConns, DefaultMaxConnsPerSource) })
	return sharedConnLimit
}

// SetLimits changes the bounds (<= 0: unlimited); connections over a new,
// lower bound stay open.
func (l *ConnLimit) SetLimits(max, perSource int) {
	l.max.Store(int64(max))
	l.perSource.Store(int64(perSource))
}

// ConnLimitStats are a ConnLimit's numbers.
type ConnLimitStats struct {
	Max, PerSource int    // the bounds (0: unlimited)
	Open           int    // connections counted now
	Sources        int    // distinct sources among them
	RefusedTotal   uint64 // connections closed for the overall bound
	RefusedSource  uint64 // connections closed for the per-source bound
	// The file-descriptor reserve (ReserveFDs; all 0 without it): the bound
	// in all it gives now, the soft RLIMIT_NOFILE and the descriptors held
	// for other things than counted connections at the last count, the
	// headroom kept beyond them, and the connections closed for it.
	FDBound, FDLimit, FDHeld, FDHeadroom int
	RefusedFD                            uint64
}

// Stats returns the limit's numbers.
func (l *ConnLimit) Stats() ConnLimitStats {
	l.mu.Lock()
	st := ConnLimitStats{Max: int(max(l.max.Load(), 0)), PerSource: int(max(l.perSource.Load(), 0)), Open: l.total,
		Sources: len(l.sources), RefusedTotal: l.refusedTotal.Load(), RefusedSource: l.refusedSource.Load(),
		RefusedFD: l.refusedFD.Load()}
	l.mu.Unlock()
	if l.fd.on.Load() {
		st.FDBound, st.FDLimit = int(l.fd.bound.Load()), int(l.fd.soft.Load())
		st.FDHeld, st.FDHeadroom = int(l.fd.held.Load()), int(l.fd.headroom.Load())
	}
	return st
}

// Bound is the number of connections the limit admits in all now: the
// smaller of Max and FDBound (0: unlimited).
func (s ConnLimitStats) Bound() int {
	switch {
	case s.FDLimit == 0:
		return s.Max
	case s.Max == 0:
		return max(s.FDBound, 0)
	}
	return max(min(s.Max, s.FDBound), 0)
}

// sourceOf is the key a connection counts under: its address, an IPv6
// one cut to its /64 (one host commonly owns a whole /64).
func sourceOf(a net.Addr) netip.Addr {
	var ip netip.Addr
	switch t := a.(type) {
	case *net.TCPAddr:
		ip = t.AddrPort().Addr().Unmap()
	default:
		if a == nil {
			return ip
		}
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			return ip
		}
		ip = ap.Addr().Unmap()
	}
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		ip = p.Addr()
	}
	return ip
}

// acquire counts a new connection from src, accepted by the listener
// named name; false: it is over a bound (counted, and logged at most once
// a minute), and must be closed.
func (l *ConnLimit) acquire(src netip.Addr, log *slog.Logger, name string) bool {
	max, per := l.max.Load(), l.perSource.Load()
	fdOn := l.fd.on.Load()
	if fdOn {
		l.fd.refresh(l)
	}
	fdBound := l.fd.bound.Load()
	l.mu.Lock()
	n := l.sources[src]
	switch {
	case max > 0 && int64(l.total) >= max:
		l.mu.Unlock()
		l.refusedTotal.Add(1)
		l.logRefusal(log, name, refusalTotal, "too many connections in all", max, src)
		return false
	case fdOn && int64(l.total) >= fdBound:
		l.mu.Unlock()
		l.refusedFD.Add(1)
		l.logRefusal(log, name, refusalFD, "too many connections for the file descriptors the process has left "+
			"(raise its RLIMIT_NOFILE: ulimit -n, systemd LimitNOFILE=)", fdBound, src,
			"rlimit_nofile", l.fd.soft.Load(), "fds_held_otherwise", l.fd.held.Load(), "fds_headroom", l.fd.headroom.Load())
		return false
	case per > 0 && int64(n) >= per:
		l.mu.Unlock()
		l.refusedSource.Add(1)
		l.logRefusal(log, name, refusalSource, "too many connections from one source", per, src)
		return false
	}
	l.total++
	l.sources[src] = n + 1
	l.mu.Unlock()
	return true
}

func (l *ConnLimit) release(src netip.Addr) {
	l.mu.Lock()
	l.total--
	if n := l.sources[src] - 1; n > 0 {
		l.sources[src] = n
	} else {
		delete(l.sources, src)
	}
	l.mu.Unlock()
}

func (l *ConnLimit) logRefusal(log *slog.Logger, listener string, reason int, why string, bound int64, src netip.Addr, attrs ...any) {
	now := time.Now().UnixNano()
	last := l.lastLog[reason].Load()
	if last != 0 && now-last < int64(limitLogEvery) || !l.lastLog[reason].CompareAndSwap(last, now) {
		l.unlogged[reason].Add(1)
		return
	}
	log.Warn("connection refused: "+why+" (further refusals for this reason within a minute, on any listener, are only counted)",
		append([]any{"listener", listener, "bound", bound, "source", src.String(), "refused_unlogged_since_last_line", l.unlogged[reason].Swap(0),
			"refused_total", l.refusedTotal.Load(), "refused_per_source", l.refusedSource.Load(), "refused_fd_reserve", l.refusedFD.Load()},
			attrs...)...)
}

// ResponseBudget bounds the bytes of answers that the servers sharing it
// hold queued for their peers (a peer that sends requests and does not
// read the answers keeps them queued): while the total is over the limit,
// every connection that owes more than 256 KiB stops reading requests
// until its answers are written (or its WriteTimeout closes it), so the
// memory held for unread answers stays near the limit whatever the number
// of such peers, and connections that read their answers keep being
// served. Each connection also stops reading at its own MaxPendingBytes.
// Its methods are safe for concurrent use.
type ResponseBudget struct {
	limit, inUse, peak atomic.Int64
	stalls             atomic.Uint64 // times a connection stopped reading for the budget
	lastLog            atomic.Int64
}

// NewResponseBudget returns a budget of limit bytes (<= 0: unlimited).
func NewResponseBudget(limit int64) *ResponseBudget {
	b := new(ResponseBudget)
	b.limit.Store(limit)
	return b
}

var (
	sharedResponseBudget     *ResponseBudget
	sharedResponseBudgetOnce sync.Once
)

// SharedResponseBudget is the process-wide ResponseBudget of the Servers
// whose Options name none (DefaultResponseBudget).
func SharedResponseBudget() *ResponseBudget {
	sharedResponseBudgetOnce.Do(func() { sharedResponseBudget = NewResponseBudget(DefaultResponseBudget) })
	return sharedResponseBudget
}

// SetLimit changes the limit (<= 0: unlimited).
func (b *ResponseBudget) SetLimit(limit int64) { b.limit.Store(limit) }

// ResponseBudgetStats are a ResponseBudget's numbers.
type ResponseBudgetStats struct {
	Limit, InUse, Peak int64
	Stalls             uint64 // times a connection stopped reading because the budget was exhausted
}

// Stats returns the budget's numbers.
func (b *ResponseBudget) Stats() ResponseBudgetStats {
	return ResponseBudgetStats{Limit: b.limit.Load(), InUse: b.inUse.Load(), Peak: b.peak.Load(), Stalls: b.stalls.Load()}
}

func (b *ResponseBudget) add(n int64) {
	if v := b.inUse.Add(n); n > 0 && v > b.peak.Load() {
		b.peak.Store(v)
	}
}

// over reports whether a connection owing owed bytes must stop reading.
func (b *ResponseBudget) over(owed int64) bool {
	if owed <= responseFloor {
		return false
	}
	l := b.limit.Load()
	return l > 0 && b.inUse.Load() > l
}

// stalled counts a connection that stopped reading for the budget and logs
// it at most once a minute.
func (b *ResponseBudget) stalled(log *slog.Logger, c *Conn, owed int64) {
	b.stalls.Add(1)
	now := time.Now().UnixNano()
	last := b.lastLog.Load()
	if last != 0 && now-last < int64(limitLogEvery) || !b.lastLog.CompareAndSwap(last, now) {
		return
	}
	log.Warn("remoting: answers queued for peers exceed the response budget; connections owing more than 256 KiB stop reading until theirs are written (further stalls within a minute are only counted)",
		"limit", b.limit.Load(), "in_use", b.inUse.Load(), "conn", c.id, "remote", c.remote, "owed", owed, "stalls", b.stalls.Load())
}

// ApplyProcessLimits sets SharedConnLimit's bounds as a binary's flags
// give them (maxConns in all, perSource from one source; 0 keeps each
// default) and bounds the connections by the file descriptors left
// (ReserveFDs with fdHeadroom; 0: DefaultFDHeadroom's rule). When the
// process's RLIMIT_NOFILE cannot be read the configured bounds stay, with
// a WARN.
func ApplyProcessLimits(maxConns, perSource, fdHeadroom int, logger *slog.Logger) {
	lim := SharedConnLimit()
	if maxConns > 0 || perSource > 0 {
		if maxConns == 0 {
			maxConns = DefaultMaxConns
		}
		if perSource == 0 {
			perSource = DefaultMaxConnsPerSource
		}
		lim.SetLimits(maxConns, perSource)
	}
	if err := lim.ReserveFDs(fdHeadroom, logger); err != nil {
		logger.Warn("connections are not bounded by the file descriptors left: cannot read RLIMIT_NOFILE; keep --max-connections below it", "err", err)
	}
}
