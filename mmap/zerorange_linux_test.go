package mmap

import (
	"os"
	"syscall"
	"testing"
)

// The fallback of ZeroRange where FALLOC_FL_ZERO_RANGE is missing (tmpfs):
// the punched range reads as zeros through the mapping, the bytes around it
// are kept, and the range's blocks are reserved again.
func TestZeroByPunchThroughMapping(t *testing.T) {
	var before int64
	f := zeroPagesOneAndTwo(t, func(f *os.File, off, n int64) error {
		before = blocks(t, f)
		return zeroByPunch(f, off, n)
	})
	if after := blocks(t, f); after < before {
		t.Fatalf("the file holds %d blocks after the punch, %d before: the range was not reserved again", after, before)
	}
}

func blocks(t *testing.T, f *os.File) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks
}
