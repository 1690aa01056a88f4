package commitlog

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/apogeemq/apogee/message"
)

// Torn records.
//
// A record's only checksum is its body's (BODYCRC, RocketMQ's format, which
// is also what pulls put on the wire, so it cannot grow another). Past the
// synced position a power loss may leave a record whose sectors are partly
// written: the body CRC catches a torn sector holding body bytes, and the
// length fields catch one holding the header's lengths, but a sector that
// holds only the end of the header, the topic or the properties is not
// covered. In a preallocated (fallocated) file the sectors a power loss
// tore read as zeros, and a zero byte is what no record ever holds in its
// topic or properties: Append refuses such records, and recovery (and a
// replica's AppendReplica) takes one for a torn record. A torn sector
// holding older bytes (a recycled segment's) or garbage that happens to be
// plausible is not caught: see docs/crash-safety.md.

// errTornFields: a record whose body is intact holds a zero byte in its
// topic or properties, or no topic: a sector of it was torn.
var errTornFields = errors.New("a zero byte in its topic or properties, or no topic (a torn sector)")

// checkFields applies the rule to a decoded record.
func checkFields(v message.View) error {
	t := v.Topic()
	if len(t) == 0 || bytes.IndexByte(t, 0) >= 0 || bytes.IndexByte(v.Properties(), 0) >= 0 {
		return errTornFields
	}
	return nil
}

// decodeStored validates the record at the start of buf as recovery does:
// the format (message.Decode with the body CRC) and the field rule above.
func decodeStored(buf []byte) (message.View, error) {
	v, err := message.Decode(buf, true)
	if err != nil {
		return v, err
	}
	return v, checkFields(v)
}

// CheckRecord reports whether rec, a whole record read at offset (see
// ReadRecord), is one recovery keeps: it decodes, its body CRC and the rule
// above hold, and its PHYSICALOFFSET is offset. A reader that reaches a
// record by its offset alone (a query by message id or by key) checks it:
// after a power loss the offset may lie inside a hole recovery made over a
// torn range, where ReadRecord, which looks only at the magic code and the
// size, can find a torn record. Readers through a consume-queue entry check
// the header against the entry instead.
func CheckRecord(rec []byte, offset int64) error {
	v, err := decodeStored(rec)
	if err == nil && v.PhysicalOffset() != offset {
		err = errors.New("it claims another offset")
	}
	if err != nil {
		return fmt.Errorf("%w: offset %d: %w", ErrNoRecord, offset, err)
	}
	return nil
}
