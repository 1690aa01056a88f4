//go:build !linux

package consumequeue

// Without SEEK_DATA/SEEK_HOLE, scrub reads the whole rest of the file.
const (
	seekData     = 0
	seekHole     = 0
	seekDataHole = false
)
