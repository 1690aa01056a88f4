package core_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
)

// TestNameRules checks the topic, group, tag, key and message-group rules
// both front ends apply: each refusal's reason, and what passes.
func TestNameRules(t *testing.T) {
	cases := []struct {
		name  string
		check func(string) error
		in    string
		want  core.Reason // ReasonNone: accepted
	}{
		{"topic", core.CheckTopicName, "Topic_1-a%b|c", core.ReasonNone},
		{"topic blank", core.CheckTopicName, "", core.ReasonTopicIllegal},
		{"topic space", core.CheckTopicName, "a b", core.ReasonTopicIllegal},
		{"topic dot", core.CheckTopicName, "a.b", core.ReasonTopicIllegal},
		{"topic non-ASCII", core.CheckTopicName, "tópico", core.ReasonTopicIllegal},
		{"topic 127", core.CheckTopicName, strings.Repeat("t", 127), core.ReasonNone},
		{"topic 128", core.CheckTopicName, strings.Repeat("t", 128), core.ReasonTopicIllegal},
		{"topic system, admin", core.CheckTopicName, "TBW102", core.ReasonNone},
		{"client topic system", core.CheckClientTopic, "TBW102", core.ReasonTopicReserved},
		{"client topic rmq_sys_", core.CheckClientTopic, "rmq_sys_wheel_timer", core.ReasonTopicReserved},
		{"client topic retry", core.CheckClientTopic, "%RETRY%g", core.ReasonNone},
		{"client topic DLQ", core.CheckClientTopic, "%DLQ%g", core.ReasonNone},
		{"client topic illegal", core.CheckClientTopic, "a/b", core.ReasonTopicIllegal},
		{"group", core.CheckGroupName, "GID_orders-1", core.ReasonNone},
		{"group blank", core.CheckGroupName, "", core.ReasonGroupIllegal},
		{"group 255", core.CheckGroupName, strings.Repeat("g", 255), core.ReasonNone},
		{"group 256", core.CheckGroupName, strings.Repeat("g", 256), core.ReasonGroupIllegal},
		{"group illegal", core.CheckGroupName, "g:1", core.ReasonGroupIllegal},
		{"client group system", core.CheckClientGroup, "CID_RMQ_SYS_TRANS", core.ReasonGroupReserved},
		{"client group", core.CheckClientGroup, "CID_orders", core.ReasonNone},
		{"tag", core.CheckTag, "TagA", core.ReasonNone},
		{"tag empty", core.CheckTag, "", core.ReasonNone},
		{"tag blank", core.CheckTag, " \t", core.ReasonTagIllegal},
		{"tag bar", core.CheckTag, "a||b", core.ReasonTagIllegal},
		{"tag separator", core.CheckTag, "a\x01b", core.ReasonTagIllegal},
		{"tag C1 control", core.CheckTag, "a\u0085b", core.ReasonTagIllegal},
		{"tag inner space", core.CheckTag, "a b", core.ReasonNone},
		{"key", core.CheckKey, "order-1", core.ReasonNone},
		{"key empty", core.CheckKey, "", core.ReasonNone},
		{"key blank", core.CheckKey, "  ", core.ReasonKeyIllegal},
		{"key control", core.CheckKey, "a\x7fb", core.ReasonKeyIllegal},
		{"key bar", core.CheckKey, "a|b", core.ReasonNone},
		{"group of messages", core.CheckMessageGroup, "user-1", core.ReasonNone},
		{"group of messages empty", core.CheckMessageGroup, "", core.ReasonNone},
		{"group of messages blank", core.CheckMessageGroup, " ", core.ReasonMessageGroupIllegal},
		{"group of messages 63", core.CheckMessageGroup, strings.Repeat("m", 63), core.ReasonNone},
		{"group of messages 64", core.CheckMessageGroup, strings.Repeat("m", 64), core.ReasonMessageGroupIllegal},
		{"group of messages control", core.CheckMessageGroup, "a\nb", core.ReasonMessageGroupIllegal},
	}
	for _, tc := range cases {
		err := tc.check(tc.in)
		if got := core.ReasonOf(err); got != tc.want {
			t.Errorf("%s: %q: reason %v (%v), want %v", tc.name, tc.in, got, err, tc.want)
		}
		if err != nil && core.Remark(err) == "" {
			t.Errorf("%s: refusal without a remark", tc.name)
		}
	}
}

// TestMessageTypeRules checks the inferred type of an undeclared message,
// the conflicts of a declared one and the types a topic accepts.
func TestMessageTypeRules(t *testing.T) {
	for _, tc := range []struct {
		group, delivery bool
		want            core.MessageType
	}{{false, false, core.MessageNormal}, {true, false, core.MessageFIFO}, {false, true, core.MessageDelay}, {true, true, core.MessageFIFO}} {
		if got := core.InferMessageType(tc.group, tc.delivery); got != tc.want {
			t.Errorf("InferMessageType(%v, %v) = %v, want %v", tc.group, tc.delivery, got, tc.want)
		}
	}
	ok := map[core.MessageType][2]bool{ // the one (group, delivery) each type accepts
		core.MessageNormal: {false, false}, core.MessageFIFO: {true, false},
		core.MessageDelay: {false, true}, core.MessageTransaction: {false, false},
	}
	for typ, accepted := range ok {
		for _, group := range []bool{false, true} {
			for _, delivery := range []bool{false, true} {
				err := core.CheckMessageType(typ, group, delivery)
				if want := [2]bool{group, delivery} == accepted; (err == nil) != want {
					t.Errorf("CheckMessageType(%v, group %v, delivery %v) = %v", typ, group, delivery, err)
				} else if err != nil && core.ReasonOf(err) != core.ReasonMessageTypeConflict {
					t.Errorf("CheckMessageType(%v, group %v, delivery %v): reason %v", typ, group, delivery, core.ReasonOf(err))
				}
			}
		}
	}
	if err := core.CheckMessageType(core.MessageType(9), false, false); core.ReasonOf(err) != core.ReasonMessageTypeConflict {
		t.Errorf("an unknown type: %v", err)
	}

	all := []core.MessageType{core.MessageNormal, core.MessageFIFO, core.MessageDelay, core.MessageTransaction}
	for _, tc := range []struct {
		attrs map[string]string
		want  []core.MessageType
	}{
		// RocketMQ 5: no attribute is NORMAL; a FIFO topic takes FIFO alone.
		{nil, []core.MessageType{core.MessageNormal}},
		{map[string]string{"message.type": "MIXED"}, all},
		{map[string]string{"message.type": "FIFO"}, []core.MessageType{core.MessageFIFO}},
		{map[string]string{"+message.type": "delay"}, []core.MessageType{core.MessageDelay}},
		{map[string]string{"message.type": "TRANSACTION"}, []core.MessageType{core.MessageTransaction}},
		{map[string]string{"message.type": "NORMAL"}, []core.MessageType{core.MessageNormal}},
	} {
		got := core.AcceptedMessageTypes(protocol.TopicConfig{TopicName: "t", Attributes: tc.attrs})
		if !slices.Equal(got, tc.want) {
			t.Errorf("AcceptedMessageTypes(%v) = %v, want %v", tc.attrs, got, tc.want)
		}
	}
}
