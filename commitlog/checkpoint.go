package commitlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"

	"github.com/apogeemq/apogee/mmap"
)

// checkpointName is the file beside the segments that records where recovery
// may start and whether the last shutdown was clean.
const checkpointName = "CHECKPOINT"

// Checkpoint layout (big-endian), rewritten in place with one pwrite and an
// fdatasync; a torn write fails the CRC and is treated as no checkpoint:
//
//	0  8  magic "APGCKPT1"
//	8  4  flags (bit 0: clean shutdown)
//	12 8  flushed offset
//	20 8  written offset (meaningful when clean)
//	28 8  time (ms)
//	36 4  CRC32 (IEEE) of bytes 0..35
const (
	checkpointMagic = "APGCKPT1"
	checkpointSize  = 40
	flagClean       = 1
)

type checkpointState struct {
	clean   bool
	flushed int64
	written int64
	time    int64
}

type checkpoint struct {
	mu sync.Mutex
	f  *os.File
}

func openCheckpoint(dir string) (*checkpoint, checkpointState, bool, error) {
	f, err := os.OpenFile(filepath.Join(dir, checkpointName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, checkpointState{}, false, fmt.Errorf("commitlog: open checkpoint: %w", err)
	}
	var b [checkpointSize]byte
	n, err := f.ReadAt(b[:], 0)
	c := &checkpoint{f: f}
	if n < checkpointSize {
		return c, checkpointState{}, false, nil
	}
	if err != nil {
		return c, checkpointState{}, false, nil
	}
	st, ok := decodeCheckpoint(b[:])
	return c, st, ok, nil
}

func decodeCheckpoint(b []byte) (checkpointState, bool) {
	if string(b[:8]) != checkpointMagic || crc32.ChecksumIEEE(b[:36]) != binary.BigEndian.Uint32(b[36:]) {
		return checkpointState{}, false
	}
	return checkpointState{
		clean:   binary.BigEndian.Uint32(b[8:])&flagClean != 0,
		flushed: int64(binary.BigEndian.Uint64(b[12:])),
		written: int64(binary.BigEndian.Uint64(b[20:])),
		time:    int64(binary.BigEndian.Uint64(b[28:])),
	}, true
}

func encodeCheckpoint(b []byte, st checkpointState) {
	copy(b, checkpointMagic)
	var flags uint32
	if st.clean {
		flags |= flagClean
	}
	binary.BigEndian.PutUint32(b[8:], flags)
	binary.BigEndian.PutUint64(b[12:], uint64(st.flushed))
	binary.BigEndian.PutUint64(b[20:], uint64(st.written))
	binary.BigEndian.PutUint64(b[28:], uint64(st.time))
	binary.BigEndian.PutUint32(b[36:], crc32.ChecksumIEEE(b[:36]))
}

var errCheckpointClosed = errors.New("commitlog: checkpoint closed")

// write stores st durably.
func (c *checkpoint) write(st checkpointState) error {
	var b [checkpointSize]byte
	encodeCheckpoint(b[:], st)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return errCheckpointClosed
	}
	if _, err := c.f.WriteAt(b[:], 0); err != nil {
		return fmt.Errorf("commitlog: write checkpoint: %w", err)
	}
	return mmap.Fdatasync(c.f)
}

func (c *checkpoint) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
}
