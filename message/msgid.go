package message

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"time"
)

const hexUpper = "0123456789ABCDEF"

func appendHexUpper(dst, b []byte) []byte {
	for _, c := range b {
		dst = append(dst, hexUpper[c>>4], hexUpper[c&0x0F])
	}
	return dst
}

// unhex returns the value of a hex digit, either case, or 0xFF.
func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10
	}
	return 0xFF
}

// decodeHex decodes len(dst)*2 hex digits of s into dst.
func decodeHex(dst []byte, s string) bool {
	for i := range dst {
		hi, lo := unhex(s[2*i]), unhex(s[2*i+1])
		if hi > 15 || lo > 15 {
			return false
		}
		dst[i] = hi<<4 | lo
	}
	return true
}

// Lengths of offset message ids in hex characters.
const (
	OffsetMsgIDLenV4 = 32 // IPv4 (4) + port (4) + offset (8) bytes
	OffsetMsgIDLenV6 = 56 // IPv6 (16) + port (4) + offset (8) bytes
)

// AppendOffsetMsgID appends the offset message id of a record stored at
// commitLogOffset by storeHost: hex, upper case, of the IP (4 bytes for IPv4
// and IPv4-mapped addresses, 16 for IPv6; an invalid address is 0.0.0.0:0),
// the port as an int32 and the offset as an int64 (32 or 56 characters).
// It does not allocate when dst has room.
func AppendOffsetMsgID(dst []byte, storeHost netip.AddrPort, commitLogOffset int64) []byte {
	var b [hostV6Size + 8]byte
	n := putHost(b[:], storeHost)
	binary.BigEndian.PutUint64(b[n:], uint64(commitLogOffset))
	return appendHexUpper(dst, b[:n+8])
}

// OffsetMsgID returns AppendOffsetMsgID as a string.
func OffsetMsgID(storeHost netip.AddrPort, commitLogOffset int64) string {
	var b [OffsetMsgIDLenV6]byte
	return string(AppendOffsetMsgID(b[:0], storeHost, commitLogOffset))
}

// ParseOffsetMsgID decodes an offset message id, in either case: 32
// characters for an IPv4 store host, 56 for IPv6. Anything else, non-hex
// digits, or a port outside 0..65535 is ErrBadMsgID.
func ParseOffsetMsgID(s string) (netip.AddrPort, int64, error) {
	var b [hostV6Size + 8]byte
	var ipLen int
	switch len(s) {
	case OffsetMsgIDLenV4:
		ipLen = 4
	case OffsetMsgIDLenV6:
		ipLen = 16
	default:
		return netip.AddrPort{}, 0, fmt.Errorf("message: offset msgId of %d chars: %w", len(s), ErrBadMsgID)
	}
	raw := b[:len(s)/2]
	if !decodeHex(raw, s) {
		return netip.AddrPort{}, 0, fmt.Errorf("message: offset msgId %q is not hex: %w", s, ErrBadMsgID)
	}
	port := binary.BigEndian.Uint32(raw[ipLen:])
	if port > 0xFFFF {
		return netip.AddrPort{}, 0, fmt.Errorf("message: offset msgId %q: port %d: %w", s, port, ErrBadMsgID)
	}
	var addr netip.Addr
	if ipLen == 4 {
		addr = netip.AddrFrom4([4]byte(raw[:4]))
	} else {
		addr = netip.AddrFrom16([16]byte(raw[:16]))
	}
	off := int64(binary.BigEndian.Uint64(raw[ipLen+4:]))
	return netip.AddrPortFrom(addr, uint16(port)), off, nil
}

// UniqIDGenerator makes producer unique ids (the UNIQ_KEY property) in the
// Java client's layout: IP (4 bytes, or 16 for IPv6) + pid int16 +
// class-loader hash int32 (here a random int32 fixed per generator, so two
// runs of one pid differ) + milliseconds since the start of the current
// month in local time, int32 + counter int16 (wrapping), as upper-case hex:
// 32 characters for IPv4, 56 for IPv6. Safe for concurrent use.
type UniqIDGenerator struct {
	prefix    [2 * (16 + 2 + 4)]byte // hex of IP + pid + class-loader hash
	prefixLen int
	now       func() time.Time // time.Now; replaced in tests

	mu         sync.Mutex
	monthStart int64 // ms, start of the current month
	monthEnd   int64 // ms, start of the next month
	counter    uint16
}

// NewUniqIDGenerator returns a generator for a client at ip (an invalid
// address counts as 0.0.0.0; IPv4-mapped addresses as IPv4) with process id
// pid (truncated to 16 bits, as Java does).
func NewUniqIDGenerator(ip netip.Addr, pid int) *UniqIDGenerator {
	var fp [16 + 2 + 4]byte
	n := 4
	switch {
	case hostIs6(ip):
		a := ip.As16()
		copy(fp[:], a[:])
		n = 16
	case ip.IsValid():
		a := ip.Unmap().As4()
		copy(fp[:], a[:])
	}
	binary.BigEndian.PutUint16(fp[n:], uint16(pid))
	_, _ = rand.Read(fp[n+2 : n+6]) // never fails (crypto/rand panics instead)
	g := &UniqIDGenerator{now: time.Now}
	g.prefixLen = len(appendHexUpper(g.prefix[:0], fp[:n+6]))
	return g
}

// AppendNext appends a new unique id to dst. It does not allocate when dst
// has room (56 bytes at most).
func (g *UniqIDGenerator) AppendNext(dst []byte) []byte {
	g.mu.Lock()
	t := g.now()
	ms := t.UnixMilli()
	if ms >= g.monthEnd || ms < g.monthStart {
		start := time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, t.Location())
		g.monthStart = start.UnixMilli()
		g.monthEnd = start.AddDate(0, 1, 0).UnixMilli()
	}
	elapsed := uint32(ms - g.monthStart)
	g.counter++
	c := g.counter
	g.mu.Unlock()

	var b [6]byte
	binary.BigEndian.PutUint32(b[:], elapsed)
	binary.BigEndian.PutUint16(b[4:], c)
	dst = append(dst, g.prefix[:g.prefixLen]...)
	return appendHexUpper(dst, b[:])
}

// Next returns AppendNext as a string.
func (g *UniqIDGenerator) Next() string {
	var b [OffsetMsgIDLenV6]byte
	return string(g.AppendNext(b[:0]))
}
