package message

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"net/netip"
	"slices"
)

// Magic codes.
const (
	MagicV1    uint32 = 0xDAA320A7 // record with a 1-byte topic length
	MagicV2    uint32 = 0xDAA320AB // record with a 2-byte topic length
	MagicBlank uint32 = 0xCBD43194 // end-of-segment blank marker
	// MagicHole marks a hole: bytes of the commit log that recovery or the
	// scrubber found damaged, copied aside and covered with this marker.
	// Apogee's own; RocketMQ has no such marker.
	MagicHole uint32 = 0xDEADF111

	// BlankHeaderSize is the size of the blank marker: TOTALSIZE (the bytes
	// left in the segment) and MagicBlank.
	BlankHeaderSize = 8
)

// Fixed field offsets of a record (v1 and v2). Later fields move with the
// host address families; use the View accessors or StoreTimestampOffset.
const (
	OffTotalSize      = 0
	OffMagic          = 4
	OffBodyCRC        = 8
	OffQueueID        = 12
	OffFlag           = 16
	OffQueueOffset    = 20
	OffPhysicalOffset = 28
	OffSysFlag        = 36
	OffBornTimestamp  = 40
	OffBornHost       = 48
)

const (
	hostV4Size = 4 + 4  // IPv4 + port int32
	hostV6Size = 16 + 4 // IPv6 + port int32

	// fixedV4Size is everything but the three variable parts (body, topic,
	// properties) and the hosts' growth, with 1-byte topic length.
	fixedV4Size = OffBornHost + hostV4Size + 8 + hostV4Size + 4 + 8 + 4 + 1 + 2
)

// MinRecordSize is the size of the smallest valid record: v1, IPv4 hosts,
// empty body, topic and properties.
const MinRecordSize = fixedV4Size // 91

// MaxTopicLength is the longest topic a v1 record can hold: its length is
// one unsigned byte. The Go client reads it unsigned; the Java broker reads
// it signed and writes v2 records above 127 bytes, so keep ordinary topics
// at 127 bytes or less (the Java topic-name limit) and use the extra room
// only for retry/DLQ topics.
const MaxTopicLength = 255

// Record is the input of the encoder. The host fields decide the IPv6 sysflag
// bits: AppendRecord sets or clears FlagBornHostV6 and FlagStoreHostV6 from
// the address families. An IPv4-mapped IPv6 address (::ffff:a.b.c.d, which
// net.TCPAddr.AddrPort often returns) is stored as IPv4, as Java would. An
// unset or invalid netip.AddrPort is stored as IPv4 0.0.0.0:0; an IPv6 zone
// is dropped.
type Record struct {
	Topic                     string
	QueueID                   int32
	Flag                      int32
	QueueOffset               int64
	PhysicalOffset            int64
	SysFlag                   int32
	BornTimestamp             int64
	BornHost                  netip.AddrPort
	StoreTimestamp            int64
	StoreHost                 netip.AddrPort
	ReconsumeTimes            int32
	PreparedTransactionOffset int64
	Body                      []byte // as stored (already compressed if FlagCompressed)
	Properties                []byte // encoded properties string (see AppendProperty), may be nil
}

// hostIs6 reports whether a is stored as a 16-byte IPv6 address.
func hostIs6(a netip.Addr) bool { return a.Is6() && !a.Is4In6() }

func hostSize(a netip.Addr) int {
	if hostIs6(a) {
		return hostV6Size
	}
	return hostV4Size
}

// hostSizeFlag returns the stored size of a host whose v6 bit is bit.
func hostSizeFlag(sysFlag, bit int32) int {
	if sysFlag&bit != 0 {
		return hostV6Size
	}
	return hostV4Size
}

// EncodedSize returns the exact number of bytes AppendRecord adds for r.
func EncodedSize(r *Record) int {
	return fixedV4Size - 2*hostV4Size +
		hostSize(r.BornHost.Addr()) + hostSize(r.StoreHost.Addr()) +
		len(r.Body) + len(r.Topic) + len(r.Properties)
}

// AppendRecord appends r encoded as a v1 record to dst and returns the
// extended slice. It computes BODYCRC (IEEE CRC-32 of Body & 0x7FFFFFFF) and
// derives the IPv6 sysflag bits from the hosts. It only rejects what the
// format cannot hold: a topic longer than MaxTopicLength (ErrTopicTooLong),
// properties longer than MaxPropertiesSize (ErrPropertiesTooLarge), and a
// record larger than math.MaxInt32 (ErrBodyTooLarge); size limits of policy
// (the broker's maximum message size) are the caller's. On error dst is
// returned unchanged. It does not allocate when cap(dst)-len(dst) is at least
// EncodedSize(r).
func AppendRecord(dst []byte, r *Record) ([]byte, error) {
	if len(r.Topic) > MaxTopicLength {
		return dst, fmt.Errorf("message: topic of %d bytes > %d: %w", len(r.Topic), MaxTopicLength, ErrTopicTooLong)
	}
	if len(r.Properties) > MaxPropertiesSize {
		return dst, fmt.Errorf("message: %d bytes of properties > %d: %w", len(r.Properties), MaxPropertiesSize, ErrPropertiesTooLarge)
	}
	n := EncodedSize(r)
	if n > math.MaxInt32 || len(r.Body) > math.MaxInt32 {
		return dst, fmt.Errorf("message: record of %d bytes > %d: %w", n, math.MaxInt32, ErrBodyTooLarge)
	}

	sysFlag := r.SysFlag &^ (FlagBornHostV6 | FlagStoreHostV6)
	if hostIs6(r.BornHost.Addr()) {
		sysFlag |= FlagBornHostV6
	}
	if hostIs6(r.StoreHost.Addr()) {
		sysFlag |= FlagStoreHostV6
	}

	start := len(dst)
	dst = slices.Grow(dst, n)[:start+n]
	b := dst[start:]

	be := binary.BigEndian
	be.PutUint32(b[OffTotalSize:], uint32(n))
	be.PutUint32(b[OffMagic:], MagicV1)
	be.PutUint32(b[OffBodyCRC:], BodyCRC(r.Body))
	be.PutUint32(b[OffQueueID:], uint32(r.QueueID))
	be.PutUint32(b[OffFlag:], uint32(r.Flag))
	be.PutUint64(b[OffQueueOffset:], uint64(r.QueueOffset))
	be.PutUint64(b[OffPhysicalOffset:], uint64(r.PhysicalOffset))
	be.PutUint32(b[OffSysFlag:], uint32(sysFlag))
	be.PutUint64(b[OffBornTimestamp:], uint64(r.BornTimestamp))
	p := OffBornHost
	p += putHost(b[p:], r.BornHost)
	be.PutUint64(b[p:], uint64(r.StoreTimestamp))
	p += 8
	p += putHost(b[p:], r.StoreHost)
	be.PutUint32(b[p:], uint32(r.ReconsumeTimes))
	p += 4
	be.PutUint64(b[p:], uint64(r.PreparedTransactionOffset))
	p += 8
	be.PutUint32(b[p:], uint32(len(r.Body)))
	p += 4
	p += copy(b[p:], r.Body)
	b[p] = byte(len(r.Topic))
	p++
	p += copy(b[p:], r.Topic)
	be.PutUint16(b[p:], uint16(len(r.Properties)))
	p += 2
	copy(b[p:], r.Properties)
	return dst, nil
}

// putHost writes IP (4 or 16 bytes) and port int32 and returns the size.
func putHost(b []byte, ap netip.AddrPort) int {
	a := ap.Addr()
	port := uint32(ap.Port())
	if hostIs6(a) {
		ip := a.As16()
		copy(b, ip[:])
		binary.BigEndian.PutUint32(b[16:], port)
		return hostV6Size
	}
	var ip [4]byte
	if a.IsValid() {
		ip = a.Unmap().As4()
	} else {
		port = 0
	}
	copy(b, ip[:])
	binary.BigEndian.PutUint32(b[4:], port)
	return hostV4Size
}

// BodyCRC returns the BODYCRC of body: IEEE CRC-32 & 0x7FFFFFFF (the Java
// broker's UtilAll.crc32).
func BodyCRC(body []byte) uint32 { return crc32.ChecksumIEEE(body) & 0x7FFFFFFF }

// StoreTimestampOffset returns the byte offset of STORETIMESTAMP in a record
// with this sysflag (it follows BORNHOST, whose size depends on
// FlagBornHostV6).
func StoreTimestampOffset(sysFlag int32) int {
	return OffBornHost + hostSizeFlag(sysFlag, FlagBornHostV6)
}

// SetQueueOffset patches QUEUEOFFSET in an encoded record.
func SetQueueOffset(rec []byte, v int64) {
	binary.BigEndian.PutUint64(rec[OffQueueOffset:], uint64(v))
}

// SetPhysicalOffset patches PHYSICALOFFSET in an encoded record.
func SetPhysicalOffset(rec []byte, v int64) {
	binary.BigEndian.PutUint64(rec[OffPhysicalOffset:], uint64(v))
}

// SetQueueID patches QUEUEID in an encoded record.
func SetQueueID(rec []byte, v int32) {
	binary.BigEndian.PutUint32(rec[OffQueueID:], uint32(v))
}

// SetStoreTimestamp patches STORETIMESTAMP in an encoded record; its position
// is read from the record's sysflag.
func SetStoreTimestamp(rec []byte, ms int64) {
	sysFlag := int32(binary.BigEndian.Uint32(rec[OffSysFlag:]))
	binary.BigEndian.PutUint64(rec[StoreTimestampOffset(sysFlag):], uint64(ms))
}

// ReadTotalSize returns the big-endian TOTALSIZE in the first 4 bytes of buf,
// or 0 if buf is shorter than 4 bytes.
func ReadTotalSize(buf []byte) int32 {
	if len(buf) < 4 {
		return 0
	}
	return int32(binary.BigEndian.Uint32(buf))
}

// IsBlank reports whether buf starts with an end-of-segment blank marker and
// returns its TOTALSIZE (the bytes from the marker to the segment's end). A
// marker whose size is below BlankHeaderSize is not a valid blank.
func IsBlank(buf []byte) (size int, ok bool) {
	if len(buf) < BlankHeaderSize || binary.BigEndian.Uint32(buf[OffMagic:]) != MagicBlank {
		return 0, false
	}
	size = int(int32(binary.BigEndian.Uint32(buf)))
	if size < BlankHeaderSize {
		return 0, false
	}
	return size, true
}

// PutBlank writes a blank marker announcing size bytes (the rest of the
// segment, marker included) at the start of b, which must hold
// BlankHeaderSize bytes.
func PutBlank(b []byte, size int32) {
	binary.BigEndian.PutUint32(b[OffTotalSize:], uint32(size))
	binary.BigEndian.PutUint32(b[OffMagic:], MagicBlank)
}

// IsHole reports whether buf starts with a hole marker (MagicHole) and
// returns its TOTALSIZE: the bytes from the marker to the next record. A
// marker whose size is below BlankHeaderSize is not a valid hole.
func IsHole(buf []byte) (size int, ok bool) {
	if len(buf) < BlankHeaderSize || binary.BigEndian.Uint32(buf[OffMagic:]) != MagicHole {
		return 0, false
	}
	size = int(int32(binary.BigEndian.Uint32(buf)))
	if size < BlankHeaderSize {
		return 0, false
	}
	return size, true
}

// PutHole writes a hole marker covering size bytes (marker included) at the
// start of b, which must hold BlankHeaderSize bytes.
func PutHole(b []byte, size int32) {
	binary.BigEndian.PutUint32(b[OffTotalSize:], uint32(size))
	binary.BigEndian.PutUint32(b[OffMagic:], MagicHole)
}

// AppendBlank appends a blank marker announcing size bytes.
func AppendBlank(dst []byte, size int32) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(size))
	return binary.BigEndian.AppendUint32(dst, MagicBlank)
}

// View is a zero-copy view of one encoded record. Its slices alias the
// buffer given to Decode (see the package doc). The zero View is empty and
// its accessors must not be called.
type View struct {
	buf          []byte // exactly the record
	storeTSOff   int32  // STORETIMESTAMP
	storeHostOff int32  // STOREHOST
	reconsumeOff int32  // RECONSUMETIMES (PREPARED TRANSACTION OFFSET follows)
	bodyOff      int32  // first byte of BODY
	topicOff     int32  // first byte of TOPIC
	propOff      int32  // first byte of PROPERTIES
	bodyLen      int32
	topicLen     int32
	propLen      int32
}

// Decode validates the record at the start of buf and returns a view of it.
// buf may hold more than the record; the record is buf[:TOTALSIZE]. Both v1
// and v2 magic codes are accepted. It checks the magic code, that TOTALSIZE
// lies within [MinRecordSize, len(buf)], that the hosts and every variable
// length fit and sum exactly to TOTALSIZE, and, if checkCRC, the body CRC.
//
// Errors (unwrapped sentinels, so Decode never allocates): ErrTruncated,
// ErrBadMagic, ErrBadSize, ErrBadCRC, ErrBlank for an end-of-segment
// marker and ErrHole for a hole marker.
// marker. Decode never panics.
func Decode(buf []byte, checkCRC bool) (View, error) {
	if len(buf) < 8 {
		return View{}, ErrTruncated
	}
	be := binary.BigEndian
	topicLenSize := 1
	switch be.Uint32(buf[OffMagic:]) {
	case MagicV1:
	case MagicV2:
		topicLenSize = 2
	case MagicBlank:
		return View{}, ErrBlank
	case MagicHole:
		return View{}, ErrHole
	default:
		return View{}, ErrBadMagic
	}
	total := int64(int32(be.Uint32(buf)))
	if total < int64(MinRecordSize+topicLenSize-1) {
		return View{}, ErrBadSize
	}
	if total > int64(len(buf)) {
		return View{}, ErrTruncated
	}
	rec := buf[:total]
	sysFlag := int32(be.Uint32(rec[OffSysFlag:]))
	storeTS := OffBornHost + hostSizeFlag(sysFlag, FlagBornHostV6)
	storeHost := storeTS + 8
	reconsume := storeHost + hostSizeFlag(sysFlag, FlagStoreHostV6)
	bodyLenOff := reconsume + 4 + 8
	// The smallest record with these hosts: header, BODYLEN, TOPICLEN, PROPLEN.
	if total < int64(bodyLenOff+4+topicLenSize+2) {
		return View{}, ErrBadSize
	}
	bodyLen := int64(int32(be.Uint32(rec[bodyLenOff:])))
	bodyOff := int64(bodyLenOff + 4)
	if bodyLen < 0 || bodyOff+bodyLen+int64(topicLenSize)+2 > total {
		return View{}, ErrBadSize
	}
	p := bodyOff + bodyLen
	var topicLen int64
	if topicLenSize == 1 {
		topicLen = int64(rec[p])
	} else {
		topicLen = int64(be.Uint16(rec[p:]))
	}
	topicOff := p + int64(topicLenSize)
	if topicOff+topicLen+2 > total {
		return View{}, ErrBadSize
	}
	p = topicOff + topicLen
	propLen := int64(int16(be.Uint16(rec[p:])))
	propOff := p + 2
	if propLen < 0 || propOff+propLen != total {
		return View{}, ErrBadSize
	}
	if checkCRC && be.Uint32(rec[OffBodyCRC:]) != BodyCRC(rec[bodyOff:bodyOff+bodyLen]) {
		return View{}, ErrBadCRC
	}
	return View{
		buf:          rec,
		storeTSOff:   int32(storeTS),
		storeHostOff: int32(storeHost),
		reconsumeOff: int32(reconsume),
		bodyOff:      int32(bodyOff),
		topicOff:     int32(topicOff),
		propOff:      int32(propOff),
		bodyLen:      int32(bodyLen),
		topicLen:     int32(topicLen),
		propLen:      int32(propLen),
	}, nil
}

func (v View) u32(off int) uint32 { return binary.BigEndian.Uint32(v.buf[off:]) }
func (v View) u64(off int) uint64 { return binary.BigEndian.Uint64(v.buf[off:]) }

// Bytes returns the whole encoded record.
func (v View) Bytes() []byte { return v.buf }

// TotalSize returns TOTALSIZE, the record's length in bytes.
func (v View) TotalSize() int { return len(v.buf) }

// Magic returns the magic code (MagicV1 or MagicV2).
func (v View) Magic() uint32 { return v.u32(OffMagic) }

// BodyCRC returns the stored BODYCRC.
func (v View) BodyCRC() int32 { return int32(v.u32(OffBodyCRC)) }

// QueueID returns QUEUEID.
func (v View) QueueID() int32 { return int32(v.u32(OffQueueID)) }

// Flag returns the user FLAG.
func (v View) Flag() int32 { return int32(v.u32(OffFlag)) }

// QueueOffset returns QUEUEOFFSET.
func (v View) QueueOffset() int64 { return int64(v.u64(OffQueueOffset)) }

// PhysicalOffset returns PHYSICALOFFSET, the record's commit-log offset.
func (v View) PhysicalOffset() int64 { return int64(v.u64(OffPhysicalOffset)) }

// SysFlag returns SYSFLAG.
func (v View) SysFlag() int32 { return int32(v.u32(OffSysFlag)) }

// BornTimestamp returns BORNTIMESTAMP (ms).
func (v View) BornTimestamp() int64 { return int64(v.u64(OffBornTimestamp)) }

// BornHost returns BORNHOST. A stored port outside 0..65535 is truncated to
// 16 bits; BornHostBytes has the raw field.
func (v View) BornHost() netip.AddrPort { return hostAt(v.buf[OffBornHost:v.storeTSOff]) }

// BornHostBytes returns the raw BORNHOST field: IP (4 or 16 bytes) and port.
func (v View) BornHostBytes() []byte { return v.buf[OffBornHost:v.storeTSOff] }

// StoreTimestamp returns STORETIMESTAMP (ms).
func (v View) StoreTimestamp() int64 { return int64(v.u64(int(v.storeTSOff))) }

// StoreHost returns STOREHOST (port truncated to 16 bits, as BornHost).
func (v View) StoreHost() netip.AddrPort { return hostAt(v.StoreHostBytes()) }

// StoreHostBytes returns the raw STOREHOST field: IP (4 or 16 bytes) and port.
func (v View) StoreHostBytes() []byte { return v.buf[v.storeHostOff:v.reconsumeOff] }

// ReconsumeTimes returns RECONSUMETIMES.
func (v View) ReconsumeTimes() int32 { return int32(v.u32(int(v.reconsumeOff))) }

// PreparedTransactionOffset returns PREPARED TRANSACTION OFFSET.
func (v View) PreparedTransactionOffset() int64 { return int64(v.u64(int(v.reconsumeOff) + 4)) }

// Body returns the body as stored (compressed if FlagCompressed is set).
func (v View) Body() []byte { return v.buf[v.bodyOff : v.bodyOff+v.bodyLen] }

// Topic returns the topic bytes.
func (v View) Topic() []byte { return v.buf[v.topicOff : v.topicOff+v.topicLen] }

// Properties returns the encoded properties string.
func (v View) Properties() []byte { return v.buf[v.propOff : v.propOff+v.propLen] }

// Property looks key up in the properties (see LookupProperty).
func (v View) Property(key string) ([]byte, bool) { return LookupProperty(v.Properties(), key) }

// Tags returns the TAGS property, or nil.
func (v View) Tags() []byte { t, _ := v.Property(PropTags); return t }

// Keys returns the KEYS property, or nil.
func (v View) Keys() []byte { k, _ := v.Property(PropKeys); return k }

// UniqKey returns the UNIQ_KEY property, or nil.
func (v View) UniqKey() []byte { u, _ := v.Property(PropUniqKey); return u }

// AppendOffsetMsgID appends the record's offset message id, computed from
// the raw STOREHOST field and PHYSICALOFFSET exactly as the Go client does.
func (v View) AppendOffsetMsgID(dst []byte) []byte {
	dst = appendHexUpper(dst, v.StoreHostBytes())
	var off [8]byte
	binary.BigEndian.PutUint64(off[:], v.u64(OffPhysicalOffset))
	return appendHexUpper(dst, off[:])
}

// hostAt decodes a raw host field of 8 or 20 bytes.
func hostAt(b []byte) netip.AddrPort {
	if len(b) == hostV6Size {
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[:16])), uint16(binary.BigEndian.Uint32(b[16:])))
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[:4])), uint16(binary.BigEndian.Uint32(b[4:])))
}

// ForEachRecord decodes the records packed back to back in buf (a pull
// response body, or a run of a commit-log segment without blank markers) and
// calls fn for each one, stopping at fn's first error, which it returns as
// is. A record that does not decode stops the walk with that Decode error
// wrapped with its byte offset; fn has already seen the records before it.
func ForEachRecord(buf []byte, checkCRC bool, fn func(v View) error) error {
	for pos := 0; pos < len(buf); {
		v, err := Decode(buf[pos:], checkCRC)
		if err != nil {
			return fmt.Errorf("message: record at byte %d: %w", pos, err)
		}
		if err := fn(v); err != nil {
			return err
		}
		pos += v.TotalSize()
	}
	return nil
}
