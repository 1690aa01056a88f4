//go:build unix

package core

import "golang.org/x/sys/unix"

// diskSpace is the used fraction, total and free bytes of the file system
// holding dir (GET_BROKER_RUNTIME_INFO's commitLogDiskRatio and
// commitLogDirCapacity); zeros when it cannot be read.
func diskSpace(dir string) (ratio float64, total, free int64) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Blocks == 0 {
		return 0, 0, 0
	}
	bs := int64(st.Bsize)
	total, free = int64(st.Blocks)*bs, int64(st.Bavail)*bs
	return float64(st.Blocks-st.Bfree) / float64(st.Blocks), total, free
}
