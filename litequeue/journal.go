package litequeue

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
)

// Journal record kinds.
const (
	recCreate = 'C' // id, gen, parent, name
	recDelete = 'D' // id, gen, parent, name (id noBlock: no slot, offsets only)
	recOffset = 'O' // group, parent, name, offset
)

// maxRecord bounds a journal record's payload (three names and numbers).
const maxRecord = 3*(2+MaxNameLen) + 32

// appendRecord appends one framed record (length, CRC-32C, payload) built
// by fill to dst.
func appendRecord(dst []byte, fill func([]byte) []byte) []byte {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	dst = fill(dst)
	p := dst[start+8:]
	binary.BigEndian.PutUint32(dst[start:], uint32(len(p)))
	binary.BigEndian.PutUint32(dst[start+4:], crc32.Checksum(p, castagnoli))
	return dst
}

func appendStr(dst []byte, s []byte) []byte {
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(s)))
	return append(dst, s...)
}

func appendCreate(dst []byte, kind byte, id, gen uint32, parent, name []byte) []byte {
	return appendRecord(dst, func(b []byte) []byte {
		b = append(b, kind)
		b = binary.BigEndian.AppendUint32(b, id)
		b = binary.BigEndian.AppendUint32(b, gen)
		b = appendStr(b, parent)
		return appendStr(b, name)
	})
}

func appendOffset(dst []byte, k offKey, off int64) []byte {
	return appendRecord(dst, func(b []byte) []byte {
		b = append(b, recOffset)
		b = appendStr(b, []byte(k.group))
		b = appendStr(b, []byte(k.parent))
		b = appendStr(b, []byte(k.lite))
		return binary.BigEndian.AppendUint64(b, uint64(off))
	})
}

// record is a decoded journal record.
type record struct {
	kind                byte
	id, gen             uint32
	group, parent, name []byte
	offset              int64
}

var errBadRecord = errors.New("litequeue: bad journal record")

// nextRecord decodes the record at the start of b; n is its framed size.
func nextRecord(b []byte) (r record, n int, err error) {
	if len(b) < 8 {
		return r, 0, errBadRecord
	}
	size := int(binary.BigEndian.Uint32(b))
	if size < 1 || size > maxRecord || 8+size > len(b) {
		return r, 0, errBadRecord
	}
	p := b[8 : 8+size]
	if crc32.Checksum(p, castagnoli) != binary.BigEndian.Uint32(b[4:]) {
		return r, 0, errBadRecord
	}
	d := decoder{b: p[1:]}
	r.kind = p[0]
	switch r.kind {
	case recCreate, recDelete:
		r.id, r.gen = d.u32(), d.u32()
		r.parent, r.name = d.str(), d.str()
	case recOffset:
		r.group, r.parent, r.name = d.str(), d.str(), d.str()
		r.offset = int64(d.u64())
	default:
		return r, 0, errBadRecord
	}
	if d.bad || len(d.b) != 0 {
		return r, 0, errBadRecord
	}
	return r, 8 + size, nil
}

// decoder reads big-endian fields with a sticky failure.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) u32() uint32 {
	if len(d.b) < 4 {
		d.bad = true
		return 0
	}
	v := binary.BigEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *decoder) u64() uint64 {
	if len(d.b) < 8 {
		d.bad = true
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) str() []byte {
	if len(d.b) < 2 {
		d.bad = true
		return nil
	}
	n := int(binary.BigEndian.Uint16(d.b))
	if len(d.b) < 2+n {
		d.bad = true
		return nil
	}
	s := d.b[2 : 2+n]
	d.b = d.b[2+n:]
	return s
}
