package store

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/apogeemq/apogee/mmap"
)

const (
	checkpointName = "checkpoint"
	abortName      = "abort"
	ckptMagic      = "APGSTCK1"
	ckptSize       = 28
)

// storeCheckpoint records the dispatched offset that the consume queues and
// the index have been flushed through. Layout (big-endian): magic (8),
// dispatched offset (8), time ms (8), CRC32 of the first 24 bytes (4). It is
// rewritten in place with one pwrite and an fdatasync; a torn write fails the
// CRC and counts as no checkpoint (recovery then re-dispatches everything).
type storeCheckpoint struct {
	mu sync.Mutex
	f  *os.File
}

func openStoreCheckpoint(dir string) (*storeCheckpoint, int64, bool, error) {
	f, err := os.OpenFile(filepath.Join(dir, checkpointName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, 0, false, fmt.Errorf("store: open checkpoint: %w", err)
	}
	c := &storeCheckpoint{f: f}
	var b [ckptSize]byte
	if n, _ := f.ReadAt(b[:], 0); n < ckptSize {
		return c, 0, false, nil
	}
	if string(b[:8]) != ckptMagic || crc32.ChecksumIEEE(b[:24]) != binary.BigEndian.Uint32(b[24:]) {
		return c, 0, false, nil
	}
	return c, int64(binary.BigEndian.Uint64(b[8:])), true, nil
}

func (c *storeCheckpoint) write(dispatched int64) error {
	var b [ckptSize]byte
	copy(b[:], ckptMagic)
	binary.BigEndian.PutUint64(b[8:], uint64(dispatched))
	binary.BigEndian.PutUint64(b[16:], uint64(time.Now().UnixMilli()))
	binary.BigEndian.PutUint32(b[24:], crc32.ChecksumIEEE(b[:24]))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f == nil {
		return ErrClosed
	}
	if _, err := c.f.WriteAt(b[:], 0); err != nil {
		return fmt.Errorf("store: write checkpoint: %w", err)
	}
	return mmap.Fdatasync(c.f)
}

func (c *storeCheckpoint) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.f != nil {
		c.f.Close()
		c.f = nil
	}
}
