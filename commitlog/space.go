package commitlog

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// classifySpace marks an out-of-space error with ErrDiskFull so callers can
// branch on it while the cause stays visible.
func classifySpace(err error) error {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return fmt.Errorf("%w: %w", ErrDiskFull, err)
	}
	return err
}
