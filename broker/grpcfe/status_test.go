package grpcfe

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/rmqpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// TestEveryReasonHasAStatus checks that the generated table gives every
// reason of the core a status code, and that errStatus uses it.
func TestEveryReasonHasAStatus(t *testing.T) {
	for _, r := range core.Reasons() {
		if int(r) >= len(reasonCodes) || reasonCodes[r] == rmqpb.Code_CODE_UNSPECIFIED {
			t.Errorf("reason %v has no status code: run go generate ./broker/core", r)
			continue
		}
		err := fmt.Errorf("wrapped: %w", &core.Error{Reason: r, Code: r.Code(), Remark: "remark"})
		if st := errStatus(err); st.Code != reasonCodes[r] || st.Message != "remark" {
			t.Errorf("errStatus(%v) = %v %q, want %v %q", r, st.Code, st.Message, reasonCodes[r], "remark")
		}
	}
	if got := codeOf(core.Reason(60000)); got != rmqpb.Code_INTERNAL_SERVER_ERROR {
		t.Errorf("codeOf(out of table) = %v", got)
	}
	if st := errStatus(nil); st.Code != rmqpb.Code_OK {
		t.Errorf("errStatus(nil) = %v", st.Code)
	}
}

// TestTranslateRefusals checks the statuses of messages the core's rules
// refuse (core.CheckClientTopic, CheckTag, CheckKey, CheckMessageGroup,
// CheckMessageType), and that an empty tag, key or message group is none.
func TestTranslateRefusals(t *testing.T) {
	str := func(s string) *string { return &s }
	msg := func(topic string, f func(sp *rmqpb.SystemProperties)) *rmqpb.Message {
		sp := &rmqpb.SystemProperties{MessageId: "01ABCDEF"}
		if f != nil {
			f(sp)
		}
		return &rmqpb.Message{Topic: &rmqpb.Resource{Name: topic}, SystemProperties: sp, Body: []byte("x")}
	}
	future := timestamppb.New(time.Now().Add(time.Hour))
	cases := []struct {
		name string
		m    *rmqpb.Message
		want rmqpb.Code
	}{
		{"ok", msg("t", nil), rmqpb.Code_OK},
		{"illegal topic", msg("a b", nil), rmqpb.Code_ILLEGAL_TOPIC},
		{"system topic", msg("TBW102", nil), rmqpb.Code_ILLEGAL_TOPIC},
		{"tag with bar", msg("t", func(sp *rmqpb.SystemProperties) { sp.Tag = str("a|b") }), rmqpb.Code_ILLEGAL_MESSAGE_TAG},
		{"blank tag", msg("t", func(sp *rmqpb.SystemProperties) { sp.Tag = str(" ") }), rmqpb.Code_ILLEGAL_MESSAGE_TAG},
		{"empty tag", msg("t", func(sp *rmqpb.SystemProperties) { sp.Tag = str("") }), rmqpb.Code_OK},
		{"blank key", msg("t", func(sp *rmqpb.SystemProperties) { sp.Keys = []string{"k", "\t"} }), rmqpb.Code_ILLEGAL_MESSAGE_KEY},
		{"empty key", msg("t", func(sp *rmqpb.SystemProperties) { sp.Keys = []string{"", "k"} }), rmqpb.Code_OK},
		{"long message group", msg("t", func(sp *rmqpb.SystemProperties) { sp.MessageGroup = str(strings.Repeat("g", 64)) }), rmqpb.Code_ILLEGAL_MESSAGE_GROUP},
		{"FIFO without group", msg("t", func(sp *rmqpb.SystemProperties) { sp.MessageType = rmqpb.MessageType_FIFO }), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"FIFO with empty group", msg("t", func(sp *rmqpb.SystemProperties) {
			sp.MessageType, sp.MessageGroup = rmqpb.MessageType_FIFO, str("")
		}), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"DELAY with group", msg("t", func(sp *rmqpb.SystemProperties) {
			sp.MessageType, sp.MessageGroup, sp.DeliveryTimestamp = rmqpb.MessageType_DELAY, str("g"), future
		}), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"undeclared FIFO", msg("t", func(sp *rmqpb.SystemProperties) { sp.MessageGroup = str("g") }), rmqpb.Code_OK},
		{"LITE without lite topic", msg("t", func(sp *rmqpb.SystemProperties) { sp.MessageType = rmqpb.MessageType_LITE }), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
		{"LITE", msg("t", func(sp *rmqpb.SystemProperties) { sp.MessageType, sp.LiteTopic = rmqpb.MessageType_LITE, str("L1") }), rmqpb.Code_OK},
		{"undeclared LITE", msg("t", func(sp *rmqpb.SystemProperties) { sp.LiteTopic = str("L1") }), rmqpb.Code_OK},
		{"bad lite topic", msg("t", func(sp *rmqpb.SystemProperties) { sp.LiteTopic = str("a$b") }), rmqpb.Code_ILLEGAL_LITE_TOPIC},
		{"long lite topic", msg("t", func(sp *rmqpb.SystemProperties) { sp.LiteTopic = str(strings.Repeat("l", 65)) }), rmqpb.Code_ILLEGAL_LITE_TOPIC},
		{"FIFO with lite topic", msg("t", func(sp *rmqpb.SystemProperties) { sp.MessageGroup, sp.LiteTopic = str("g"), str("L1") }), rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE},
	}
	for _, tc := range cases {
		var o outgoing
		keys := slices.Clone(tc.m.GetSystemProperties().GetKeys())
		err := translate(tc.m, &o, 1<<20)
		if got := errStatus(err).Code; got != tc.want {
			t.Errorf("%s: %v (%v), want %v", tc.name, got, err, tc.want)
		}
		if !slices.Equal(keys, tc.m.GetSystemProperties().GetKeys()) {
			t.Errorf("%s: translate changed the request's keys", tc.name)
		}
	}
}
