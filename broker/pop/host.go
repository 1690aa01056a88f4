package pop

import (
	"log/slog"
	"time"

	"github.com/apogeemq/apogee/store"
)

// Host is what the POP manager needs from the broker that embeds it: the
// queues it reads, the consumer offsets it reads and commits, where dead
// letters go, and its state file. Every method is called with the manager's
// mutex held (see "Lock order" in the package doc), so none may call back
// into the Manager.
type Host interface {
	// MinOffset and MaxOffset return a queue's bounds: the first offset
	// still stored and the offset the next message will get (0 and 0 for a
	// queue that does not exist).
	MinOffset(topic string, queue int32) int64
	MaxOffset(topic string, queue int32) int64

	// Read passes to fn, in queue order, the records of (topic, queue) from
	// queue offset offset on: at most max of them, about maxBytes (at least
	// one when any matches), skipping those f rejects (f may be nil). rec is
	// valid only during the call. It returns the read's status (store.Found
	// when fn was called at least once; store.NoMatchedMessage when f
	// rejected every entry it scanned) and the offset the next read of the
	// queue should start at. The error is for failures of the store itself;
	// fn is not called when it is set.
	Read(topic string, queue int32, offset int64, max, maxBytes int, f store.Filter,
		fn func(rec []byte)) (status store.GetStatus, next int64, err error)

	// CommittedOffset returns the group's committed consumer offset of a
	// queue; CommitOffset commits one. A group's POP progress is committed
	// with every change, so that admin tools see it and a group new to POP
	// starts where its push or pull consumers stopped.
	CommittedOffset(group, topic string, queue int32) (int64, bool)
	CommitOffset(group, topic string, queue int32, offset int64)

	// DeadLetterTopic returns the name of the group's dead-letter topic
	// (%DLQ%<group>), creating it when it does not exist.
	DeadLetterTopic(group string) (string, error)
	// Put stores a message the manager built (a dead letter). It does not
	// wait for a flush, even in sync-flush mode.
	Put(m store.Message) error

	// LoadState reads the manager's state file and calls parse with its
	// contents; when the file is missing or parse fails, the host may try a
	// previous version of it and call parse again. parse does not keep its
	// argument. found is false when there is no state to load (a new data
	// directory); err is set when there is a file but no version of it
	// parses, or it cannot be read.
	LoadState(parse func(data []byte) error) (found bool, err error)
	// WriteState replaces the state file with data so that a crash leaves
	// the old or the new contents whole.
	WriteState(data []byte) error
}

// Config tunes a Manager.
type Config struct {
	// FlushInterval is how often the persister writes the state file when
	// it changed (the broker's ProgressFlushInterval). Default: 1 s.
	FlushInterval time.Duration
	// Logger receives the dead letters (INFO) and failed writes and puts
	// (ERROR). Default: slog.Default().
	Logger *slog.Logger
}

// DefaultFlushInterval is Config.FlushInterval's default.
const DefaultFlushInterval = time.Second
