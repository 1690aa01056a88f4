package protocol

import (
	"encoding/json"
	"testing"
)

func TestFastjsonToJSON(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"a":1,"b":[1,2,{"c":"x,y}"}]}`, `{"a":1,"b":[1,2,{"c":"x,y}"}]}`},
		{`{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:5,{"brokerName":"b","queueId":1,"topic":"T"}:{"x":1}}}`,
			`{"offsetTable":{"{\"brokerName\":\"b\",\"queueId\":0,\"topic\":\"T\"}":5,"{\"brokerName\":\"b\",\"queueId\":1,\"topic\":\"T\"}":{"x":1}}}`},
		{`{1:2, "k" : null}`, `{"1":2,"k":null}`},
		{`{}`, `{}`},
	} {
		got, err := FastjsonToJSON([]byte(c.in))
		if err != nil || string(got) != c.want {
			t.Errorf("FastjsonToJSON(%s) = %s, %v; want %s", c.in, got, err, c.want)
		}
		if !json.Valid(got) {
			t.Errorf("not JSON: %s", got)
		}
	}
	if _, err := FastjsonToJSON([]byte(`{"a":"unterminated}`)); err == nil {
		t.Error("unterminated string accepted")
	}
}

// The Java broker writes ConsumeStats as fastjson does: fields sorted, queue
// objects as map keys (AdminBrokerProcessor.getConsumeStats,
// ConsumeStats.encode); round trip through Decode.
func TestConsumeStatsShape(t *testing.T) {
	s := ConsumeStats{ConsumeTps: 2, OffsetTable: map[MessageQueue]OffsetWrapper{
		{Topic: "T", BrokerName: "b", QueueID: 1}: {BrokerOffset: 10, ConsumerOffset: 4, PullOffset: 4, LastTimestamp: 99},
		{Topic: "T", BrokerName: "b", QueueID: 0}: {BrokerOffset: 3},
	}}
	b, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"consumeTps":2.0,"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{"brokerOffset":3,"consumerOffset":0,"lastTimestamp":0,"pullOffset":0},` +
		`{"brokerName":"b","queueId":1,"topic":"T"}:{"brokerOffset":10,"consumerOffset":4,"lastTimestamp":99,"pullOffset":4}}}`
	if string(b) != want {
		t.Fatalf("encoded\n%s\nwant\n%s", b, want)
	}
	var d ConsumeStats
	if err := d.Decode(b); err != nil || d.ConsumeTps != 2 || len(d.OffsetTable) != 2 || d.TotalDiff() != 9 {
		t.Fatalf("decoded %+v, %v", d, err)
	}
	l := ConsumeStatsList{BrokerAddr: "a:1", ConsumeStatsList: []map[string][]ConsumeStats{{"G": {s}}}, TotalDiff: 9}
	lb, err := l.Encode()
	if err != nil {
		t.Fatal(err)
	}
	var dl ConsumeStatsList
	if err := dl.Decode(lb); err != nil || dl.TotalDiff != 9 || len(dl.ConsumeStatsList[0]["G"][0].OffsetTable) != 2 {
		t.Fatalf("list %s: %+v %v", lb, dl, err)
	}
}

func TestVersionDesc(t *testing.T) {
	for v, want := range map[int32]string{0: "V3_0_0_SNAPSHOT", 317: "V4_5_2", 401: "V4_9_4", 479: "V5_3_3", 100000: "HIGHER_VERSION"} {
		if got := VersionDesc(v); got != want {
			t.Errorf("VersionDesc(%d) = %s, want %s", v, got, want)
		}
	}
}
