package ha

import (
	"encoding/binary"
	"time"
)

// The wire format (RocketMQ's classic HA protocol, big-endian).
const (
	// ReportSize is the size of a slave's report: the offset below which
	// it holds (and acknowledges) the whole log.
	ReportSize = 8
	// HeaderSize is the size of a frame's header: the offset of the body's
	// first byte in the master's commit log (8) and the body's length (4).
	HeaderSize = 12
	// MaxFrameBody bounds a frame's body on the slave's side: a larger
	// length is a protocol error (RocketMQ's masters send at most 32 KiB,
	// Apogee's MasterOptions.BatchSize).
	MaxFrameBody = 64 << 20
)

// Defaults shared by both sides.
const (
	// DefaultHeartbeatInterval: the master sends an empty frame, and the
	// slave a report, after this long without sending anything (RocketMQ's
	// haSendHeartbeatInterval).
	DefaultHeartbeatInterval = 5 * time.Second
	// DefaultHousekeepingInterval: a side that has read nothing from the
	// other for this long closes the connection (RocketMQ's
	// haHousekeepingInterval).
	DefaultHousekeepingInterval = 20 * time.Second
	// DefaultBatchSize bounds a frame's body on the master's side.
	DefaultBatchSize = 1 << 20
)

func putHeader(b *[HeaderSize]byte, off int64, n int) {
	binary.BigEndian.PutUint64(b[0:], uint64(off))
	binary.BigEndian.PutUint32(b[8:], uint32(n))
}

func readHeader(b []byte) (off int64, n int64) {
	return int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint32(b[8:]))
}
