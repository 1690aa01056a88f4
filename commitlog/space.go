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

// diskUsage returns the used fraction of the file system holding dir.
func diskUsage(dir string) (float64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("commitlog: statfs %s: %w", dir, err)
	}
	if st.Blocks == 0 {
		return 0, nil
	}
	return float64(st.Blocks-st.Bfree) / float64(st.Blocks), nil
}
