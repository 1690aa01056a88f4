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
	// integrity
	lostMessages, lostBytes atomic.Int64 // found lost by recovery (synced data)
	queuesRebuilt           atomic.Int64 // consume queues rebuilt from the log at Open
	badEntries              atomic.Int64 // entries Get skipped: their record did not match
	lostSkipped             atomic.Int64 // lost-message entries Get skipped
	indexFilesRebuilt       atomic.Int64 // damaged index files removed at Open
	// disk pressure
	diskFullRefusals atomic.Int64 // appends refused for lack of space
	pressureDeletes  atomic.Int64 // segments deleted early because the disk was too full
	unindexed        atomic.Int64 // records whose keys were not indexed (index unavailable)
	// scrubber
	scrubPasses, scrubBytes, scrubBadRecords atomic.Int64
	scrubRepaired, scrubMissing              atomic.Int64
	lastScrub                                atomic.Int64 // unix nanos of the end of the last pass
	// replication (a replica's)
	replicatedBytes, replicaResets atomic.Int64
	// lite topics
	liteRefused atomic.Int64 // lite entries the lite-topic index refused
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
	// Integrity: what Open found and repaired, what reads skipped.
	//
	// LostMessages and LostBytes count what recovery found lost from synced
	// data (damage, not a crash's unsynced tail); QueuesRebuilt counts consume
	// queues rebuilt from the log at Open; BadEntries counts consume-queue
	// entries Get skipped because the record they point at is not theirs;
	// LostEntriesSkipped counts entries standing for lost messages that Get
	// stepped over.
	LostMessages, LostBytes int64
	QueuesRebuilt           int64
	IndexFilesRebuilt       int64
	BadEntries              int64
	LostEntriesSkipped      int64
	// Disk pressure: DiskFull is true while appends fail for lack of space;
	// DiskFullRefusals counts those appends; PressureDeletes counts segments
	// deleted before their retention time because the disk was fuller than
	// Options.DiskUsageRatio; Unindexed counts records whose keys could not be
	// indexed (no index file could be created).
	DiskFull         bool
	DiskFullRefusals int64
	PressureDeletes  int64
	Unindexed        int64
	// The scrubber: passes run, bytes checked, damaged records found (and
	// set aside), consume-queue entries rewritten from their record, records
	// whose entry is missing, and when the last pass ended (zero: none yet).
	ScrubPasses, ScrubBytes, ScrubBadRecords  int64
	ScrubRepairedEntries, ScrubMissingEntries int64
	LastScrub                                 time.Time
	// Replication. A replica's: ReplicatedBytes counts the master's bytes
	// AppendReplicated consumed; ReplicaResets counts the times its log
	// started over (ResetReplica). A master's: ReplicatedOffset (see
	// Store.ReplicatedOffset) and the connected replicas.
	ReplicatedBytes, ReplicaResets int64
	ReplicatedOffset               int64
	Replicas                       []ReplicaInfo
	// Lite topics: the lite-topic index (count, files, blocks, journal,
	// memory of its table), and LiteRefused, the records whose lite entry
	// the index refused (kept in their parent only).
	Lite        LiteStats
	LiteRefused int64
}

// Stats returns a snapshot of the counters.
func (s *Store) Stats() Stats {
	ls := s.log.Stats()
	st := Stats{
		Puts: s.stats.puts.Load(), PutBytes: s.stats.putBytes.Load(), PutErrors: s.stats.putErrors.Load(),
		Gets: s.stats.gets.Load(), GetBytes: s.stats.getBytes.Load(),
		DispatchLag:      ls.WrittenOffset - s.dispatched.Load(),
		DispatchErrors:   s.stats.dispatchErrors.Load(),
		DispatchStalls:   s.stats.dispatchStalls.Load(),
		LagWaits:         s.lag.waits.Load(),
		Log:              ls,
		MappedQueueFiles: s.cqs.MappedFiles(),
		LastDispatch:     time.Unix(0, s.stats.lastDispatch.Load()),

		LostMessages:       s.stats.lostMessages.Load(),
		LostBytes:          s.stats.lostBytes.Load(),
		QueuesRebuilt:      s.stats.queuesRebuilt.Load(),
		BadEntries:         s.stats.badEntries.Load(),
		LostEntriesSkipped: s.stats.lostSkipped.Load(),
		IndexFilesRebuilt:  s.stats.indexFilesRebuilt.Load(),

		DiskFull:         s.diskFull.Load(),
		DiskFullRefusals: s.stats.diskFullRefusals.Load(),
		PressureDeletes:  s.stats.pressureDeletes.Load(),
		Unindexed:        s.stats.unindexed.Load(),

		ScrubPasses:          s.stats.scrubPasses.Load(),
		ScrubBytes:           s.stats.scrubBytes.Load(),
		ScrubBadRecords:      s.stats.scrubBadRecords.Load(),
		ScrubRepairedEntries: s.stats.scrubRepaired.Load(),
		ScrubMissingEntries:  s.stats.scrubMissing.Load(),

		ReplicatedBytes:  s.stats.replicatedBytes.Load(),
		ReplicaResets:    s.stats.replicaResets.Load(),
		ReplicatedOffset: s.repl.replicated.Load(),

		Lite:        s.lq.Stats(),
		LiteRefused: s.stats.liteRefused.Load(),
	}
	if rs := s.Replicas(); len(rs) > 0 {
		st.Replicas = rs
	}
	if t := s.stats.lastScrub.Load(); t != 0 {
		st.LastScrub = time.Unix(0, t)
	}
	return st
}

// DispatchedOffset is the commit-log offset below which every message is
// visible to Get.
func (s *Store) DispatchedOffset() int64 { return s.dispatched.Load() }
