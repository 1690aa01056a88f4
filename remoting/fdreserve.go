package remoting

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// The file-descriptor reserve's defaults. With RLIMIT_NOFILE at 4,096, a
// common default hard limit, connections may take what is left after the
// process's other descriptors and 1,024 more; at 1,024, after them and 256.
const (
	// fdHeadroomMin and fdHeadroomMax clamp the default headroom, a quarter
	// of the soft RLIMIT_NOFILE.
	fdHeadroomMin = 64
	fdHeadroomMax = 1024
	// fdCountEvery is how often, at most, the process's descriptors are
	// counted (on an accept: a process that accepts nothing counts nothing).
	fdCountEvery = time.Second
)

// DefaultFDHeadroom is the headroom ReserveFDs keeps when asked for none:
// a quarter of the soft RLIMIT_NOFILE, at least 64 and at most 1,024
// descriptors. 1,024 is what a broker's store may open between two counts
// without closing any: the consume queues keep at most 1,024 files open
// for their writers (package consumequeue), and the rest it opens (a new
// commit-log segment or index file, a file mapped or synced and closed
// again) is a handful. A quarter keeps a proportional share for a small
// store under a small limit.
func DefaultFDHeadroom(soft int) int {
	return min(max(soft/4, fdHeadroomMin), fdHeadroomMax)
}

// fdReserve is a ConnLimit's bound from file descriptors: the soft
// RLIMIT_NOFILE, less the descriptors the process holds for other things
// than the connections the limit counts (its store's files, its
// listeners, the connections it dialled), less a headroom for what it may
// open before the next count. The limit is read on every accept (a
// getrlimit call: a limit lowered from outside, prlimit(1), takes effect
// on the next connection); the descriptors are counted (/proc/self/fd) at
// most once a second, on an accept.
type fdReserve struct {
	on                    atomic.Bool
	asked                 atomic.Int64 // the headroom asked for (<= 0: DefaultFDHeadroom)
	soft, held, headroom  atomic.Int64
	bound                 atomic.Int64 // soft - held - headroom
	lastCount             atomic.Int64 // unix nanos of the last count
	counting              sync.Mutex   // one count at a time (TryLock)
	log                   atomic.Pointer[slog.Logger]
	loggedSoft, countFail atomic.Int64
}

// ReserveFDs makes the limit refuse connections before the process runs
// out of file descriptors: from now on its bound in all is at most the
// soft RLIMIT_NOFILE less the descriptors the process holds for anything
// but the connections the limit counts, less headroom (<= 0:
// DefaultFDHeadroom). It first raises the soft limit to the hard one when
// it is lower (the Go runtime does so at start too). The connections
// refused for it are counted in RefusedFD and logged as the limit's
// others. It returns an error where the limit cannot be read (then
// nothing changes); log (nil: slog.Default()) gets an Info line with the
// numbers, and another whenever the limit changes.
func (l *ConnLimit) ReserveFDs(headroom int, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	soft, err := raiseNoFile()
	if err != nil {
		return err
	}
	f := &l.fd
	f.log.Store(log)
	f.asked.Store(int64(headroom))
	f.soft.Store(soft)
	f.loggedSoft.Store(soft)
	f.lastCount.Store(0)
	f.on.Store(true)
	f.refresh(l)
	st := l.Stats()
	log.Info("connections bounded by the file descriptors left",
		"rlimit_nofile", st.FDLimit, "fds_held_otherwise", st.FDHeld, "fds_headroom", st.FDHeadroom,
		"connections_bound", st.FDBound, "max_connections", st.Max)
	if st.FDBound < fdHeadroomMin {
		log.Error("the file-descriptor limit leaves almost no room for connections: raise RLIMIT_NOFILE (ulimit -n, systemd LimitNOFILE=)",
			"rlimit_nofile", st.FDLimit, "connections_bound", st.FDBound)
	}
	return nil
}

// refresh reads the soft limit, counts the descriptors when a count is
// due (or the limit changed), and recomputes the bound.
func (f *fdReserve) refresh(l *ConnLimit) {
	soft, err := softNoFile()
	changed := false
	if err == nil && soft != f.soft.Load() {
		f.soft.Store(soft)
		changed = true
	}
	now := time.Now().UnixNano()
	if (changed || now-f.lastCount.Load() >= int64(fdCountEvery)) && f.counting.TryLock() {
		if open, err := openFDs(); err == nil {
			l.mu.Lock()
			conns := l.total
			l.mu.Unlock()
			f.held.Store(max(int64(open-conns), 0))
		} else if f.countFail.Add(1) == 1 {
			f.log.Load().Warn("cannot count the process's file descriptors; the connection bound keeps only the headroom below RLIMIT_NOFILE", "err", err)
		}
		f.lastCount.Store(now)
		f.counting.Unlock()
	}
	soft = f.soft.Load()
	h := f.asked.Load()
	if h <= 0 {
		h = int64(DefaultFDHeadroom(int(min(soft, 1<<30))))
	}
	f.headroom.Store(h)
	f.bound.Store(soft - f.held.Load() - h)
	if prev := f.loggedSoft.Load(); soft != prev && f.loggedSoft.CompareAndSwap(prev, soft) {
		f.log.Load().Info("RLIMIT_NOFILE changed: the connection bound follows", "rlimit_nofile", soft, "was", prev,
			"fds_held_otherwise", f.held.Load(), "fds_headroom", h, "connections_bound", f.bound.Load())
	}
}
