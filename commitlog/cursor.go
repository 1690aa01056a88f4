package commitlog

import (
	"fmt"

	"github.com/apogeemq/apogee/message"
)

// Cursor walks the log's records in order, skipping blank and hole markers. It pins
// one segment at a time. A record returned by Next is valid until a call to
// Next moves to another segment (AtSegmentEnd tells in advance) or Close.
// A Cursor is used by one goroutine.
type Cursor struct {
	l   *Log
	seg *segment
	pos int64
}

// NewCursor returns a cursor positioned at offset, which must be a record
// boundary (a record's offset, a segment base, or the written position).
func (l *Log) NewCursor(offset int64) *Cursor { return &Cursor{l: l, pos: offset} }

// Offset is the position of the next record.
func (c *Cursor) Offset() int64 { return c.pos }

// Next returns the next record and its offset. It returns ErrOffsetNotWritten
// at the written position (call again after more appends) and
// ErrOffsetDeleted when retention removed the cursor's position.
func (c *Cursor) Next() ([]byte, int64, error) {
	for {
		w := c.l.written.Load()
		if c.pos >= w {
			return nil, c.pos, ErrOffsetNotWritten
		}
		if c.seg == nil || c.pos < c.seg.base || c.pos >= c.seg.end() {
			c.Close()
			seg, err := c.l.pin(c.pos)
			if err != nil {
				return nil, c.pos, err
			}
			c.seg = seg
		}
		if to, bad := c.l.holeAt(c.pos); bad {
			c.pos = to // read-only: a damaged range recovery would cover with a hole
			continue
		}
		buf := c.seg.data[c.pos-c.seg.base:]
		if size, ok := message.IsBlank(buf); ok && int64(size) == c.seg.end()-c.pos {
			c.pos = c.seg.end()
			continue
		}
		if size, ok := message.IsHole(buf); ok && c.pos+int64(size) <= min(w, c.seg.end()) {
			c.pos += int64(size)
			continue
		}
		size := int64(message.ReadTotalSize(buf))
		if size < message.MinRecordSize || c.pos+size > w {
			return nil, c.pos, fmt.Errorf("commitlog: corrupt record header at %d (size %d)", c.pos, size)
		}
		off := c.pos
		c.pos += size
		return buf[:size], off, nil
	}
}

// Back moves the cursor back to off, the offset of a record Next returned
// last (a reader that stops before a record it read: Next returns it
// again).
func (c *Cursor) Back(off int64) { c.pos = off }

// AtSegmentEnd reports whether the next call to Next would leave the pinned
// segment (or has none pinned yet), which ends the validity of the views it
// returned so far. A caller that keeps several views at once stops there.
func (c *Cursor) AtSegmentEnd() bool {
	if c.seg == nil || c.pos < c.seg.base || c.pos >= c.seg.end() {
		return true
	}
	if c.pos >= c.l.written.Load() {
		return false
	}
	size, ok := message.IsBlank(c.seg.data[c.pos-c.seg.base:])
	return ok && int64(size) == c.seg.end()-c.pos
}

// Close releases the pinned segment. The cursor may be used again afterwards.
func (c *Cursor) Close() {
	if c.seg != nil {
		c.seg.m.Release()
		c.seg = nil
	}
}
