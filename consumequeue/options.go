package consumequeue

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/apogeemq/apogee/internal/vfs"
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

	// MaxMappedFiles bounds how many queue files the set keeps mapped. A
	// process may hold only vm.max_map_count mappings (65,530 by default on
	// Linux), and the Go runtime dies when it cannot map more heap, so with
	// tens of thousands of active queues the set must not keep every file
	// mapped until Sweep finds it idle. Past the bound, the least recently
	// used files are unmapped (down to three quarters of it); they are mapped
	// again on their next use. Default: half of vm.max_map_count (32,765 by
	// default), at least 1,024. Raise vm.max_map_count for more active
	// queues than that.
	MaxMappedFiles int

	// ReadOnly opens the set for offline verification: nothing is written
	// (no repair, no clean-shutdown record taken or written), every queue is
	// checked as strictly as after a clean shutdown, and what recovery would
	// cut or zero is reported in Damaged instead. Readers work; Append,
	// Repair and the creation of queues do not.
	ReadOnly bool

	// FS is the file system every file operation goes through. Default
	// vfs.Default (the operating system); tests wrap it to inject failures.
	FS vfs.FS
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
	if o.MaxMappedFiles == 0 {
		o.MaxMappedFiles = max(1024, maxMapCount()/2)
	}
	if o.MaxMappedFiles < 1 {
		return o, fmt.Errorf("consumequeue: MaxMappedFiles %d must be positive", o.MaxMappedFiles)
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.RecoveryWindow < 1 {
		return o, fmt.Errorf("consumequeue: RecoveryWindow %d must be positive", o.RecoveryWindow)
	}
	return o, nil
}

// maxMapCount is the kernel's limit on a process's mappings
// (/proc/sys/vm/max_map_count), or Linux's default where it cannot be read.
func maxMapCount() int {
	b, err := os.ReadFile("/proc/sys/vm/max_map_count")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			return n
		}
	}
	return 65530
}
