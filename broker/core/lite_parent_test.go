package core

import (
	"testing"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// A lite topic is indexed only under a LITE parent: a message naming one
// sent to a NORMAL or MIXED topic (over remoting, which does not check the
// type, or as a batch) is stored without the property, so no producer can
// grow the lite index under a topic whose lite topics nobody reads.
func TestLiteTopicOnlyUnderLiteParent(t *testing.T) {
	c := newTestCore(t, nil)
	for _, tc := range []struct{ topic, attrs string }{
		{"LiteP", "+message.type=LITE"}, {"NormalP", "+message.type=NORMAL"}, {"MixedP", "+message.type=MIXED"},
	} {
		if err := c.Admin().CreateTopic(&TopicRequest{Topic: tc.topic, ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6,
			Attributes: tc.attrs}); err != nil {
			t.Fatal(tc.topic, err)
		}
	}
	send := func(topic, lite string, check bool) {
		t.Helper()
		r := sendReq(topic, 0, 16)
		r.Properties = append(r.Properties, testProps(message.PropertyLiteTopic, lite)...)
		r.CheckTopicType = check
		var res SendResult
		if err := c.Send(r, &res); err != nil {
			t.Fatalf("%s/%s: %v", topic, lite, err)
		}
	}
	send("NormalP", "N1", false) // remoting
	send("MixedP", "M1", true)   // gRPC: MIXED accepts it, as RocketMQ
	// A batch whose entries and whose own properties name lite topics.
	var body []byte
	for _, name := range []string{"B1", "B2"} {
		body = message.AppendBatchEntry(body, 0, []byte("x"), testProps("UNIQ_KEY", "C0A8000100000000000000000000000"+name[1:], message.PropertyLiteTopic, name))
	}
	br := sendReq("NormalP", 0, 0)
	br.Batch, br.Body = true, body
	br.Properties = testProps(message.PropertyLiteTopic, "B0")
	var res SendResult
	if err := c.Send(br, &res); err != nil {
		t.Fatal(err)
	}
	send("LiteP", "L1", true)
	waitDispatched(t, c, "NormalP", 0, 3)
	waitDispatched(t, c, "MixedP", 0, 1)
	waitDispatched(t, c, "LiteP", 0, 1)

	for _, parent := range []string{"NormalP", "MixedP"} {
		c.Store().LiteTopics(parent, func(lite string, _, _, _ int64) bool {
			t.Errorf("%s has lite topic %s", parent, lite)
			return true
		})
		var g store.GetResult
		if err := c.Store().Get(parent, 0, 0, 10, 1<<20, nil, &g); err != nil {
			t.Fatal(err)
		}
		for _, v := range g.Messages {
			rec, err := message.Decode(v.Bytes(), true)
			if err != nil {
				t.Fatal(err)
			}
			if _, _, _, lite := rec.DispatchPropertiesLite(); lite != nil {
				t.Errorf("%s stored a message with __LITE_TOPIC=%s", parent, lite)
			}
		}
	}
	if _, max, ok := c.Store().LiteOffsets("LiteP", "L1"); !ok || max != 1 {
		t.Errorf("LiteP/L1: max %d, ok %v", max, ok)
	}
	if n := c.Store().LiteCount(); n != 1 {
		t.Errorf("%d lite topics in the store, want 1", n)
	}
}
