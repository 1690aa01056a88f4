package store

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"time"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
)

const (
	checkpointName = "checkpoint"
	abortName      = "abort"
	ckptMagic      = "APGSTCK1"
	ckptPayload    = 16
)

// storeCheckpoint records the dispatched offset that the consume queues and
// the index have been flushed through. Layout (big-endian), a durable.Record:
// magic "APGSTCK1" (8), dispatched offset (8), time ms (8), CRC32 of the
// first 24 bytes (4). It is rewritten in place with one pwrite and an
// fdatasync; a torn write fails the CRC and counts as no checkpoint
// (recovery then re-dispatches everything).
type storeCheckpoint struct {
	rec *durable.Record
}

func openStoreCheckpoint(fsys vfs.FS, dir string) (*storeCheckpoint, int64, bool, error) {
	rec, p, ok, err := durable.OpenRecord(fsys, filepath.Join(dir, checkpointName), ckptMagic, ckptPayload)
	if err != nil {
		return nil, 0, false, fmt.Errorf("store: checkpoint: %w", err)
	}
	c := &storeCheckpoint{rec: rec}
	if !ok {
		return c, 0, false, nil
	}
	return c, int64(binary.BigEndian.Uint64(p)), true, nil
}

func (c *storeCheckpoint) write(dispatched int64) error {
	var p [ckptPayload]byte
	binary.BigEndian.PutUint64(p[0:], uint64(dispatched))
	binary.BigEndian.PutUint64(p[8:], uint64(time.Now().UnixMilli()))
	if err := c.rec.Write(p[:]); err != nil {
		if err == durable.ErrRecordClosed {
			return ErrClosed
		}
		return fmt.Errorf("store: checkpoint: %w", err)
	}
	return nil
}

func (c *storeCheckpoint) close() { c.rec.Close() }
