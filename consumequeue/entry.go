package consumequeue

import (
	"encoding/binary"
	"errors"
)

// EntrySize is the size in bytes of one consume-queue entry.
const EntrySize = 20

// blankSize is the record size RocketMQ writes in the blank entries that pre-fill
// a queue created at a non-zero offset.
const blankSize = 0x7FFFFFFF

// Entry is one consume-queue entry: where a message of the queue lives in the
// commitlog. On disk it is 20 bytes, big-endian: CommitLogOffset (8), Size (4),
// TagCode (8).
type Entry struct {
	CommitLogOffset int64 // global byte position of the record in the commitlog
	Size            int32 // record size in bytes
	TagCode         int64 // hash of the TAGS property (0 without a tag); delivery time for the schedule topic
}

// End returns the commitlog position just past the record.
func (e Entry) End() int64 { return e.CommitLogOffset + int64(e.Size) }

// Sentinel errors callers branch on.
var (
	// ErrOutOfRange: the queue offset is below MinOffset or at/after MaxOffset.
	ErrOutOfRange = errors.New("consumequeue: offset out of range")
	// ErrGap: Append was given an offset beyond MaxOffset of a non-empty queue.
	ErrGap = errors.New("consumequeue: offset leaves a gap")
	// ErrConflict: Append was given an offset below MaxOffset whose stored entry differs.
	ErrConflict = errors.New("consumequeue: entry conflicts with the stored one")
	// ErrInvalidEntry: the entry cannot be stored (size <= 0, negative offset, the
	// reserved blank size, or a commitlog offset before the previous entry's end).
	ErrInvalidEntry = errors.New("consumequeue: invalid entry")
	// ErrDamaged: a queue's files are inconsistent (missing middle file, wrong
	// file size or name); drop the queue and rebuild it from the commitlog.
	ErrDamaged = errors.New("consumequeue: queue damaged")
	// ErrClosed: the set was closed or the queue dropped.
	ErrClosed = errors.New("consumequeue: closed")
	// ErrReadOnly: a write to a set opened with Options.ReadOnly.
	ErrReadOnly = errors.New("consumequeue: opened read-only")
)

// putEntry encodes e into b[:EntrySize].
func putEntry(b []byte, e Entry) {
	_ = b[EntrySize-1]
	binary.BigEndian.PutUint64(b[0:8], uint64(e.CommitLogOffset))
	binary.BigEndian.PutUint32(b[8:12], uint32(e.Size))
	binary.BigEndian.PutUint64(b[12:20], uint64(e.TagCode))
}

// getEntry decodes b[:EntrySize].
func getEntry(b []byte) Entry {
	_ = b[EntrySize-1]
	return Entry{
		CommitLogOffset: int64(binary.BigEndian.Uint64(b[0:8])),
		Size:            int32(binary.BigEndian.Uint32(b[8:12])),
		TagCode:         int64(binary.BigEndian.Uint64(b[12:20])),
	}
}

// kind classifies a stored entry.
type kind uint8

const (
	kindZero    kind = iota // all 20 bytes zero: never written
	kindBlank               // RocketMQ's pre-fill entry (0, 0x7FFFFFFF, 0)
	kindMessage             // a real entry
	kindBad                 // anything else: a torn or corrupt entry
)

var blankEntry = Entry{Size: blankSize}

func classify(e Entry) kind {
	switch {
	case e == Entry{}:
		return kindZero
	case e == blankEntry:
		return kindBlank
	case e.CommitLogOffset >= 0 && e.Size > 0 && e.Size != blankSize:
		return kindMessage
	}
	return kindBad
}

// validForAppend reports whether e may be appended: only message entries.
func validForAppend(e Entry) bool {
	return e.CommitLogOffset >= 0 && e.Size > 0 && e.Size != blankSize
}
