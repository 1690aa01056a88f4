package protocol

import (
	"encoding/binary"
	"math"
)

// binaryFixedLen is the fixed part of a ROCKETMQ binary header: code(2) language(1)
// version(2) opaque(4) flag(4) remarkLen(4) extLen(4).
const binaryFixedLen = 21

// appendBinaryHeader appends c's header in the ROCKETMQ binary encoding
// (RocketMQSerializable): code int16, language byte, version int16, opaque int32,
// flag int32, remarkLen int32 + remark, extLen int32 + entries of
// (keyLen int16, key, valueLen int32, value).
func appendBinaryHeader(dst []byte, c *Command) ([]byte, error) {
	if c.Code < math.MinInt16 || c.Code > math.MaxInt16 {
		return dst, errHeader("code does not fit the binary header's int16", -1)
	}
	if c.Version < math.MinInt16 || c.Version > math.MaxInt16 {
		return dst, errHeader("version does not fit the binary header's int16", -1)
	}
	if len(c.Remark) > math.MaxInt32 {
		return dst, errHeader("remark too long", -1)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(int16(c.Code)))
	dst = append(dst, byte(c.Language))
	dst = binary.BigEndian.AppendUint16(dst, uint16(int16(c.Version)))
	dst = binary.BigEndian.AppendUint32(dst, uint32(c.Opaque))
	dst = binary.BigEndian.AppendUint32(dst, uint32(c.Flag))
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(c.Remark)))
	dst = append(dst, c.Remark...)
	lenAt := len(dst)
	dst = append(dst, 0, 0, 0, 0)
	for i := range c.Ext.ents {
		k, v := c.Ext.At(i)
		if len(k) > math.MaxInt16 {
			return dst, errHeader("extFields key longer than 32767 bytes", -1)
		}
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(k)))
		dst = append(dst, k...)
		dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
		dst = append(dst, v...)
	}
	extLen := len(dst) - lenAt - 4
	if extLen > math.MaxInt32 {
		return dst, errHeader("extFields too long", -1)
	}
	binary.BigEndian.PutUint32(dst[lenAt:], uint32(extLen))
	return dst, nil
}

// decodeBinaryHeader parses a ROCKETMQ binary header into c (reset except for buffers).
// Negative or overlong lengths are errors; bytes after the ext section are ignored, as
// the Java decoder does.
func decodeBinaryHeader(h []byte, c *Command) error {
	if len(h) < binaryFixedLen {
		return errHeader("binary header shorter than 21 bytes", len(h))
	}
	c.Code = int32(int16(binary.BigEndian.Uint16(h[0:])))
	c.Language = Language(h[2])
	c.Version = int32(int16(binary.BigEndian.Uint16(h[3:])))
	c.Opaque = int32(binary.BigEndian.Uint32(h[5:]))
	c.Flag = int32(binary.BigEndian.Uint32(h[9:]))
	p := 13
	rl := int64(int32(binary.BigEndian.Uint32(h[p:])))
	p += 4
	if rl < 0 || rl > int64(len(h)-p-4) {
		return errHeader("remark length out of range", 13)
	}
	if rl > 0 {
		c.remark = append(c.remark[:0], h[p:p+int(rl)]...)
		c.Remark = c.remark
		p += int(rl)
	}
	el := int64(int32(binary.BigEndian.Uint32(h[p:])))
	if el < 0 || el > int64(len(h)-p-4) {
		return errHeader("extFields length out of range", p)
	}
	p += 4
	ext := h[p : p+int(el)]
	for q := 0; q < len(ext); {
		if len(ext)-q < 2 {
			return errHeader("truncated extFields key length", p+q)
		}
		kl := int(int16(binary.BigEndian.Uint16(ext[q:])))
		q += 2
		if kl < 0 || kl > len(ext)-q-4 {
			return errHeader("extFields key length out of range", p+q-2)
		}
		k := ext[q : q+kl]
		q += kl
		vl := int64(int32(binary.BigEndian.Uint32(ext[q:])))
		q += 4
		if vl < 0 || vl > int64(len(ext)-q) {
			return errHeader("extFields value length out of range", p+q-4)
		}
		addPair(&c.Ext, k, ext[q:q+int(vl)])
		q += int(vl)
	}
	return nil
}
