package store

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
)

// TestCheckpointFormatUnchanged reads a checkpoint laid out byte by byte as
// the store wrote it before internal/durable (magic, dispatched offset, time,
// CRC32 of the first 24 bytes), and checks that a new write has that layout.
func TestCheckpointFormatUnchanged(t *testing.T) {
	dir := t.TempDir()
	old := make([]byte, 28)
	copy(old, "APGSTCK1")
	binary.BigEndian.PutUint64(old[8:], 123456)
	binary.BigEndian.PutUint64(old[16:], 1_700_000_000_000)
	binary.BigEndian.PutUint32(old[24:], crc32.ChecksumIEEE(old[:24]))
	path := filepath.Join(dir, checkpointName)
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	c, dispatched, ok, err := openStoreCheckpoint(vfs.Default, dir)
	if err != nil || !ok || dispatched != 123456 {
		t.Fatalf("open an existing checkpoint: %d %v %v", dispatched, ok, err)
	}
	defer c.close()
	if err := c.write(777); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if len(got) != 28 || string(got[:8]) != "APGSTCK1" || binary.BigEndian.Uint64(got[8:]) != 777 ||
		!bytes.Equal(got[24:], binary.BigEndian.AppendUint32(nil, crc32.ChecksumIEEE(got[:24]))) {
		t.Fatalf("written checkpoint % x, not the old layout", got)
	}
}
