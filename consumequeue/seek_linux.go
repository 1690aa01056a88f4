//go:build linux

package consumequeue

// lseek whence values that find data and holes (Linux).
const (
	seekData     = 3
	seekHole     = 4
	seekDataHole = true
)
