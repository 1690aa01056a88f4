package message

import (
	"net/netip"
	"testing"
)

func TestZeroAllocs(t *testing.T) {
	r := baseRecord()
	r.BornHost, r.StoreHost = hostV6, storeV4
	r.Body = make([]byte, 1024)
	r.Properties = AppendProperty(AppendProperty(nil, PropUniqKey, "0A0000010001719D1CBD481908000002"), PropTags, "TagA")
	buf := make([]byte, 0, 4096)
	rec, err := AppendRecord(buf, &r)
	if err != nil {
		t.Fatal(err)
	}
	props := r.Properties
	gen := NewUniqIDGenerator(netip.MustParseAddr("10.0.0.1"), 1)
	idBuf := make([]byte, 0, 64)
	batchBuf := make([]byte, 0, 256)
	var sink int64

	cases := map[string]func(){
		"AppendRecord": func() {
			if _, err := AppendRecord(buf[:0], &r); err != nil {
				panic(err)
			}
		},
		"Decode": func() {
			v, err := Decode(rec, true)
			if err != nil {
				panic(err)
			}
			sink += int64(len(v.Tags())) + v.QueueOffset() + int64(v.BornHost().Port())
		},
		"Decode error": func() {
			if _, err := Decode(rec[:len(rec)-1], true); err != ErrTruncated {
				panic(err)
			}
		},
		"LookupProperty": func() {
			v, _ := LookupProperty(props, PropTags)
			sink += int64(len(v))
		},
		"ForEachProperty": func() {
			ForEachProperty(props, func(k, v []byte) bool { sink += int64(len(k)); return true })
		},
		"ValidateProperties": func() {
			if ValidateProperties(props) != nil {
				panic("invalid")
			}
		},
		"AppendOffsetMsgID": func() { idBuf = AppendOffsetMsgID(idBuf[:0], storeV4, 12345) },
		"ParseOffsetMsgID": func() {
			_, off, _ := ParseOffsetMsgID("7F00000100002A9F0000000000000000")
			sink += off
		},
		"JavaHashCode":      func() { sink += int64(JavaHashCode("中文标签TagA\U0001F600")) },
		"JavaHashCodeBytes": func() { sink += TagCode(props) },
		"AppendNext":        func() { idBuf = gen.AppendNext(idBuf[:0]) },
		"Patch": func() {
			SetQueueOffset(rec, 1)
			SetPhysicalOffset(rec, 2)
			SetStoreTimestamp(rec, 3)
			SetQueueID(rec, 4)
		},
		"ForEachBatchEntry": func() {
			batch := AppendBatchEntry(batchBuf[:0], 1, []byte("x"), props)
			_ = ForEachBatchEntry(batch, func(flag int32, body, props []byte) error { sink += int64(flag); return nil })
		},
	}
	for name, fn := range cases {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocs per run, want 0", name, n)
		}
	}
	_ = sink
}

func BenchmarkAppendRecord(b *testing.B) {
	r := baseRecord()
	r.Body = make([]byte, 1024)
	r.Properties = AppendProperty(AppendProperty(nil, PropUniqKey, "0A0000010001719D1CBD481908000002"), PropTags, "TagA")
	buf := make([]byte, 0, EncodedSize(&r))
	b.SetBytes(int64(EncodedSize(&r)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := AppendRecord(buf, &r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecode(b *testing.B) {
	r := baseRecord()
	r.Body = make([]byte, 1024)
	r.Properties = AppendProperty(AppendProperty(nil, PropUniqKey, "0A0000010001719D1CBD481908000002"), PropTags, "TagA")
	rec, _ := AppendRecord(nil, &r)
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(rec, true); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeNoCRC(b *testing.B) {
	r := baseRecord()
	r.Body = make([]byte, 1024)
	rec, _ := AppendRecord(nil, &r)
	b.SetBytes(int64(len(rec)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Decode(rec, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLookupProperty(b *testing.B) {
	props := AppendProperty(AppendProperty(AppendProperty(nil, PropUniqKey, "0A0000010001719D1CBD481908000002"), PropKeys, "order-1"), PropTags, "TagA")
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := LookupProperty(props, PropTags); !ok {
			b.Fatal("missing")
		}
	}
}

// BenchmarkLookupDispatchProperties reads what the store's dispatcher reads
// from every record: TAGS, KEYS and UNIQ_KEY, from a producer's properties.
func BenchmarkLookupDispatchProperties(b *testing.B) {
	props := AppendProperty(AppendProperty(AppendProperty(AppendProperty(nil, PropUniqKey, "0A0000010001719D1CBD481908000002"),
		PropWait, "true"), PropKeys, "order-1"), PropTags, "TagA")
	b.ReportAllocs()
	for b.Loop() {
		if tags, keys, uniq := LookupDispatchProperties(props); tags == nil || keys == nil || uniq == nil {
			b.Fatal("missing")
		}
	}
}

func BenchmarkUniqIDAppendNext(b *testing.B) {
	g := NewUniqIDGenerator(netip.MustParseAddr("10.0.0.1"), 1)
	buf := make([]byte, 0, 64)
	b.ReportAllocs()
	for b.Loop() {
		buf = g.AppendNext(buf[:0])
	}
}

func BenchmarkJavaHashCode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = JavaHashCode("TagA||TagB")
	}
}
