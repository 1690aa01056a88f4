package client

import (
	"testing"

	"github.com/apogeemq/apogee/message"
)

// FuzzPullBody feeds arbitrary pull bodies through what a puller does with them:
// record walking, decoding (inflating compressed bodies with a size bound) and the
// tag check. It must never panic.
func FuzzPullBody(f *testing.F) {
	rec, _ := message.AppendRecord(nil, &message.Record{Topic: "T", Body: []byte("hello"),
		Properties: message.AppendProperty(nil, message.PropTags, "a")})
	f.Add(rec)
	comp, _ := newCompressor(CompressionZlib, 5)
	z, flag, _ := comp.compress(nil, []byte("compressed body compressed body"))
	zrec, _ := message.AppendRecord(nil, &message.Record{Topic: "T", SysFlag: flag, Body: z})
	f.Add(append(rec, zrec...))
	zs, _ := newCompressor(CompressionZstd, 3)
	s, sflag, _ := zs.compress(nil, []byte("zstd body"))
	srec, _ := message.AppendRecord(nil, &message.Record{Topic: "T", SysFlag: sflag, Body: s})
	f.Add(srec)
	f.Add([]byte{0, 0, 0, 4})
	sub := newTagSubscription("T", "a || b")
	f.Fuzz(func(t *testing.T, body []byte) {
		message.ForEachRecord(body, false, func(v message.View) error {
			m, _ := decodeMessage(v, MessageQueue{Topic: "T", BrokerName: "b"})
			if m == nil {
				t.Fatal("nil message")
			}
			sub.matchTag(m.Tags)
			return nil
		})
	})
}

// FuzzOffsetKey checks the offset file's queue keys.
func FuzzOffsetKey(f *testing.F) {
	f.Add("T@broker-a@3")
	f.Add("%RETRY%g@b@0")
	f.Add("@@")
	f.Fuzz(func(t *testing.T, k string) {
		mq, ok := parseMQKey(k)
		if ok && mq.String() != k {
			if back, ok2 := parseMQKey(mq.String()); !ok2 || back != mq {
				t.Fatalf("%q -> %v does not round-trip", k, mq)
			}
		}
	})
}
