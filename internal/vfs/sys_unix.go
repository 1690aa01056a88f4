//go:build unix

package vfs

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// flock takes f's exclusive lock without waiting: ErrLocked when another
// open file holds it.
func flock(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == unix.EWOULDBLOCK {
			return ErrLocked
		}
		if err != unix.EINTR {
			return err
		}
	}
}

func diskUsage(path string) (float64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", path, err)
	}
	if st.Blocks == 0 {
		return 0, nil
	}
	return float64(st.Blocks-st.Bfree) / float64(st.Blocks), nil
}
