package core

import (
	"slices"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

func TestCheckLiteTopic(t *testing.T) {
	for _, ok := range []string{"a", "L1", "session-42_x", strings.Repeat("z", MaxLiteTopicSize)} {
		if err := CheckLiteTopic(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "   ", "a$b", "a b", "a.b", "%LMQ%", "é", strings.Repeat("z", MaxLiteTopicSize+1)} {
		if err := CheckLiteTopic(bad); ReasonOf(err) != ReasonLiteTopicIllegal {
			t.Errorf("%q: %v, want %v", bad, err, ReasonLiteTopicIllegal)
		}
	}
}

// The type matrix of LITE: a LITE topic accepts LITE alone, a MIXED one
// accepts it without listing it, a lite message to another topic and a
// NORMAL message to a LITE topic are refused where the send asks for the
// check (gRPC), stored where it does not (remoting).
func TestLiteTypeMatrix(t *testing.T) {
	c := newTestCore(t, nil)
	for _, tc := range []struct{ topic, attrs string }{
		{"LiteP", "+message.type=LITE,+lite.topic.expiration=60"}, {"NormalP", "+message.type=NORMAL"}, {"MixedP", "+message.type=MIXED"},
	} {
		if err := c.Admin().CreateTopic(&TopicRequest{Topic: tc.topic, ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6,
			Attributes: tc.attrs}); err != nil {
			t.Fatal(tc.topic, err)
		}
	}
	cfg, _ := c.TopicConfig("LiteP")
	if got := AcceptedMessageTypes(cfg); !slices.Equal(got, []MessageType{MessageLite}) {
		t.Errorf("a LITE topic accepts %v", got)
	}
	if liteExpiration(cfg) != 60 {
		t.Errorf("lite.topic.expiration %v", cfg.Attributes)
	}
	mixed, _ := c.TopicConfig("MixedP")
	if got := AcceptedMessageTypes(mixed); slices.Contains(got, MessageLite) || len(got) != 4 {
		t.Errorf("a MIXED topic's route lists %v", got)
	}
	if liteExpiration(protocol.TopicConfig{}) != -1 {
		t.Error("no lite.topic.expiration is not -1")
	}
	send := func(topic string, lite bool, check bool) error {
		r := sendReq(topic, 0, 16)
		if lite {
			r.Properties = append(r.Properties, testProps(message.PropertyLiteTopic, "L1")...)
		}
		r.CheckTopicType = check
		var res SendResult
		return c.Send(r, &res)
	}
	for _, tc := range []struct {
		topic       string
		lite, check bool
		want        Reason
		ok          bool
	}{
		{"LiteP", true, true, 0, true},
		{"LiteP", false, true, ReasonTopicMessageTypeMismatch, false},
		{"NormalP", true, true, ReasonTopicMessageTypeMismatch, false},
		{"MixedP", true, true, 0, true},
		{"NormalP", true, false, 0, true}, // remoting: not checked, as RocketMQ's broker
		{"LiteP", false, false, 0, true},
	} {
		err := send(tc.topic, tc.lite, tc.check)
		if tc.ok != (err == nil) || (!tc.ok && ReasonOf(err) != tc.want) {
			t.Errorf("%s lite=%v check=%v: %v, want %v", tc.topic, tc.lite, tc.check, err, tc.want)
		}
	}
	if err := CheckMessageType(MessageLite, true, false); ReasonOf(err) != ReasonMessageTypeConflict {
		t.Errorf("a LITE message with a message group: %v", err)
	}
	if err := CheckMessageType(MessageLite, false, false); err != nil {
		t.Errorf("a LITE message: %v", err)
	}
	for _, bad := range []string{"+lite.topic.expiration=43201", "+lite.topic.expiration=-2", "+lite.topic.expiration=x"} {
		if err := c.Admin().CreateTopic(&TopicRequest{Topic: "BadExp", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6,
			Attributes: "+message.type=LITE," + bad}); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
}

// A lite group's configuration: the bind topic, the mode and quotas;
// refusals of a regular group and of another parent.
func TestLiteGroupChecks(t *testing.T) {
	c := newTestCore(t, nil)
	for _, tc := range []struct{ topic, attrs string }{{"LiteG", "+message.type=LITE"}, {"Other", "+message.type=LITE"}, {"Plain", ""}} {
		if err := c.Admin().CreateTopic(&TopicRequest{Topic: tc.topic, ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6, Attributes: tc.attrs}); err != nil {
			t.Fatal(err)
		}
	}
	g := protocol.DefaultSubscriptionGroupConfig("LG")
	g.Attributes = map[string]string{"+lite.bind.topic": "LiteG", "+lite.sub.model": "Exclusive", "+lite.sub.client.quota": "7"}
	if err := c.Admin().UpdateSubscriptionGroup(g); err != nil {
		t.Fatal(err)
	}
	if err := c.Admin().UpdateSubscriptionGroup(protocol.DefaultSubscriptionGroupConfig("Regular")); err != nil {
		t.Fatal(err)
	}
	lg, err := c.liteGroup("LG", "LiteG")
	if err != nil || !lg.Exclusive || lg.Quota != 7 {
		t.Fatalf("lite group %+v %v", lg, err)
	}
	if _, err := c.liteGroup("LG", "Other"); ReasonOf(err) != ReasonLiteBindTopic {
		t.Errorf("another parent: %v", err)
	}
	if _, err := c.liteGroup("Regular", "LiteG"); ReasonOf(err) != ReasonLiteGroupMode {
		t.Errorf("a regular group: %v", err)
	}
	if err := c.CheckLiteMode("LG"); ReasonOf(err) != ReasonLiteGroupMode {
		t.Errorf("a lite group in a regular receive: %v", err)
	}
	if err := c.CheckLiteMode("Regular"); err != nil {
		t.Errorf("a regular group in a regular receive: %v", err)
	}
}
