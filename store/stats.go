package store

import (
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/commitlog"
)

type counters struct {
	puts, putBytes, putErrors atomic.Int64
	gets, getBytes            atomic.Int64
	dispatchErrors            atomic.Int64
	dispatchStalls            atomic.Int64
	lastDispatch              atomic.Int64
}

// Stats is a snapshot of the store's counters.
type Stats struct {
	Puts, PutBytes, PutErrors int64
	// Gets and GetBytes count messages and bytes returned by Get.
	Gets, GetBytes int64
	// DispatchLag is how many commit-log bytes are written but not yet
	// dispatched (invisible to Get).
	DispatchLag    int64
	DispatchErrors int64
	// DispatchStalls counts pauses of dispatch for lack of disk space.
	DispatchStalls int64
	// LagWaits counts Put calls that waited for the dispatcher to come back
	// within Options.MaxDispatchLag.
	LagWaits int64
	// Log holds the commit log's counters, flush latency among them.
	Log commitlog.Stats
	// MappedQueueFiles is how many consume-queue files are mapped now.
	MappedQueueFiles int
	LastDispatch     time.Time
}

// Stats returns a snapshot of the counters.
func (s *Store) Stats() Stats {
	ls := s.log.Stats()
	return Stats{
		Puts: s.stats.puts.Load(), PutBytes: s.stats.putBytes.Load(), PutErrors: s.stats.putErrors.Load(),
		Gets: s.stats.gets.Load(), GetBytes: s.stats.getBytes.Load(),
		DispatchLag:      ls.WrittenOffset - s.dispatched.Load(),
		DispatchErrors:   s.stats.dispatchErrors.Load(),
		DispatchStalls:   s.stats.dispatchStalls.Load(),
		LagWaits:         s.lag.waits.Load(),
		Log:              ls,
		MappedQueueFiles: s.cqs.MappedFiles(),
		LastDispatch:     time.Unix(0, s.stats.lastDispatch.Load()),
	}
}

// DispatchedOffset is the commit-log offset below which every message is
// visible to Get.
func (s *Store) DispatchedOffset() int64 { return s.dispatched.Load() }
