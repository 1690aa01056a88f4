package commitlog

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/mmap"
)

// FlushMode selects when appended records reach stable storage.
type FlushMode int

const (
	// FlushAsync syncs in the background: every FlushInterval when at least
	// FlushLeastPages pages are dirty, and fully at least every
	// FlushThoroughInterval. A crash of the process loses nothing (the pages are
	// in the kernel's cache); a crash of the machine loses what was not synced.
	FlushAsync FlushMode = iota
	// FlushSync makes WaitFlushed block until an fdatasync covers the offset.
	// One sync serves every writer waiting at that moment (group commit).
	FlushSync
)

// String returns "async" or "sync".
func (m FlushMode) String() string {
	if m == FlushSync {
		return "sync"
	}
	return "async"
}

// ParseFlushMode accepts "async"/"ASYNC_FLUSH" and "sync"/"SYNC_FLUSH".
func ParseFlushMode(s string) (FlushMode, error) {
	switch s {
	case "async", "ASYNC_FLUSH":
		return FlushAsync, nil
	case "sync", "SYNC_FLUSH":
		return FlushSync, nil
	}
	return FlushAsync, fmt.Errorf("commitlog: unknown flush mode %q (want async or sync)", s)
}

// Options configure a Log. The zero value of every field means its default.
type Options struct {
	// Dir holds the segment files and the checkpoint. Required; created if missing.
	Dir string
	// SegmentSize is the size of every segment file. Default 1 GiB; at least
	// 64 KiB and a multiple of the page size. It must not change for an existing log.
	SegmentSize int64
	// FlushMode: FlushAsync (default) or FlushSync.
	FlushMode FlushMode
	// FlushInterval is how often the async flusher looks for dirty pages. Default 500 ms.
	FlushInterval time.Duration
	// FlushLeastPages is how many dirty pages make the async flusher sync. Default 4.
	FlushLeastPages int
	// FlushThoroughInterval forces a full async flush at least this often. Default 10 s.
	FlushThoroughInterval time.Duration
	// SyncFlushTimeout bounds how long WaitFlushed waits before returning
	// ErrFlushTimeout. Default 5 s.
	SyncFlushTimeout time.Duration
	// CheckpointInterval is the least time between checkpoint writes (the flushed
	// offset recovery scans from). Default 1 s.
	CheckpointInterval time.Duration
	// RetentionTime: segments whose last write is older are deleted by
	// Retain. Default 72 h.
	RetentionTime time.Duration
	// DiskUsageRatio: while the file system's used fraction is above it, Retain
	// deletes the oldest segments whatever their age. Default 0.75.
	DiskUsageRatio float64
	// RetentionInterval is how often the log runs Retain by itself; negative
	// disables the background run. Default 10 s.
	RetentionInterval time.Duration
	// Logger receives the errors of the log's own retention runs (a failed
	// statfs or unlink; the next run retries). Default slog.Default().
	Logger *slog.Logger
	// AcceptLoss lets Open start a log whose segment files do not form one
	// sequence (a segment missing between two present ones, or none left at
	// all while the checkpoint records data): the segments before the last
	// gap are moved into DamagedDir and the log starts after it. Without it
	// Open refuses such a directory with ErrLayout, naming the files. Damage
	// inside segments never needs it: it is repaired (see Recovery).
	AcceptLoss bool
	// PrefaultAhead is how far ahead of the written position the background
	// goroutine faults pages of the active segment in. Default 8 MiB; negative
	// disables pre-faulting.
	PrefaultAhead int64
	// RecycleSegments is how many retired segment files are kept for reuse
	// as later segments instead of being unlinked. Default 1; negative
	// disables recycling. A recycled file's blocks are allocated and its
	// pages are likely still cached, so writing into it costs a fraction of
	// first-touching a new file's pages; it only helps once retention has
	// retired a segment, and only while that file's pages are still cached
	// (one mostly evicted is zeroed and used as a new file would be).
	// Retention for disk pressure keeps nothing: it unlinks the kept files
	// before it deletes a segment, and the files of the segments it deletes. The files wait in the log's directory, named
	// "recycle-" and the segment name they had, and count towards disk
	// usage.
	RecycleSegments int
	// TruncatedRetention is how long the bytes a truncation cut
	// (TruncateTo, one file each under TruncatedDir) and the segments a
	// restart discarded (RestartAt, under DiscardedDir) are kept:
	// RetainTruncated removes what is older. Default 7 days.
	TruncatedRetention time.Duration
	// TruncatedMaxBytes bounds the total size of what TruncatedDir keeps:
	// RetainTruncated removes the oldest until the total is at most this,
	// and a truncation cutting more than this keeps nothing. Default 1 GiB;
	// negative keeps nothing at all. (DiscardedDir, whole segments, goes by
	// age alone.)
	TruncatedMaxBytes int64
	// FS is the file system every file operation goes through. Default
	// vfs.Default (the operating system); tests wrap it to inject failures.
	FS vfs.FS

	// now is the clock; nil means time.Now.
	now func() time.Time
}

// MinSegmentSize is the smallest segment size accepted.
const MinSegmentSize = 64 << 10

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, errors.New("commitlog: Options.Dir is required")
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = 1 << 30
	}
	if o.SegmentSize < MinSegmentSize || o.SegmentSize%int64(mmap.PageSize()) != 0 {
		return o, fmt.Errorf("commitlog: segment size %d must be ≥ %d and a multiple of the page size", o.SegmentSize, MinSegmentSize)
	}
	if o.FlushMode != FlushAsync && o.FlushMode != FlushSync {
		return o, fmt.Errorf("commitlog: unknown flush mode %d", o.FlushMode)
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 500 * time.Millisecond
	}
	if o.FlushLeastPages <= 0 {
		o.FlushLeastPages = 4
	}
	if o.FlushThoroughInterval <= 0 {
		o.FlushThoroughInterval = 10 * time.Second
	}
	if o.SyncFlushTimeout <= 0 {
		o.SyncFlushTimeout = 5 * time.Second
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = time.Second
	}
	if o.RetentionTime <= 0 {
		o.RetentionTime = 72 * time.Hour
	}
	if o.DiskUsageRatio == 0 {
		o.DiskUsageRatio = 0.75
	}
	if o.DiskUsageRatio < 0 || o.DiskUsageRatio > 1 {
		return o, fmt.Errorf("commitlog: disk usage ratio %v must be within (0, 1]", o.DiskUsageRatio)
	}
	if o.RetentionInterval == 0 {
		o.RetentionInterval = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PrefaultAhead == 0 {
		o.PrefaultAhead = 8 << 20
	}
	if o.RecycleSegments == 0 {
		o.RecycleSegments = 1
	}
	if o.TruncatedRetention <= 0 {
		o.TruncatedRetention = 7 * 24 * time.Hour
	}
	if o.TruncatedMaxBytes == 0 {
		o.TruncatedMaxBytes = 1 << 30
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.now == nil {
		o.now = time.Now
	}
	return o, nil
}
