package protocol

import (
	"encoding/binary"
	"io"
	"math"
)

const (
	// DefaultMaxFrameSize is the Java broker's default frame limit
	// (com.rocketmq.remoting.frameMaxLength, 16 MiB).
	DefaultMaxFrameSize = 16 << 20

	// MaxHeaderLen is the largest header the 24-bit header length can describe.
	MaxHeaderLen = 1<<24 - 1

	// FramePrefixLen is the size of the length field plus the type/header-length field.
	FramePrefixLen = 8
)

// DecodeFrame decodes one frame into c. frame is everything after the 4-byte length
// field: the type/header-length int32, the header, then the body. c is reset first (its
// buffers are kept); c.Body aliases frame. Only whitespace may follow a JSON header
// object; a binary header may carry trailing bytes, which are ignored.
func DecodeFrame(frame []byte, c *Command) error {
	c.Reset()
	if len(frame) < 4 {
		return errFrame("frame shorter than its header length field")
	}
	tl := binary.BigEndian.Uint32(frame)
	typ := SerializeType(tl >> 24)
	hl := int(tl & 0xFFFFFF)
	if hl > len(frame)-4 {
		return errFrame("header length exceeds frame")
	}
	header := frame[4 : 4+hl]
	c.SerializeType = typ
	var err error
	switch typ {
	case SerializeJSON:
		err = decodeJSONHeader(header, c)
	case SerializeRocketMQ:
		err = decodeBinaryHeader(header, c)
	default:
		err = errHeader("unknown serialize type "+typ.String(), 0)
	}
	if err != nil {
		return err
	}
	if body := frame[4+hl:]; len(body) > 0 {
		c.Body = body
	}
	return nil
}

// AppendFrameHeader appends the length field, the type/header-length field and c's
// header (JSON or binary, per c.SerializeType) for a frame whose body is bodyLen bytes.
// The caller writes the body itself, for example as further buffers of a vectored write.
// On error dst is returned unchanged.
func AppendFrameHeader(dst []byte, c *Command, bodyLen int) ([]byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0, 0, 0, 0)
	var err error
	switch c.SerializeType {
	case SerializeJSON:
		dst = appendJSONHeader(dst, c)
	case SerializeRocketMQ:
		dst, err = appendBinaryHeader(dst, c)
	default:
		err = errHeader("unknown serialize type "+c.SerializeType.String(), -1)
	}
	if err != nil {
		return dst[:start], err
	}
	hl := len(dst) - start - FramePrefixLen
	if hl > MaxHeaderLen {
		return dst[:start], errHeader("header longer than 16 MiB", -1)
	}
	if bodyLen < 0 || int64(bodyLen) > math.MaxInt32-4-int64(hl) {
		return dst[:start], ErrFrameTooLarge
	}
	binary.BigEndian.PutUint32(dst[start:], uint32(4+hl+bodyLen))
	binary.BigEndian.PutUint32(dst[start+4:], uint32(c.SerializeType)<<24|uint32(hl))
	return dst, nil
}

// AppendFrame appends a whole frame: AppendFrameHeader followed by c.Body.
func AppendFrame(dst []byte, c *Command) ([]byte, error) {
	dst, err := AppendFrameHeader(dst, c, len(c.Body))
	if err != nil {
		return dst, err
	}
	return append(dst, c.Body...), nil
}

// ReadFrame reads one length-prefixed frame from r and returns it without its length
// field, ready for DecodeFrame. The frame is read into buf, which is grown (replaced)
// only if its capacity is too small; pass the previous result back as buf to reuse it.
// A length field above maxFrame (DefaultMaxFrameSize if maxFrame <= 0) or above
// math.MaxInt32 (negative as the protocol's int32) gives ErrFrameTooLarge, one below 4
// ErrBadFrame, both before anything is allocated. A clean end of input before the first byte
// gives io.EOF; one inside a frame gives io.ErrUnexpectedEOF.
func ReadFrame(r io.Reader, buf []byte, maxFrame int) ([]byte, error) {
	if maxFrame <= 0 {
		maxFrame = DefaultMaxFrameSize
	}
	if cap(buf) < 4 {
		buf = make([]byte, 0, 512)
	}
	lb := buf[:4]
	if _, err := io.ReadFull(r, lb); err != nil {
		return buf[:0], err
	}
	n := uint64(binary.BigEndian.Uint32(lb))
	if n > uint64(maxFrame) || n > math.MaxInt32 {
		return buf[:0], ErrFrameTooLarge
	}
	if n < 4 {
		return buf[:0], errFrame("length field smaller than 4")
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	frame := buf[:n]
	if _, err := io.ReadFull(r, frame); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return buf[:0], err
	}
	return frame, nil
}

type frameError string

func (e frameError) Error() string { return "protocol: malformed frame: " + string(e) }
func (e frameError) Unwrap() error { return ErrBadFrame }

func errFrame(msg string) error { return frameError(msg) }
