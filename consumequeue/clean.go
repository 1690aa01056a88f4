package consumequeue

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"

	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
)

// cleanRecordName is the file Close writes beside the topic directories: the
// max offset of every queue at a clean shutdown. OpenSet reads it and removes
// it before anything else is written, so it describes the files only right
// after the Close that wrote it. With it, recovery is strict: a queue whose
// files disagree with it in any way is damaged (and rebuilt from the
// commitlog), where after a crash a torn tail is expected and cut.
//
// Layout (big-endian): magic "APGCQMX1", count uint32, then per queue topic
// length uint16, topic, queue id int32, max offset int64; CRC32 (IEEE) of
// everything before it.
const cleanRecordName = "MAXOFFSETS"

const cleanRecordMagic = "APGCQMX1"

// errNoCleanRecord: there is no usable clean-shutdown record.
var errNoCleanRecord = errors.New("consumequeue: no clean-shutdown record")

// writeCleanRecord stores every queue's max offset, atomically.
func (s *Set) writeCleanRecord(qs []*Queue) error {
	b := make([]byte, 0, 12+len(qs)*32)
	b = append(b, cleanRecordMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(qs)))
	for _, q := range qs {
		b = binary.BigEndian.AppendUint16(b, uint16(len(q.topic)))
		b = append(b, q.topic...)
		b = binary.BigEndian.AppendUint32(b, uint32(q.id))
		b = binary.BigEndian.AppendUint64(b, uint64(q.max.Load()))
	}
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	if err := durable.WriteFile(s.fs, filepath.Join(s.root, cleanRecordName), b); err != nil {
		return fmt.Errorf("consumequeue: clean record: %w", err)
	}
	return nil
}

// takeCleanRecord reads and removes the clean-shutdown record. A missing,
// torn or foreign file is errNoCleanRecord (recovery is then the crash path).
func (s *Set) takeCleanRecord() (map[queueKey]int64, error) {
	path := filepath.Join(s.root, cleanRecordName)
	b, err := vfs.ReadFile(s.fs, path)
	if !s.opts.ReadOnly {
		// Leftovers of an interrupted write (and of the fixed temporary
		// name earlier versions used).
		if err := durable.RemoveTemps(s.fs, path); err != nil {
			return nil, fmt.Errorf("consumequeue: %w", err)
		}
		if err := s.fs.Remove(path + ".tmp"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("consumequeue: %w", err)
		}
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, errNoCleanRecord
	}
	if err != nil {
		return nil, fmt.Errorf("consumequeue: read clean record: %w", err)
	}
	if s.opts.ReadOnly {
		rec, ok := decodeCleanRecord(b)
		if !ok {
			return nil, errNoCleanRecord
		}
		return rec, nil
	}
	if err := s.fs.Remove(path); err != nil {
		return nil, fmt.Errorf("consumequeue: remove clean record: %w", err)
	}
	if err := s.syncDir(s.root); err != nil {
		return nil, err
	}
	rec, ok := decodeCleanRecord(b)
	if !ok {
		return nil, errNoCleanRecord
	}
	return rec, nil
}

func decodeCleanRecord(b []byte) (map[queueKey]int64, bool) {
	be := binary.BigEndian
	if len(b) < 16 || string(b[:8]) != cleanRecordMagic || crc32.ChecksumIEEE(b[:len(b)-4]) != be.Uint32(b[len(b)-4:]) {
		return nil, false
	}
	n := be.Uint32(b[8:])
	body := b[12 : len(b)-4]
	if uint64(n)*14 > uint64(len(body)) {
		return nil, false
	}
	rec := make(map[queueKey]int64, n)
	for i := uint32(0); i < n; i++ {
		if len(body) < 2 {
			return nil, false
		}
		tl := int(be.Uint16(body))
		if len(body) < 2+tl+12 {
			return nil, false
		}
		k := queueKey{string(body[2 : 2+tl]), int32(be.Uint32(body[2+tl:]))}
		rec[k] = int64(be.Uint64(body[6+tl:]))
		body = body[14+tl:]
	}
	return rec, len(body) == 0
}

// checkCleanRecord marks damaged every queue that disagrees with the record:
// a max offset other than the recorded one, a recorded queue with no
// directory, a queue with entries the record does not know.
func (s *Set) checkCleanRecord(rec map[queueKey]int64) {
	for k, want := range rec {
		if _, bad := s.damaged[k]; bad {
			continue
		}
		q := s.queues[k]
		switch {
		case q == nil && want > 0:
			s.damaged[k] = fmt.Errorf("consumequeue: %s/%d: %w: no files, but the clean shutdown recorded %d entries", k.topic, k.id, ErrDamaged, want)
		case q != nil && q.max.Load() != want:
			s.damaged[k] = fmt.Errorf("consumequeue: %s/%d: %w: %d entries, but the clean shutdown recorded %d", k.topic, k.id, ErrDamaged, q.max.Load(), want)
			delete(s.queues, k)
		}
	}
	for k, q := range s.queues {
		if _, ok := rec[k]; !ok && q.max.Load() > 0 {
			s.damaged[k] = fmt.Errorf("consumequeue: %s/%d: %w: %d entries the clean shutdown did not record", k.topic, k.id, ErrDamaged, q.max.Load())
			delete(s.queues, k)
		}
	}
}
