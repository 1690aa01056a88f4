package message

import (
	"bytes"
	"encoding/binary"
	"maps"
	"net/netip"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

func fuzzSeedRecords() [][]byte {
	var out [][]byte
	r := baseRecord()
	rec, _ := AppendRecord(nil, &r)
	out = append(out, rec)
	r.BornHost, r.StoreHost = hostV6, storeV6
	r.Properties = AppendProperty(AppendProperty(nil, PropTags, "TagA"), PropUniqKey, "ABC")
	rec, _ = AppendRecord(nil, &r)
	out = append(out, rec, toV2(rec))
	out = append(out, AppendBlank(nil, 100))
	empty, _ := AppendRecord(nil, &Record{})
	out = append(out, empty)
	return out
}

func FuzzDecode(f *testing.F) {
	for _, rec := range fuzzSeedRecords() {
		f.Add(rec, true)
		f.Add(rec, false)
		f.Add(rec[:len(rec)/2], false)
	}
	f.Fuzz(func(t *testing.T, buf []byte, checkCRC bool) {
		_, blank := IsBlank(buf)
		v, err := Decode(buf, checkCRC)
		if blank && err != ErrBlank {
			t.Fatalf("blank marker decoded: %v", err)
		}
		if err != nil {
			return
		}
		if v.TotalSize() < MinRecordSize || v.TotalSize() > len(buf) || int(ReadTotalSize(buf)) != v.TotalSize() {
			t.Fatalf("TotalSize %d of %d", v.TotalSize(), len(buf))
		}
		hdr := StoreTimestampOffset(v.SysFlag()) + 8 + len(v.StoreHostBytes()) + 12
		if hdr+4+len(v.Body())+len(v.Topic())+len(v.Properties())+2+1 > v.TotalSize() {
			t.Fatalf("parts exceed the record")
		}
		_ = v.Tags()
		_ = v.AppendOffsetMsgID(nil)
		ForEachProperty(v.Properties(), func(k, val []byte) bool { return true })

		// A v1 record whose CRC checked and whose hosts are canonical must
		// re-encode to the same bytes.
		if !checkCRC || v.Magic() != MagicV1 {
			return
		}
		canonical := func(raw []byte) bool {
			port := binary.BigEndian.Uint32(raw[len(raw)-4:])
			if port > 0xFFFF {
				return false
			}
			if len(raw) == hostV6Size {
				a := netip.AddrFrom16([16]byte(raw[:16]))
				return !a.Is4In6()
			}
			return true
		}
		if !canonical(v.BornHostBytes()) || !canonical(v.StoreHostBytes()) {
			return
		}
		r := Record{
			Topic: string(v.Topic()), QueueID: v.QueueID(), Flag: v.Flag(), QueueOffset: v.QueueOffset(),
			PhysicalOffset: v.PhysicalOffset(), SysFlag: v.SysFlag(), BornTimestamp: v.BornTimestamp(),
			BornHost: v.BornHost(), StoreTimestamp: v.StoreTimestamp(), StoreHost: v.StoreHost(),
			ReconsumeTimes: v.ReconsumeTimes(), PreparedTransactionOffset: v.PreparedTransactionOffset(),
			Body: v.Body(), Properties: v.Properties(),
		}
		again, err := AppendRecord(nil, &r)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		if !bytes.Equal(again, v.Bytes()) {
			t.Fatalf("re-encode differs\n got %X\nwant %X", again, v.Bytes())
		}
	})
}

func FuzzProperties(f *testing.F) {
	f.Add([]byte("TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABC\x02"), "TAGS")
	f.Add([]byte("a\x01b\x01c\x02\x02d\x01\x02"), "d")
	f.Add([]byte("\xed\xa0\x80\x01\xf0\x9f\x98\x80\x02"), "\xed\xa0\x80")
	f.Add([]byte(""), "")
	f.Fuzz(func(t *testing.T, props []byte, key string) {
		m := ParseProperties(props)
		want := map[string]string{}
		ForEachProperty(props, func(k, v []byte) bool { want[string(k)] = string(v); return true })
		if !maps.Equal(m, want) {
			t.Fatalf("ParseProperties(%q) = %q, ForEachProperty gives %q", props, m, want)
		}
		v, ok := LookupProperty(props, key)
		mv, mok := m[key]
		if ok != mok || string(v) != mv {
			t.Fatalf("Lookup(%q) = %q %v, map has %q %v", key, v, ok, mv, mok)
		}
		if ValidateProperties(props) == nil {
			if enc, err := EncodeProperties(m); err == nil {
				if !maps.Equal(ParseProperties(enc), m) || ValidateProperties(enc) != nil {
					t.Fatalf("EncodeProperties round trip failed for %q", props)
				}
			}
		}
		tags, keys, uniq := LookupDispatchProperties(props)
		for name, got := range map[string][]byte{PropTags: tags, PropKeys: keys, PropUniqKey: uniq} {
			if want, _ := LookupProperty(props, name); !bytes.Equal(got, want) || (got == nil) != (want == nil) {
				t.Fatalf("LookupDispatchProperties %s = %q, LookupProperty gives %q", name, got, want)
			}
		}
		// JavaHashCode agrees with UTF-16 of Go's decoding for valid UTF-8.
		h := JavaHashCodeBytes(props)
		if h != JavaHashCode(string(props)) {
			t.Fatal("JavaHashCode and JavaHashCodeBytes differ")
		}
		if utf8.Valid(props) {
			var want int32
			for _, u := range utf16.Encode([]rune(string(props))) {
				want = 31*want + int32(u)
			}
			if h != want {
				t.Fatalf("JavaHashCode(%q) = %d, want %d", props, h, want)
			}
		}
	})
}

func FuzzBatch(f *testing.F) {
	var b []byte
	b = AppendBatchEntry(b, 1, []byte("hello"), []byte("TAGS\x01a\x02"))
	b = AppendBatchEntry(b, 0, nil, nil)
	f.Add(b)
	f.Add(b[:30])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, batch []byte) {
		var again []byte
		err := ForEachBatchEntry(batch, func(flag int32, body, props []byte) error {
			again = AppendBatchEntry(again, flag, body, props)
			return nil
		})
		if err != nil {
			return
		}
		// Re-encoding gives the input with MAGIC and BODYCRC zeroed.
		want := append([]byte(nil), batch...)
		for pos := 0; pos < len(want); pos += int(binary.BigEndian.Uint32(want[pos:])) {
			clear(want[pos+4 : pos+12])
		}
		if !bytes.Equal(again, want) {
			t.Fatalf("re-encode differs\n got %X\nwant %X", again, want)
		}
	})
}
