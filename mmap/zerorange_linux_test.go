package mmap

import (
	"syscall"
	"testing"
)

// The fallback of ZeroRange where FALLOC_FL_ZERO_RANGE is missing (tmpfs):
// the punched range reads as zeros through the mapping, the bytes around it
// are kept, and the range's blocks are reserved again.
func TestZeroByPunchThroughMapping(t *testing.T) {
	ps := PageSize()
	size := 4 * ps
	f := newFile(t, int64(size))
	m, err := Map(f, 0, size, ReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Release()
	b := m.Bytes()
	for i := range b {
		b[i] = 0xAB
	}
	if err := m.Sync(0, size); err != nil {
		t.Fatal(err)
	}
	blocks := func() int64 {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks
	}
	before := blocks()
	if err := zeroByPunch(f, int64(ps), int64(2*ps)); err != nil {
		t.Fatal(err)
	}
	for i, c := range b {
		inside := i >= ps && i < 3*ps
		if inside && c != 0 || !inside && c != 0xAB {
			t.Fatalf("byte %d = %#x after zeroing pages 1-2", i, c)
		}
	}
	if after := blocks(); after < before {
		t.Fatalf("the file holds %d blocks after the punch, %d before: the range was not reserved again", after, before)
	}
}
