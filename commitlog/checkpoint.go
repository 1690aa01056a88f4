package commitlog

import (
	"encoding/binary"
	"fmt"
	"path/filepath"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
)

// checkpointName is the file beside the segments that records where recovery
// may start and whether the last shutdown was clean.
const checkpointName = "CHECKPOINT"

// Checkpoint layout (big-endian), a durable.Record rewritten in place with
// one pwrite and an fdatasync; a torn write fails the CRC and is treated as
// no checkpoint:
//
//	0  8  magic "APGCKPT1"
//	8  4  flags (bit 0: clean shutdown)
//	12 8  flushed offset
//	20 8  written offset (meaningful when clean)
//	28 8  time (ms)
//	36 4  CRC32 (IEEE) of bytes 0..35
const (
	checkpointMagic   = "APGCKPT1"
	checkpointPayload = 28
	flagClean         = 1
)

type checkpointState struct {
	clean   bool
	flushed int64
	written int64
	time    int64
}

type checkpoint struct {
	rec *durable.Record
}

func openCheckpoint(fsys vfs.FS, dir string) (*checkpoint, checkpointState, bool, error) {
	rec, p, ok, err := durable.OpenRecord(fsys, filepath.Join(dir, checkpointName), checkpointMagic, checkpointPayload)
	if err != nil {
		return nil, checkpointState{}, false, fmt.Errorf("commitlog: checkpoint: %w", err)
	}
	c := &checkpoint{rec: rec}
	if !ok {
		return c, checkpointState{}, false, nil
	}
	return c, decodeCheckpoint(p), true, nil
}

// readCheckpoint reads the checkpoint without creating or changing it.
func readCheckpoint(fsys vfs.FS, dir string) (checkpointState, bool, error) {
	p, ok, err := durable.ReadRecord(fsys, filepath.Join(dir, checkpointName), checkpointMagic, checkpointPayload)
	if err != nil {
		return checkpointState{}, false, fmt.Errorf("commitlog: checkpoint: %w", err)
	}
	if !ok {
		return checkpointState{}, false, nil
	}
	return decodeCheckpoint(p), true, nil
}

func decodeCheckpoint(p []byte) checkpointState {
	return checkpointState{
		clean:   binary.BigEndian.Uint32(p[0:])&flagClean != 0,
		flushed: int64(binary.BigEndian.Uint64(p[4:])),
		written: int64(binary.BigEndian.Uint64(p[12:])),
		time:    int64(binary.BigEndian.Uint64(p[20:])),
	}
}

func encodeCheckpoint(p []byte, st checkpointState) {
	var flags uint32
	if st.clean {
		flags |= flagClean
	}
	binary.BigEndian.PutUint32(p[0:], flags)
	binary.BigEndian.PutUint64(p[4:], uint64(st.flushed))
	binary.BigEndian.PutUint64(p[12:], uint64(st.written))
	binary.BigEndian.PutUint64(p[20:], uint64(st.time))
}

// write stores st durably.
func (c *checkpoint) write(st checkpointState) error {
	var p [checkpointPayload]byte
	encodeCheckpoint(p[:], st)
	if err := c.rec.Write(p[:]); err != nil {
		return fmt.Errorf("commitlog: checkpoint: %w", err)
	}
	return nil
}

func (c *checkpoint) close() { c.rec.Close() }
