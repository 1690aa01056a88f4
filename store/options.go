package store

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/message"
)

// Options configure a Store. Zero values mean the defaults given.
type Options struct {
	// Dir is the store's root directory. Required.
	Dir string
	// SegmentSize of the commit log. Default 1 GiB.
	SegmentSize int64
	// FlushMode of the commit log: commitlog.FlushAsync (default) or FlushSync.
	FlushMode commitlog.FlushMode
	// SyncFlushTimeout: how long a sync-mode Put waits for its flush before it
	// reports StatusFlushDiskTimeout (the message is stored all the same). Default 5 s.
	SyncFlushTimeout time.Duration
	// ConsumeQueueEntries per consume-queue file. Default 300,000.
	ConsumeQueueEntries int
	// IndexSlots and IndexMaxEntries size the index files. Defaults 5,000,000 and 20,000,000.
	IndexSlots, IndexMaxEntries int
	// StoreHost is written into every record's STOREHOST and offset message ids.
	// Default 127.0.0.1:10911.
	StoreHost netip.AddrPort
	// MaxMessageSize bounds a message body. Default 4 MiB.
	MaxMessageSize int
	// RetentionTime and DiskUsageRatio drive cleanup (see commitlog.Options).
	// Defaults 72 h and 0.75.
	RetentionTime  time.Duration
	DiskUsageRatio float64
	// TruncatedRetention and TruncatedMaxBytes bound what a replica's
	// truncations keep of the bytes they cut (a file each) and its restarts
	// of the segments they discard: removed by the cleanup once older than
	// TruncatedRetention, and (truncations' files only) oldest first while
	// their total is above TruncatedMaxBytes; a truncation cutting more
	// keeps nothing, and a
	// negative TruncatedMaxBytes keeps nothing at all (see
	// commitlog.Options). Defaults 7 days and 1 GiB.
	TruncatedRetention time.Duration
	TruncatedMaxBytes  int64
	// CleanInterval is how often expired segments, consume-queue files and
	// index files are removed. Default 10 s; negative disables.
	CleanInterval time.Duration
	// FlushInterval is how often consume queues with at least two dirty pages
	// and the lite index are flushed (RocketMQ's flushIntervalConsumeQueue
	// and flushConsumeQueueLeastPages); the hash index is flushed with the
	// checkpoint (CheckpointInterval) and when a file fills. Default 1 s.
	FlushInterval time.Duration
	// CheckpointInterval is how often every consume queue is flushed and the
	// checkpoint's dispatched offset written: after a machine crash at most
	// this much of the log is dispatched again. Default 10 s.
	CheckpointInterval time.Duration
	// MaxDispatchLag bounds how many bytes of commit log may be written but
	// not yet dispatched (invisible to Get): a Put that finds the dispatcher
	// further behind waits until it is back within half of this. It bounds
	// the delay before a message becomes visible when producers outrun the
	// dispatcher, and leaves the dispatcher the CPU to catch up. Default
	// 16 MiB; negative disables the bound.
	MaxDispatchLag int64
	// OnArrival is called by the dispatcher after a message becomes visible
	// in (topic, queueID); maxOffset is the queue's new max offset. It must be
	// quick and must not call back into Put (the broker wakes long polls here).
	OnArrival func(topic string, queueID int32, maxOffset int64)
	// OnLiteArrival is called by the dispatcher, once per lite topic that
	// grew in a dispatch run, after the run's OnArrival calls: parent is the
	// record's topic, lite its __LITE_TOPIC, maxOffset the lite topic's new
	// max offset. The same rules as OnArrival: quick, no Put.
	OnLiteArrival func(parent, lite string, maxOffset int64)
	// LiteFileSize is the size of a lite-topic index file (litequeue):
	// 131,072 blocks of 512 bytes at the default 64 MiB.
	LiteFileSize int64
	// TagCode overrides the consume-queue tag code of a record when it returns
	// ok (the broker uses it for scheduled messages, whose tag code is the
	// delivery time). Default: the Java hash of TAGS, 0 without tags.
	TagCode func(v message.View) (code int64, ok bool)
	// AcceptLoss lets Open start when the commit log's segment files do not
	// form one log (a segment missing between two present ones, or none left
	// while the checkpoint records data): the segments before the gap are set
	// aside and the log starts after it (commitlog.Options.AcceptLoss).
	// Without it Open refuses such a directory with an error naming the
	// files. Off by default; damage inside files never needs it.
	AcceptLoss bool
	// RecycleSegments is how many retired commit-log segment files are kept
	// and reused as new segments (commitlog.Options.RecycleSegments).
	// Default 1; negative disables recycling.
	RecycleSegments int
	// ScrubRate bounds the background scrubber's reading of the commit log,
	// in bytes per second (see Store.Scrub). Default 8 MiB/s: a 1 GiB segment
	// in about two minutes, at a cost that does not show in the benchmarks;
	// negative disables the scrubber.
	ScrubRate int64
	// ScrubInterval is the time from the start of one scrub pass to the start
	// of the next (passes run back to back when one takes longer). The first
	// pass starts a minute after Open. Default 1 h.
	ScrubInterval time.Duration
	// Replica opens the store as a replica of a master (a SLAVE broker's):
	// Put fails with ErrReplica, and the commit log grows only through
	// AppendReplicated (package ha). Everything else (dispatch, Get,
	// flushing by FlushMode, retention) works as on a master. Off by
	// default. It is the mode at Open only: SetReplica changes it, and
	// IsReplica reports the current one.
	Replica bool
	// SyncReplicas is how many replicas must acknowledge a message before
	// it is durable (WaitDurable, OnDurable, DurableOffset): 0 (the
	// default) for none, 1 for a SYNC_MASTER. A wait that needs replicas
	// fails with ErrReplicaNotAvailable when fewer are connected within
	// MaxReplicaGap of the message, and with ErrReplicaTimeout after
	// SyncFlushTimeout. It applies while the store is a master: a replica
	// (Replica, or SetReplica(true)) keeps it for when it is promoted, and
	// meanwhile its own durability is its flush alone (see SetReplica).
	SyncReplicas int
	// MaxReplicaGap is how far (in commit-log bytes) behind a message a
	// replica may be and still count as in sync for its wait (RocketMQ's
	// haMaxGapNotInSync). Default 256 MiB.
	MaxReplicaGap int64
	// scrubDelay is when the first pass starts after Open (tests shorten it).
	scrubDelay time.Duration
	// Logger receives recovery reports and dispatch errors. Default slog.Default().
	Logger *slog.Logger
	// FS is the file system every file operation of the store and its parts
	// goes through. Default vfs.Default (the operating system); tests wrap
	// it to inject failures.
	FS vfs.FS
}

func (o Options) withDefaults() (Options, error) {
	if o.Dir == "" {
		return o, errors.New("store: Options.Dir is required")
	}
	if o.SegmentSize == 0 {
		o.SegmentSize = 1 << 30
	}
	if o.SyncFlushTimeout <= 0 {
		o.SyncFlushTimeout = 5 * time.Second
	}
	if !o.StoreHost.IsValid() {
		o.StoreHost = netip.MustParseAddrPort("127.0.0.1:10911")
	}
	if o.MaxMessageSize == 0 {
		o.MaxMessageSize = 4 << 20
	}
	if o.MaxMessageSize < 0 || int64(o.MaxMessageSize)+(64<<10) > o.SegmentSize {
		return o, fmt.Errorf("store: max message size %d does not fit a %d-byte segment", o.MaxMessageSize, o.SegmentSize)
	}
	if o.CleanInterval == 0 {
		o.CleanInterval = 10 * time.Second
	}
	if o.TruncatedRetention <= 0 {
		o.TruncatedRetention = 7 * 24 * time.Hour
	}
	if o.TruncatedMaxBytes == 0 {
		o.TruncatedMaxBytes = 1 << 30
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = time.Second
	}
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = 10 * time.Second
	}
	if o.MaxDispatchLag == 0 {
		o.MaxDispatchLag = 16 << 20
	}
	if o.ScrubRate == 0 {
		o.ScrubRate = 8 << 20
	}
	if o.ScrubInterval <= 0 {
		o.ScrubInterval = time.Hour
	}
	if o.scrubDelay <= 0 {
		o.scrubDelay = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.SyncReplicas < 0 {
		return o, fmt.Errorf("store: SyncReplicas %d is negative", o.SyncReplicas)
	}
	if o.MaxReplicaGap <= 0 {
		o.MaxReplicaGap = 256 << 20
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	return o, nil
}

// FlushMode is the commit log's flush mode, re-exported so that callers of
// the store need not import the commit log.
type FlushMode = commitlog.FlushMode

// The flush modes (see commitlog.FlushAsync and commitlog.FlushSync).
const (
	FlushAsync = commitlog.FlushAsync
	FlushSync  = commitlog.FlushSync
)

// ParseFlushMode accepts "async"/"ASYNC_FLUSH" and "sync"/"SYNC_FLUSH".
func ParseFlushMode(s string) (FlushMode, error) { return commitlog.ParseFlushMode(s) }
