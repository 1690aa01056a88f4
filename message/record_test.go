package message

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// unhexT decodes hex with spaces and newlines for readability.
func unhexT(t testing.TB, s string) []byte {
	t.Helper()
	s = strings.Join(strings.Fields(s), "")
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatalf("bad golden hex: %v", err)
	}
	return b
}

var (
	hostV4   = netip.MustParseAddrPort("10.0.0.1:1234")
	storeV4  = netip.MustParseAddrPort("127.0.0.1:10911")
	hostV6   = netip.MustParseAddrPort("[2001:db8::1]:1234")
	storeV6  = netip.MustParseAddrPort("[fe80::abcd]:10911")
	mapped4  = netip.AddrPortFrom(netip.MustParseAddr("::ffff:10.0.0.1"), 1234)
	baseTS   = int64(0x0102030405060708)
	storeTS  = int64(0x1112131415161718)
	zeroHost = netip.AddrPort{}
)

func baseRecord() Record {
	return Record{
		Topic: "T", QueueID: 1, Flag: 2, QueueOffset: 3, PhysicalOffset: 4,
		BornTimestamp: baseTS, BornHost: hostV4, StoreTimestamp: storeTS, StoreHost: storeV4,
		ReconsumeTimes: 5, PreparedTransactionOffset: 6, Body: []byte("hi"),
	}
}

func TestAppendRecordGolden(t *testing.T) {
	v6born := baseRecord()
	v6born.BornHost = hostV6
	v6born.SysFlag = TxPreparedType
	v6born.Body = nil

	withProps := baseRecord()
	withProps.Topic = "TopicTest"
	withProps.Body = []byte("x")
	withProps.SysFlag = FlagBornHostV6 | FlagStoreHostV6 // wrong bits: cleared by the encoder
	withProps.Properties = AppendProperty(AppendProperty(nil, PropTags, "TagA"), PropKeys, "k1")

	mapped := baseRecord()
	mapped.BornHost = mapped4

	tests := []struct {
		name string
		rec  Record
		want string
	}{
		{"ipv4", baseRecord(), `
			0000005E DAA320A7 58932AAC 00000001 00000002
			0000000000000003 0000000000000004 00000000 0102030405060708
			0A000001 000004D2
			1112131415161718
			7F000001 00002A9F
			00000005 0000000000000006
			00000002 6869
			01 54
			0000`},
		{"ipv6-born-empty-body", v6born, `
			00000068 DAA320A7 00000000 00000001 00000002
			0000000000000003 0000000000000004 00000014 0102030405060708
			20010DB8000000000000000000000001 000004D2
			1112131415161718
			7F000001 00002A9F
			00000005 0000000000000006
			00000000
			01 54
			0000`},
		{"properties", withProps, `
			00000077 DAA320A7 0CDC1683 00000001 00000002
			0000000000000003 0000000000000004 00000000 0102030405060708
			0A000001 000004D2
			1112131415161718
			7F000001 00002A9F
			00000005 0000000000000006
			00000001 78
			09 546F70696354657374
			0012 54414753 01 54616741 02 4B455953 01 6B31 02`},
		{"ipv4-mapped-stored-as-ipv4", mapped, `
			0000005E DAA320A7 58932AAC 00000001 00000002
			0000000000000003 0000000000000004 00000000 0102030405060708
			0A000001 000004D2
			1112131415161718
			7F000001 00002A9F
			00000005 0000000000000006
			00000002 6869
			01 54
			0000`},
		{"zero", Record{}, `
			0000005B DAA320A7 00000000 00000000 00000000
			0000000000000000 0000000000000000 00000000 0000000000000000
			00000000 00000000
			0000000000000000
			00000000 00000000
			00000000 0000000000000000
			00000000
			00
			0000`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := unhexT(t, tc.want)
			got, err := AppendRecord(nil, &tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encoding mismatch\n got %X\nwant %X", got, want)
			}
			if n := EncodedSize(&tc.rec); n != len(want) {
				t.Fatalf("EncodedSize = %d, want %d", n, len(want))
			}
			if _, err := Decode(got, true); err != nil {
				t.Fatalf("Decode of golden: %v", err)
			}
		})
	}
}

func TestMinRecordSize(t *testing.T) {
	if MinRecordSize != 91 {
		t.Fatalf("MinRecordSize = %d, want 91", MinRecordSize)
	}
	if n := EncodedSize(&Record{}); n != MinRecordSize {
		t.Fatalf("EncodedSize(empty) = %d", n)
	}
}

func TestRoundTrip(t *testing.T) {
	hosts := []struct {
		name        string
		born, store netip.AddrPort
		wantFlag    int32
		wantBorn    netip.AddrPort
		wantStore   netip.AddrPort
		wantStoreTS int
	}{
		{"v4/v4", hostV4, storeV4, 0, hostV4, storeV4, 56},
		{"v6/v4", hostV6, storeV4, FlagBornHostV6, hostV6, storeV4, 68},
		{"v4/v6", hostV4, storeV6, FlagStoreHostV6, hostV4, storeV6, 56},
		{"v6/v6", hostV6, storeV6, FlagBornHostV6 | FlagStoreHostV6, hostV6, storeV6, 68},
		{"mapped/unset", mapped4, zeroHost, 0, hostV4, netip.AddrPortFrom(netip.IPv4Unspecified(), 0), 56},
	}
	props := AppendProperty(AppendProperty(AppendProperty(nil, PropUniqKey, "ABC"), PropTags, "TagA"), PropKeys, "k1 k2")
	for _, h := range hosts {
		t.Run(h.name, func(t *testing.T) {
			r := Record{
				Topic: "%RETRY%group", QueueID: -7, Flag: 0x7FFFFFFF, QueueOffset: 1 << 40,
				PhysicalOffset: -1, SysFlag: FlagCompressed | TxCommitType, BornTimestamp: baseTS,
				BornHost: h.born, StoreTimestamp: storeTS, StoreHost: h.store, ReconsumeTimes: 16,
				PreparedTransactionOffset: 123456789, Body: bytes.Repeat([]byte{0xAB}, 1000),
				Properties: props,
			}
			prefix := []byte("prefix")
			buf, err := AppendRecord(prefix, &r)
			if err != nil {
				t.Fatal(err)
			}
			if string(buf[:6]) != "prefix" {
				t.Fatal("prefix clobbered")
			}
			rec := buf[6:]
			// Trailing bytes after the record must be ignored.
			v, err := Decode(append(rec[:len(rec):len(rec)], 1, 2, 3), true)
			if err != nil {
				t.Fatal(err)
			}
			check := func(name string, got, want any) {
				t.Helper()
				if got != want {
					t.Errorf("%s = %v, want %v", name, got, want)
				}
			}
			check("TotalSize", v.TotalSize(), len(rec))
			check("Bytes", string(v.Bytes()), string(rec))
			check("Magic", v.Magic(), MagicV1)
			check("BodyCRC", v.BodyCRC(), int32(BodyCRC(r.Body)))
			check("QueueID", v.QueueID(), r.QueueID)
			check("Flag", v.Flag(), r.Flag)
			check("QueueOffset", v.QueueOffset(), r.QueueOffset)
			check("PhysicalOffset", v.PhysicalOffset(), r.PhysicalOffset)
			check("SysFlag", v.SysFlag(), r.SysFlag|h.wantFlag)
			check("BornTimestamp", v.BornTimestamp(), r.BornTimestamp)
			check("BornHost", v.BornHost(), h.wantBorn)
			check("StoreTimestamp", v.StoreTimestamp(), r.StoreTimestamp)
			check("StoreHost", v.StoreHost(), h.wantStore)
			check("ReconsumeTimes", v.ReconsumeTimes(), r.ReconsumeTimes)
			check("PreparedTransactionOffset", v.PreparedTransactionOffset(), r.PreparedTransactionOffset)
			check("Body", string(v.Body()), string(r.Body))
			check("Topic", string(v.Topic()), r.Topic)
			check("Properties", string(v.Properties()), string(props))
			check("Tags", string(v.Tags()), "TagA")
			check("Keys", string(v.Keys()), "k1 k2")
			check("UniqKey", string(v.UniqKey()), "ABC")
			check("StoreTimestampOffset", StoreTimestampOffset(v.SysFlag()), h.wantStoreTS)
			check("store ts at offset", int64(binary.BigEndian.Uint64(rec[h.wantStoreTS:])), storeTS)
			check("View.AppendOffsetMsgID", string(v.AppendOffsetMsgID(nil)), OffsetMsgID(h.wantStore, r.PhysicalOffset))
			if _, ok := v.Property("NOPE"); ok {
				t.Error("Property(NOPE) found")
			}
		})
	}
}

func TestIPv6Offsets(t *testing.T) {
	r := baseRecord()
	r.BornHost, r.StoreHost = hostV6, storeV6
	rec, err := AppendRecord(nil, &r)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 94+24 {
		t.Fatalf("len = %d, want %d", len(rec), 94+24)
	}
	be := binary.BigEndian
	bornIP := hostV6.Addr().As16()
	storeIP := storeV6.Addr().As16()
	// Each host field is 20 bytes: 16 of IP + 4 of port.
	if !bytes.Equal(rec[48:64], bornIP[:]) || be.Uint32(rec[64:]) != 1234 {
		t.Errorf("born host field: % X", rec[48:68])
	}
	if int64(be.Uint64(rec[68:])) != storeTS {
		t.Errorf("store timestamp not at 68")
	}
	if !bytes.Equal(rec[76:92], storeIP[:]) || be.Uint32(rec[92:]) != 10911 {
		t.Errorf("store host field: % X", rec[76:96])
	}
	if be.Uint32(rec[96:]) != 5 || be.Uint64(rec[100:]) != 6 || be.Uint32(rec[108:]) != 2 {
		t.Errorf("reconsume/prepared/bodylen misplaced: % X", rec[96:112])
	}
	if int32(be.Uint32(rec[OffSysFlag:])) != FlagBornHostV6|FlagStoreHostV6 {
		t.Errorf("sysflag %#x", be.Uint32(rec[OffSysFlag:]))
	}
	if StoreTimestampOffset(FlagBornHostV6) != 68 || StoreTimestampOffset(FlagStoreHostV6) != 56 {
		t.Error("StoreTimestampOffset")
	}
}

func TestPatch(t *testing.T) {
	for _, born := range []netip.AddrPort{hostV4, hostV6} {
		r := baseRecord()
		r.BornHost = born
		rec, err := AppendRecord(nil, &r)
		if err != nil {
			t.Fatal(err)
		}
		SetQueueOffset(rec, 0x0A0B0C0D0E0F1011)
		SetPhysicalOffset(rec, -2)
		SetStoreTimestamp(rec, 1700000000123)
		SetQueueID(rec, 42)
		v, err := Decode(rec, true)
		if err != nil {
			t.Fatal(err)
		}
		if v.QueueOffset() != 0x0A0B0C0D0E0F1011 || v.PhysicalOffset() != -2 ||
			v.StoreTimestamp() != 1700000000123 || v.QueueID() != 42 {
			t.Errorf("born %v: patched fields %d %d %d %d", born, v.QueueOffset(), v.PhysicalOffset(), v.StoreTimestamp(), v.QueueID())
		}
		// Nothing else moved.
		if v.BornTimestamp() != baseTS || v.BornHost() != born || v.StoreHost() != storeV4 ||
			v.ReconsumeTimes() != 5 || string(v.Body()) != "hi" {
			t.Errorf("born %v: unpatched fields changed", born)
		}
	}
	// Golden: the patched IPv4 record.
	r := baseRecord()
	rec, _ := AppendRecord(nil, &r)
	SetQueueOffset(rec, 0x10)
	SetPhysicalOffset(rec, 0x20)
	SetStoreTimestamp(rec, 0x30)
	SetQueueID(rec, 0x40)
	want := unhexT(t, `
		0000005E DAA320A7 58932AAC 00000040 00000002
		0000000000000010 0000000000000020 00000000 0102030405060708
		0A000001 000004D2
		0000000000000030
		7F000001 00002A9F
		00000005 0000000000000006
		00000002 6869
		01 54
		0000`)
	if !bytes.Equal(rec, want) {
		t.Fatalf("patched\n got %X\nwant %X", rec, want)
	}
}

func TestAppendRecordErrors(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Record)
		want error
	}{
		{"topic 256", func(r *Record) { r.Topic = strings.Repeat("t", 256) }, ErrTopicTooLong},
		{"properties 32768", func(r *Record) { r.Properties = make([]byte, MaxPropertiesSize+1) }, ErrPropertiesTooLarge},
	}
	for _, tc := range tests {
		r := baseRecord()
		tc.mod(&r)
		dst := []byte("keep")
		got, err := AppendRecord(dst, &r)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
		if string(got) != "keep" {
			t.Errorf("%s: dst changed on error", tc.name)
		}
	}
	// The limits themselves are accepted.
	r := baseRecord()
	r.Topic = strings.Repeat("t", MaxTopicLength)
	r.Properties = bytes.Repeat([]byte("a"), MaxPropertiesSize)
	rec, err := AppendRecord(nil, &r)
	if err != nil {
		t.Fatal(err)
	}
	v, err := Decode(rec, true)
	if err != nil || len(v.Topic()) != MaxTopicLength || len(v.Properties()) != MaxPropertiesSize {
		t.Fatalf("limits: %v", err)
	}
}

// toV2 rewrites a v1 record as v2 (2-byte topic length).
func toV2(v1 []byte) []byte {
	v, err := Decode(v1, false)
	if err != nil {
		panic(err)
	}
	topicLenAt := v.topicOff - 1
	out := append([]byte(nil), v1[:topicLenAt]...)
	out = binary.BigEndian.AppendUint16(out, uint16(v.topicLen))
	out = append(out, v1[topicLenAt+1:]...)
	binary.BigEndian.PutUint32(out, uint32(len(out)))
	binary.BigEndian.PutUint32(out[OffMagic:], MagicV2)
	return out
}

func TestDecodeV2(t *testing.T) {
	r := baseRecord()
	r.Topic = strings.Repeat("x", 200)
	r.Properties = AppendProperty(nil, PropTags, "t")
	v1, _ := AppendRecord(nil, &r)
	v2 := toV2(v1)
	v, err := Decode(v2, true)
	if err != nil {
		t.Fatal(err)
	}
	if v.Magic() != MagicV2 || string(v.Topic()) != r.Topic || string(v.Tags()) != "t" || string(v.Body()) != "hi" {
		t.Fatalf("v2 decode: magic %#x topic %q", v.Magic(), v.Topic())
	}
}

func TestDecodeErrors(t *testing.T) {
	r := baseRecord()
	r.Properties = AppendProperty(nil, PropTags, "TagA")
	good, _ := AppendRecord(nil, &r)
	v, _ := Decode(good, false)
	bodyLenAt := int(v.bodyOff) - 4
	topicLenAt := int(v.topicOff) - 1
	propLenAt := int(v.propOff) - 2

	mod := func(f func(b []byte) []byte) []byte {
		return f(append([]byte(nil), good...))
	}
	put32 := func(off int, x uint32) []byte {
		return mod(func(b []byte) []byte { binary.BigEndian.PutUint32(b[off:], x); return b })
	}
	put16 := func(off int, x uint16) []byte {
		return mod(func(b []byte) []byte { binary.BigEndian.PutUint16(b[off:], x); return b })
	}
	tests := []struct {
		name string
		buf  []byte
		crc  bool
		want error
	}{
		{"empty", nil, false, ErrTruncated},
		{"7 bytes", good[:7], false, ErrTruncated},
		{"header only", good[:MinRecordSize-1], false, ErrTruncated},
		{"one byte short", good[:len(good)-1], false, ErrTruncated},
		{"bad magic", put32(OffMagic, 0xDEADBEEF), false, ErrBadMagic},
		{"zeros", make([]byte, 200), false, ErrBadMagic},
		{"blank", AppendBlank(nil, 4096), false, ErrBlank},
		{"total below minimum", put32(OffTotalSize, 90), false, ErrBadSize},
		{"total negative", put32(OffTotalSize, 0x80000000), false, ErrBadSize},
		{"total beyond buffer", put32(OffTotalSize, uint32(len(good)+1)), false, ErrTruncated},
		{"total MaxInt32", put32(OffTotalSize, 0x7FFFFFFF), false, ErrTruncated},
		{"body length +1", put32(bodyLenAt, 3), false, ErrBadSize},
		{"body length -1", put32(bodyLenAt, 1), false, ErrBadSize},
		{"body length negative", put32(bodyLenAt, 0xFFFFFFFF), false, ErrBadSize},
		{"body length huge", put32(bodyLenAt, 0x7FFFFFFF), false, ErrBadSize},
		{"body length min int32", put32(bodyLenAt, 0x80000000), false, ErrBadSize},
		{"topic length +1", mod(func(b []byte) []byte { b[topicLenAt]++; return b }), false, ErrBadSize},
		{"topic length 255", mod(func(b []byte) []byte { b[topicLenAt] = 255; return b }), false, ErrBadSize},
		{"topic length 0", mod(func(b []byte) []byte { b[topicLenAt] = 0; return b }), false, ErrBadSize},
		{"prop length +1", put16(propLenAt, uint16(v.propLen+1)), false, ErrBadSize},
		{"prop length -1", put16(propLenAt, uint16(v.propLen-1)), false, ErrBadSize},
		{"prop length negative", put16(propLenAt, 0x8000), false, ErrBadSize},
		{"trailing byte inside total", mod(func(b []byte) []byte {
			b = append(b, 0)
			binary.BigEndian.PutUint32(b, uint32(len(b)))
			return b
		}), false, ErrBadSize},
		{"born v6 flag on v4 record", put32(OffSysFlag, uint32(FlagBornHostV6)), false, ErrBadSize},
		{"bad crc", put32(OffBodyCRC, 1), true, ErrBadCRC},
		{"body flipped", mod(func(b []byte) []byte { b[v.bodyOff] ^= 1; return b }), true, ErrBadCRC},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.buf, tc.crc)
			if err != tc.want {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
	// A bad CRC passes when not checked.
	if _, err := Decode(put32(OffBodyCRC, 1), false); err != nil {
		t.Fatalf("unchecked CRC: %v", err)
	}
}

func TestBlank(t *testing.T) {
	b := AppendBlank([]byte{}, 1234)
	if want := unhexT(t, "000004D2 CBD43194"); !bytes.Equal(b, want) {
		t.Fatalf("AppendBlank = %X", b)
	}
	if n, ok := IsBlank(b); !ok || n != 1234 {
		t.Fatalf("IsBlank = %d %v", n, ok)
	}
	p := make([]byte, 16)
	PutBlank(p, 8)
	if n, ok := IsBlank(p); !ok || n != 8 {
		t.Fatalf("PutBlank/IsBlank = %d %v", n, ok)
	}
	if _, ok := IsBlank(b[:7]); ok {
		t.Error("short buffer is blank")
	}
	if _, ok := IsBlank(AppendBlank(nil, 7)); ok {
		t.Error("blank of size 7 accepted")
	}
	r := baseRecord()
	rec, _ := AppendRecord(nil, &r)
	if _, ok := IsBlank(rec); ok {
		t.Error("record is blank")
	}
	if ReadTotalSize(rec) != int32(len(rec)) || ReadTotalSize(rec[:3]) != 0 {
		t.Error("ReadTotalSize")
	}
}

func TestSysFlag(t *testing.T) {
	tests := []struct {
		flag         int32
		tx           int32
		dispatchable bool
	}{
		{0, TxNotType, true},
		{TxPreparedType | FlagCompressed, TxPreparedType, false},
		{TxCommitType | FlagBornHostV6, TxCommitType, true},
		{TxRollbackType | FlagMultiTags, TxRollbackType, false},
	}
	for _, tc := range tests {
		if TxType(tc.flag) != tc.tx || Dispatchable(tc.flag) != tc.dispatchable {
			t.Errorf("flag %#x: TxType %#x Dispatchable %v", tc.flag, TxType(tc.flag), Dispatchable(tc.flag))
		}
	}
	if got := SetTxType(TxPreparedType|FlagCompressed, TxCommitType); got != TxCommitType|FlagCompressed {
		t.Errorf("SetTxType = %#x", got)
	}
}

func TestForEachRecord(t *testing.T) {
	var body []byte
	for i := range 3 {
		r := baseRecord()
		r.QueueOffset = int64(i)
		if i == 1 {
			r.BornHost = hostV6
		}
		body, _ = AppendRecord(body, &r)
	}
	var offs []int64
	err := ForEachRecord(body, true, func(v View) error { offs = append(offs, v.QueueOffset()); return nil })
	if err != nil || len(offs) != 3 || offs[0] != 0 || offs[1] != 1 || offs[2] != 2 {
		t.Fatalf("offsets %v, err %v", offs, err)
	}
	n := 0
	err = ForEachRecord(append(body, AppendBlank(nil, 8)...), true, func(View) error { n++; return nil })
	if !errors.Is(err, ErrBlank) || n != 3 {
		t.Fatalf("blank after records: %v after %d", err, n)
	}
	err = ForEachRecord(body[:len(body)-1], true, func(View) error { return nil })
	if !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated: %v", err)
	}
	stop := errors.New("stop")
	if err := ForEachRecord(body, false, func(View) error { return stop }); err != stop {
		t.Fatalf("fn error: %v", err)
	}
}
