package client

import (
	"net/netip"
	"testing"

	"github.com/apogeemq/apogee/message"
)

// BenchmarkDecodeMessage turns a pulled record of 1 KiB (with the properties
// a producer sets: UNIQ_KEY, WAIT, TAGS, KEYS) into a MessageExt, as a pull
// does for every message, and reports the allocations that costs.
func BenchmarkDecodeMessage(b *testing.B) {
	host := netip.MustParseAddrPort("127.0.0.1:10911")
	var props []byte
	props = message.AppendProperty(props, message.PropUniqKey, "7F0000010F4C18B4AAC2190B47A80000")
	props = message.AppendProperty(props, message.PropWait, "true")
	props = message.AppendProperty(props, message.PropTags, "TagA")
	props = message.AppendProperty(props, message.PropKeys, "order-1")
	rec, err := message.AppendRecord(nil, &message.Record{Topic: "bench", QueueID: 3, QueueOffset: 42,
		BornHost: host, StoreHost: host, Body: make([]byte, 1024), Properties: props})
	if err != nil {
		b.Fatal(err)
	}
	v, err := message.Decode(rec, true)
	if err != nil {
		b.Fatal(err)
	}
	mq := MessageQueue{Topic: "bench", BrokerName: "b", QueueID: 3}
	sub := newTagSubscription("bench", "TagA || TagB")
	b.ReportAllocs()
	b.SetBytes(int64(len(rec)))
	for b.Loop() {
		m, err := decodeMessage(v, mq)
		if err != nil || !sub.matchTag(m.Tags) {
			b.Fatal(m, err)
		}
	}
}
