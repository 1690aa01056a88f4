package commitlog

import "errors"

var (
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("commitlog: closed")
	// ErrOffsetNotWritten: a read at or past the written position.
	ErrOffsetNotWritten = errors.New("commitlog: offset not written yet")
	// ErrOffsetDeleted: a read below the minimum offset (retention removed it).
	ErrOffsetDeleted = errors.New("commitlog: offset below the log's minimum (deleted)")
	// ErrNoRecord: ReadRecord found no record at the offset (a blank or hole
	// marker, or bytes that are not a record header).
	ErrNoRecord = errors.New("commitlog: no record at offset")
	// ErrRecordTooLarge: a record or batch that cannot fit in one segment.
	ErrRecordTooLarge = errors.New("commitlog: record or batch larger than a segment allows")
	// ErrBadBatch: the bytes passed to Append are not a sequence of whole records.
	ErrBadBatch = errors.New("commitlog: malformed batch")
	// ErrDiskFull: a segment could not be allocated for lack of space. The log is
	// unchanged; appends succeed again once space returns.
	ErrDiskFull = errors.New("commitlog: disk full")
	// ErrFlushTimeout: WaitFlushed gave up after Options.SyncFlushTimeout. The
	// record is written and may still become durable.
	ErrFlushTimeout = errors.New("commitlog: flush timeout")
	// ErrLogFailed wraps the first failed sync. It is sticky: after it nobody
	// knows what reached the disk, so every later append and wait fails.
	ErrLogFailed = errors.New("commitlog: log failed")
)
