package message

import "errors"

// Sentinel errors. Decoders return them unwrapped so that decoding never
// allocates; encoders wrap them with context. Test with errors.Is.
var (
	// ErrTruncated: the buffer is shorter than the record header or than the
	// record's TOTALSIZE.
	ErrTruncated = errors.New("message: record truncated")
	// ErrBadMagic: the magic code is neither MagicV1 nor MagicV2 (nor blank).
	ErrBadMagic = errors.New("message: bad magic code")
	// ErrBadSize: TOTALSIZE or a variable length is inconsistent with the
	// record (negative, out of range, or the parts do not sum to TOTALSIZE).
	ErrBadSize = errors.New("message: inconsistent record size")
	// ErrBadCRC: the stored BODYCRC does not match the body.
	ErrBadCRC = errors.New("message: body CRC mismatch")
	// ErrBlank: the bytes are an end-of-segment blank marker, not a record.
	ErrBlank = errors.New("message: end-of-segment blank marker")
	// ErrHole: the bytes are a hole marker (damaged bytes set aside), not a record.
	ErrHole = errors.New("message: hole marker over damaged bytes")

	// ErrTopicTooLong: the topic does not fit the record's topic length field.
	ErrTopicTooLong = errors.New("message: topic too long")
	// ErrPropertiesTooLarge: the properties exceed MaxPropertiesSize bytes.
	ErrPropertiesTooLarge = errors.New("message: properties too large")
	// ErrBodyTooLarge: the record would exceed what a TOTALSIZE int32 can hold.
	ErrBodyTooLarge = errors.New("message: body too large")
	// ErrBadProperty: a property key or value misuses the separators 0x01 and
	// 0x02, or a key is empty.
	ErrBadProperty = errors.New("message: malformed property")

	// ErrBadMsgID: an offset message id of the wrong length or not hex.
	ErrBadMsgID = errors.New("message: malformed message id")
	// ErrBadBatch: a producer batch body whose entry sizes are inconsistent.
	ErrBadBatch = errors.New("message: malformed batch body")
)
