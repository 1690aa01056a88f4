package mmap

import (
	"fmt"
	"os"
)

// fallocateByWrite reserves [off, off+n) by writing zeros over the part of the
// range past the file's current end. It is the fallback for file systems and
// platforms without fallocate; it is slow, and segments are created off the
// write path for that reason.
func fallocateByWrite(f *os.File, off, n int64) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("mmap: fallocate %s: %w", f.Name(), err)
	}
	start := max(off, st.Size())
	end := off + n
	if start >= end {
		return nil
	}
	return writeZeros(f, start, end)
}

// zeroByWrite overwrites [off, off+n) of f with zeros.
func zeroByWrite(f *os.File, off, n int64) error {
	if n <= 0 {
		return nil
	}
	return writeZeros(f, off, off+n)
}

func writeZeros(f *os.File, start, end int64) error {
	zeros := make([]byte, min(1<<20, end-start))
	for pos := start; pos < end; {
		chunk := min(int64(len(zeros)), end-pos)
		if _, err := f.WriteAt(zeros[:chunk], pos); err != nil {
			return fmt.Errorf("mmap: fallocate %s by write at %d: %w", f.Name(), pos, err)
		}
		pos += chunk
	}
	return nil
}
