package commitlog

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
)

// legacyCheckpoint lays a checkpoint out byte by byte as the layout in
// checkpoint.go documents it (and as the code before internal/durable wrote
// it), so that a change of format cannot go unnoticed.
func legacyCheckpoint(clean bool, flushed, written, ms int64) []byte {
	b := make([]byte, 40)
	copy(b, "APGCKPT1")
	if clean {
		binary.BigEndian.PutUint32(b[8:], 1)
	}
	binary.BigEndian.PutUint64(b[12:], uint64(flushed))
	binary.BigEndian.PutUint64(b[20:], uint64(written))
	binary.BigEndian.PutUint64(b[28:], uint64(ms))
	binary.BigEndian.PutUint32(b[36:], crc32.ChecksumIEEE(b[:36]))
	return b
}

func TestCheckpointFormatUnchanged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, checkpointName)
	if err := os.WriteFile(path, legacyCheckpoint(true, 4096, 8192, 1_700_000_000_000), 0o644); err != nil {
		t.Fatal(err)
	}
	want := checkpointState{clean: true, flushed: 4096, written: 8192, time: 1_700_000_000_000}
	if st, ok, err := readCheckpoint(vfs.Default, dir); err != nil || !ok || st != want {
		t.Fatalf("read an existing checkpoint: %+v %v %v", st, ok, err)
	}
	c, st, ok, err := openCheckpoint(vfs.Default, dir)
	if err != nil || !ok || st != want {
		t.Fatalf("open an existing checkpoint: %+v %v %v", st, ok, err)
	}
	defer c.close()
	if err := c.write(checkpointState{flushed: 100, written: 200, time: 300}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, legacyCheckpoint(false, 100, 200, 300)) {
		t.Fatalf("written checkpoint % x, want the documented layout", got)
	}
}
