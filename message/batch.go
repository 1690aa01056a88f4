package message

import (
	"encoding/binary"
	"fmt"
	"math"
)

// BatchEntryOverhead is the fixed size of a producer batch entry: TOTALSIZE,
// MAGIC, BODYCRC, FLAG, BODYLEN (4 each) and PROPLEN (2).
const BatchEntryOverhead = 4 + 4 + 4 + 4 + 4 + 2

// BatchEntrySize returns the encoded size of one batch entry.
func BatchEntrySize(body, props []byte) int {
	return BatchEntryOverhead + len(body) + len(props)
}

// AppendBatchEntry appends one entry of a producer batch body (the body of a
// SEND_BATCH_MESSAGE request): TOTALSIZE, MAGIC (0), BODYCRC (0), FLAG,
// BODYLEN + body, PROPLEN + props, as the Go client writes it.
//
// len(props) must not exceed MaxPropertiesSize and the entry must fit in an
// int32: violating that is a programming error and panics, since the format
// cannot represent it (validate with ValidateProperties first).
func AppendBatchEntry(dst []byte, flag int32, body, props []byte) []byte {
	n := BatchEntrySize(body, props)
	if len(props) > MaxPropertiesSize || n > math.MaxInt32 {
		panic(fmt.Sprintf("message: AppendBatchEntry: body %d / properties %d bytes do not fit the format", len(body), len(props)))
	}
	be := binary.BigEndian
	dst = be.AppendUint32(dst, uint32(n))
	dst = be.AppendUint32(dst, 0)
	dst = be.AppendUint32(dst, 0)
	dst = be.AppendUint32(dst, uint32(flag))
	dst = be.AppendUint32(dst, uint32(len(body)))
	dst = append(dst, body...)
	dst = be.AppendUint16(dst, uint16(len(props)))
	return append(dst, props...)
}

// ForEachBatchEntry walks a producer batch body and calls fn for each entry
// with slices aliasing batch. Every entry must be self-consistent: TOTALSIZE
// at least BatchEntryOverhead and within the rest of the batch, BODYLEN and
// PROPLEN non-negative and summing exactly to TOTALSIZE; otherwise it
// returns an error wrapping ErrBadBatch. The entry's MAGIC and BODYCRC are
// ignored (clients send 0; the broker computes the CRC). Entries before a
// bad one have already been passed to fn, so callers that need all-or-nothing
// should validate with a first pass whose fn does nothing. An error from fn
// stops the walk and is returned as is. An empty batch calls fn zero times.
// It never panics.
func ForEachBatchEntry(batch []byte, fn func(flag int32, body, props []byte) error) error {
	be := binary.BigEndian
	for pos := 0; pos < len(batch); {
		rest := batch[pos:]
		if len(rest) < BatchEntryOverhead {
			return fmt.Errorf("message: batch entry at byte %d: %d bytes left: %w", pos, len(rest), ErrBadBatch)
		}
		total := int64(int32(be.Uint32(rest)))
		if total < BatchEntryOverhead || total > int64(len(rest)) {
			return fmt.Errorf("message: batch entry at byte %d: size %d with %d bytes left: %w", pos, total, len(rest), ErrBadBatch)
		}
		ent := rest[:total]
		flag := int32(be.Uint32(ent[12:]))
		bodyLen := int64(int32(be.Uint32(ent[16:])))
		if bodyLen < 0 || bodyLen > total-BatchEntryOverhead {
			return fmt.Errorf("message: batch entry at byte %d: body length %d in %d: %w", pos, bodyLen, total, ErrBadBatch)
		}
		body := ent[20 : 20+bodyLen]
		propLen := int64(int16(be.Uint16(ent[20+bodyLen:])))
		if propLen < 0 || BatchEntryOverhead+bodyLen+propLen != total {
			return fmt.Errorf("message: batch entry at byte %d: properties length %d in %d: %w", pos, propLen, total, ErrBadBatch)
		}
		props := ent[22+bodyLen:]
		if err := fn(flag, body, props); err != nil {
			return err
		}
		pos += int(total)
	}
	return nil
}
