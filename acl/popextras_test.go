package acl

import (
	"strings"
	"testing"

	"github.com/apogeemq/apogee/protocol"
)

// RECALL_MESSAGE (370) needs Pub on its topic; BATCH_ACK_MESSAGE (3543)
// Sub on each ack's group and topic of its body.
func TestCheckRecallAndBatchAck(t *testing.T) {
	g := openGuard(t, writeFile(t, t.TempDir(), "acl.yml", projectFile))
	if ok, _, remark := g.Check(local, signed(req(protocol.ReqRecallMessage, "topic", "orders", "recallHandle", "h"), "alice", "alice-secret")); !ok {
		t.Fatalf("recall refused: %s", remark)
	}
	if ok, _, remark := g.Check(local, signed(req(protocol.ReqRecallMessage, "topic", "payments", "recallHandle", "h"), "alice", "alice-secret")); ok ||
		!strings.Contains(remark, "Topic:payments (Pub)") {
		t.Fatalf("recall on a topic not granted: %v %s", ok, remark)
	}
	batch := func(acks ...protocol.BatchAck) *protocol.Command {
		body, err := (&protocol.BatchAckMessageRequestBody{BrokerName: "b", Acks: acks}).Encode()
		if err != nil {
			t.Fatal(err)
		}
		c := req(protocol.ReqBatchAckMessage)
		c.Body = body
		return signed(c, "alice", "alice-secret")
	}
	if ok, _, remark := g.Check(local, batch(protocol.BatchAck{ConsumerGroup: "billing", Topic: "orders", BitSet: []byte{1}},
		protocol.BatchAck{ConsumerGroup: "billing", Topic: "orders", BitSet: []byte{2}})); !ok {
		t.Fatalf("batch ack refused: %s", remark)
	}
	if ok, _, remark := g.Check(local, batch(protocol.BatchAck{ConsumerGroup: "billing", Topic: "orders", BitSet: []byte{1}},
		protocol.BatchAck{ConsumerGroup: "other", Topic: "orders", BitSet: []byte{1}})); ok || !strings.Contains(remark, "Group:other (Sub)") {
		t.Fatalf("batch ack of another group: %v %s", ok, remark)
	}
	bad := req(protocol.ReqBatchAckMessage)
	bad.Body = []byte("{")
	if ok, _, _ := g.Check(local, signed(bad, "alice", "alice-secret")); ok {
		t.Fatal("a batch ack whose body does not parse was allowed")
	}
}
