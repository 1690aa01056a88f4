package index

import (
	"fmt"
	"math"

	"github.com/apogeemq/apogee/internal/vfs"
)

// Default sizes, RocketMQ's maxHashSlotNum and maxIndexNum: a file of
// 40 + 5,000,000*4 + 20,000,000*20 = 420,000,040 bytes.
const (
	DefaultSlotCount  = 5_000_000
	DefaultMaxEntries = 20_000_000
)

// Options configures an Index. The zero value selects RocketMQ's defaults.
// Both sizes are part of the file layout: reopening a directory with other
// values fails with ErrLayout.
type Options struct {
	// SlotCount is the number of hash slots (buckets) per file. A key goes to
	// slot keyHash % SlotCount. Default 5,000,000 (DefaultSlotCount).
	SlotCount int

	// MaxEntries is the number of 20-byte entry positions per file. Entry 0 is
	// never used and a file is full when its indexCount reaches MaxEntries, so
	// a file holds MaxEntries-1 entries, as in RocketMQ. The next Put after
	// that starts a new file. Default 20,000,000 (DefaultMaxEntries);
	// at least 2.
	MaxEntries int

	// FS is the file system every file operation goes through. Default
	// vfs.Default (the operating system); tests wrap it to inject failures.
	FS vfs.FS
}

// withDefaults returns o with zero fields replaced by their defaults, or an
// error wrapping ErrOptions if a field is out of range.
func (o Options) withDefaults() (Options, error) {
	if o.SlotCount == 0 {
		o.SlotCount = DefaultSlotCount
	}
	if o.MaxEntries == 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if err := o.validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}

// validate checks the ranges of a defaulted Options.
func (o Options) validate() error {
	if o.SlotCount < 1 || int64(o.SlotCount) > math.MaxInt32 {
		return fmt.Errorf("%w: SlotCount %d not in [1, %d]", ErrOptions, o.SlotCount, math.MaxInt32)
	}
	if o.MaxEntries < 2 || int64(o.MaxEntries) > math.MaxInt32 {
		return fmt.Errorf("%w: MaxEntries %d not in [2, %d]", ErrOptions, o.MaxEntries, math.MaxInt32)
	}
	size := uint64(headerSize) + uint64(o.SlotCount)*slotSize + uint64(o.MaxEntries)*entrySize
	if size > uint64(math.MaxInt) {
		return fmt.Errorf("%w: file size %d does not fit this platform", ErrOptions, size)
	}
	return nil
}

// layout holds the byte positions derived from the options.
type layout struct {
	slots     int // SlotCount
	entries   int // MaxEntries
	entryBase int // byte position of entry 0: 40 + slots*4
	size      int // file size: entryBase + entries*20
}

func newLayout(o Options) layout {
	base := headerSize + o.SlotCount*slotSize
	return layout{
		slots:     o.SlotCount,
		entries:   o.MaxEntries,
		entryBase: base,
		size:      base + o.MaxEntries*entrySize,
	}
}

// slotPos returns the byte position of slot s.
func (l *layout) slotPos(s int) int { return headerSize + s*slotSize }

// entryPos returns the byte position of entry n.
func (l *layout) entryPos(n int32) int { return l.entryBase + int(n)*entrySize }
