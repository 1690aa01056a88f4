package durable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/apogeemq/apogee/internal/vfs"
)

// MagicSize is the length of a Record's magic; CRCSize that of its checksum.
const (
	MagicSize = 8
	CRCSize   = 4
)

// ErrRecordClosed: Write after Close.
var ErrRecordClosed = errors.New("durable: record closed")

// Record is a small fixed-size file rewritten in place: magic | payload |
// CRC32 (see the package doc). Its methods are safe for concurrent use.
type Record struct {
	path  string
	magic string
	size  int // payload bytes

	mu  sync.Mutex
	f   vfs.File // nil after Close
	buf []byte   // the encoded record; under mu
}

// Size returns the size of a record file with a payload of payloadSize bytes.
func Size(payloadSize int) int { return MagicSize + payloadSize + CRCSize }

func checkMagic(magic string, payloadSize int) error {
	if len(magic) != MagicSize || payloadSize < 0 {
		return fmt.Errorf("durable: record magic %q must be %d bytes, payload %d not negative", magic, MagicSize, payloadSize)
	}
	return nil
}

// OpenRecord opens the record file at path, creating it (empty, its
// directory synced) if needed, and reads it. ok is false, with a nil error,
// when there is no valid record in it: a new or short file, another magic,
// or a CRC mismatch (a torn write). payload is a copy the caller owns. A
// read that fails for another reason than the file's end is an error.
func OpenRecord(fsys vfs.FS, path, magic string, payloadSize int) (r *Record, payload []byte, ok bool, err error) {
	if err := checkMagic(magic, payloadSize); err != nil {
		return nil, nil, false, err
	}
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		// A new file: its directory entry is synced before any record is
		// written to it, or a power loss could take the file, and every
		// record later synced into it, away.
		if f, err = fsys.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644); err == nil {
			if err = fsys.SyncDir(filepath.Dir(path)); err != nil {
				f.Close()
			}
		}
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("durable: open record: %w", err)
	}
	r = &Record{path: path, magic: magic, size: payloadSize, f: f, buf: make([]byte, Size(payloadSize))}
	payload, ok, err = r.read(f)
	if err != nil {
		f.Close()
		return nil, nil, false, err
	}
	return r, payload, ok, nil
}

// ReadRecord reads the record file at path without creating or changing
// it, for offline checks: ok is false when the file is missing or holds no
// valid record.
func ReadRecord(fsys vfs.FS, path, magic string, payloadSize int) (payload []byte, ok bool, err error) {
	if err := checkMagic(magic, payloadSize); err != nil {
		return nil, false, err
	}
	f, err := fsys.OpenFile(path, os.O_RDONLY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("durable: open record: %w", err)
	}
	defer f.Close()
	r := &Record{path: path, magic: magic, size: payloadSize}
	return r.read(f)
}

func (r *Record) read(f vfs.File) ([]byte, bool, error) {
	b := make([]byte, Size(r.size))
	n, err := f.ReadAt(b, 0)
	if n < len(b) {
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, false, fmt.Errorf("durable: read record %s: %w", r.path, err)
		}
		return nil, false, nil
	}
	end := MagicSize + r.size
	if string(b[:MagicSize]) != r.magic || crc32.ChecksumIEEE(b[:end]) != binary.BigEndian.Uint32(b[end:]) {
		return nil, false, nil
	}
	return b[MagicSize:end], true, nil
}

// Write stores payload (exactly the record's payload size) durably: one
// pwrite of the whole record at offset 0, then an fdatasync. After a failed
// Write the file holds the old record, the new one, or a torn one that
// reads as absent.
func (r *Record) Write(payload []byte) error {
	if len(payload) != r.size {
		return fmt.Errorf("durable: record %s: payload of %d bytes, want %d", r.path, len(payload), r.size)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return ErrRecordClosed
	}
	b := r.buf
	copy(b, r.magic)
	copy(b[MagicSize:], payload)
	end := MagicSize + r.size
	binary.BigEndian.PutUint32(b[end:], crc32.ChecksumIEEE(b[:end]))
	if _, err := r.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("durable: write record: %w", err)
	}
	if err := r.f.Datasync(); err != nil {
		return fmt.Errorf("durable: sync record: %w", err)
	}
	return nil
}

// Close closes the file. Later Writes return ErrRecordClosed.
func (r *Record) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	return err
}
