package consumequeue

import (
	"fmt"
	"time"
)

// Options configure a Set. The zero value is valid: every field has a
// documented default.
type Options struct {
	// EntriesPerFile is the number of 20-byte entries per file. Default
	// 300,000 (6,000,000-byte files, as RocketMQ). It must not change for an
	// existing directory: files of another size are reported as damaged.
	// At most 1<<26.
	EntriesPerFile int

	// IdleUnmap: a mapped file not touched for this long is unmapped by Sweep.
	// Default 30s; negative disables unmapping by Sweep. The idle time is
	// measured between Sweep calls, so call Sweep more often than this.
	IdleUnmap time.Duration

	// RecoveryWindow is the number of entries before the end of a queue's
	// data that OpenSet validates entry by entry (torn entries, commitlog
	// offsets going backwards). Default 4096 (80 KiB read per queue).
	RecoveryWindow int

	// ReadOnly opens the set for offline verification: nothing is written
	// (no repair, no clean-shutdown record taken or written), every queue is
	// checked as strictly as after a clean shutdown, and what recovery would
	// cut or zero is reported in Damaged instead. Readers work; Append,
	// Repair and the creation of queues do not.
	ReadOnly bool
}

const (
	defaultEntriesPerFile = 300_000
	defaultIdleUnmap      = 30 * time.Second
	defaultRecoveryWindow = 4096
	maxEntriesPerFile     = 1 << 26
)

// withDefaults validates o and fills in the defaults.
func (o Options) withDefaults() (Options, error) {
	if o.EntriesPerFile == 0 {
		o.EntriesPerFile = defaultEntriesPerFile
	}
	if o.EntriesPerFile < 1 || o.EntriesPerFile > maxEntriesPerFile {
		return o, fmt.Errorf("consumequeue: EntriesPerFile %d not in [1, %d]", o.EntriesPerFile, maxEntriesPerFile)
	}
	if o.IdleUnmap == 0 {
		o.IdleUnmap = defaultIdleUnmap
	}
	if o.RecoveryWindow == 0 {
		o.RecoveryWindow = defaultRecoveryWindow
	}
	if o.RecoveryWindow < 1 {
		return o, fmt.Errorf("consumequeue: RecoveryWindow %d must be positive", o.RecoveryWindow)
	}
	return o, nil
}
