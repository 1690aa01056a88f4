package core_test

import (
	"strings"
	"testing"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// A batch given as entries (SendRequest.Entries, the gRPC front end's
// request of several messages): one queue, consecutive offsets, each
// entry's own flag, compressed bit, born time, body and properties (the
// broker's CLUSTER added to each); refused whole under a batch's rules and
// a single message's limits.
func TestSendEntries(t *testing.T) {
	c := openCore(t, func(o *core.Options) { o.MaxMessageSize = 1024 })
	if err := c.Admin().CreateTopic(&core.TopicRequest{Topic: "E", ReadQueueNums: 2, WriteQueueNums: 2,
		Perm: protocol.PermRead | protocol.PermWrite}); err != nil {
		t.Fatal(err)
	}
	prepared := message.SetTxType(0, message.TxPreparedType)
	ents := []core.BatchEntry{
		{Flag: 7, BornTimestamp: 1000, Body: []byte("b0"), Properties: props(message.PropUniqKey, "u0", message.PropTags, "a")},
		{SysFlag: message.FlagCompressed | prepared, Body: []byte("b1"), Properties: props(message.PropUniqKey, "u1")},
		{BornTimestamp: 3000, Body: []byte("b2"), Properties: props(message.PropUniqKey, "u2")[:len(props(message.PropUniqKey, "u2"))-1]},
	}
	var res core.SendResult
	if err := c.Send(&core.SendRequest{Topic: []byte("E"), QueueID: -1, BornTimestamp: 5000, Entries: ents,
		Body: []byte("ignored"), CheckTopicType: true}, &res); err != nil {
		t.Fatal(err)
	}
	if res.Messages != 3 || res.QueueOffset != 0 || strings.Count(string(res.MsgID), ",") != 2 {
		t.Fatalf("result %+v", res)
	}
	q := res.QueueID
	waitDispatched(t, c, "E", q, 3)
	var pr core.PullResult
	defer pr.Release()
	if err := c.Pull(&core.PullRequest{Group: []byte("cg"), Topic: []byte("E"), QueueID: q, MaxMsgs: 32,
		OwnSubscription: true, Expression: []byte("*")}, &pr); err != nil || len(pr.Records) != 3 {
		t.Fatalf("pull: %v, %d records", err, len(pr.Records))
	}
	for i, rec := range pr.Records {
		v, err := message.Decode(rec, true)
		if err != nil {
			t.Fatal(err)
		}
		wantFlag, wantBorn, wantSys := int32(0), int64(5000), int32(0)
		switch i {
		case 0:
			wantFlag, wantBorn = 7, 1000
		case 1:
			wantSys = message.FlagCompressed
		case 2:
			wantBorn = 3000
		}
		cluster, _ := v.Property(message.PropCluster)
		if v.QueueOffset() != int64(i) || v.Flag() != wantFlag || v.BornTimestamp() != wantBorn ||
			v.SysFlag()&(message.FlagCompressed|prepared) != wantSys || string(v.Body()) != "b"+string(rune('0'+i)) ||
			string(v.UniqKey()) != "u"+string(rune('0'+i)) || len(cluster) == 0 {
			t.Fatalf("record %d: offset %d flag %d born %d sysflag %#x body %q props %q", i, v.QueueOffset(), v.Flag(),
				v.BornTimestamp(), v.SysFlag(), v.Body(), v.Properties())
		}
	}

	for _, tc := range []struct {
		what string
		r    core.SendRequest
		want core.Reason
	}{
		{"an entry's body too large", core.SendRequest{Topic: []byte("E"), QueueID: -1,
			Entries: []core.BatchEntry{{Body: []byte("x")}, {Body: make([]byte, 1025)}}}, core.ReasonMessageBodyTooLarge},
		{"an entry's properties malformed", core.SendRequest{Topic: []byte("E"), QueueID: -1,
			Entries: []core.BatchEntry{{Body: []byte("x"), Properties: []byte("novalue\x02")}}}, core.ReasonMessageMalformed},
		{"an entry's properties too large", core.SendRequest{Topic: []byte("E"), QueueID: -1,
			Entries: []core.BatchEntry{{Body: []byte("x"), Properties: props("k", strings.Repeat("v", message.MaxPropertiesSize-4))}}},
			core.ReasonMessagePropertiesTooLarge},
		{"a transaction", core.SendRequest{Topic: []byte("E"), QueueID: -1, SysFlag: prepared,
			Entries: []core.BatchEntry{{Body: []byte("x")}}}, core.ReasonBatchUnsupported},
		{"a retry topic", core.SendRequest{Topic: []byte("%RETRY%g"), QueueID: -1,
			Entries: []core.BatchEntry{{Body: []byte("x")}}}, core.ReasonBatchUnsupported},
		{"a delay", core.SendRequest{Topic: []byte("E"), QueueID: -1, Properties: props(message.PropDelay, "3"),
			Entries: []core.BatchEntry{{Body: []byte("x")}}}, core.ReasonBatchUnsupported},
	} {
		if err := c.Send(&tc.r, &res); core.ReasonOf(err) != tc.want {
			t.Errorf("%s: %v, want reason %v", tc.what, err, tc.want)
		}
	}
	if n := c.MaxOffset("E", 0) + c.MaxOffset("E", 1); n != 3 {
		t.Errorf("the topic holds %d after the refusals, want 3", n)
	}
}
