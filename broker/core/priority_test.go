package core

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// newPriorityTopic creates an 8-queue topic of message.type=PRIORITY.
func newPriorityTopic(t *testing.T, c *Core, topic string) {
	t.Helper()
	if err := c.Admin().CreateTopic(&TopicRequest{Topic: topic, ReadQueueNums: 8, WriteQueueNums: 8, Perm: 6,
		Attributes: "+message.type=PRIORITY"}); err != nil {
		t.Fatal(err)
	}
}

// prioSend sends one message to queue q with the given extra properties
// and returns the queue it was stored in.
func prioSend(t *testing.T, c *Core, topic string, q int32, kv ...string) int32 {
	t.Helper()
	r := sendReq(topic, q, 16)
	r.Properties = append(r.Properties, testProps(kv...)...)
	var res SendResult
	if err := c.Send(r, &res); err != nil {
		t.Fatalf("send %v: %v", kv, err)
	}
	return res.QueueID
}

// A message's priority is its queue (RocketMQ 5.4's SendMessageProcessor):
// min(priority, writeQueueNums-1), whatever queue the producer chose; a
// value that is not a priority leaves the producer's choice; a FIFO
// message loses the property and keeps its queue.
func TestPrioritySendPicksTheQueue(t *testing.T) {
	c := newTestCore(t, nil)
	newPriorityTopic(t, c, "Prio")
	for _, tc := range []struct {
		producerQueue int32
		kv            []string
		want          int32
	}{
		{0, []string{message.PropPriority, "3"}, 3},
		{5, []string{message.PropPriority, "0"}, 0},
		{0, []string{message.PropPriority, "7"}, 7},
		{0, []string{message.PropPriority, "1000"}, 7},
		{2, []string{message.PropPriority, "-1"}, 2},
		{2, []string{message.PropPriority, "high"}, 2},
		{4, []string{message.PropPriority, "99999999999"}, 4},
	} {
		if got := prioSend(t, c, "Prio", tc.producerQueue, tc.kv...); got != tc.want {
			t.Errorf("a send to queue %d with %v was stored in queue %d, want %d", tc.producerQueue, tc.kv, got, tc.want)
		}
	}

	// A FIFO message (to a topic of no declared type: a PRIORITY topic
	// refuses it) is stored without the priority, in the producer's
	// queue; a priority message keeps it.
	if got := prioSend(t, c, "PrioFifo", 1, message.PropPriority, "6", message.PropJavaShardingKey, "g"); got != 1 {
		t.Errorf("a FIFO message with a priority was stored in queue %d, want 1", got)
	}
	var pr PopResult
	wait.For(t, "the FIFO message popped", func() error {
		err := c.Pop(&PopRequest{Group: []byte("gq1"), Topic: []byte("PrioFifo"), QueueID: 1, MaxMsgs: 8, InvisibleTime: 60000, FromFirst: true}, &pr)
		if err != nil || len(pr.Msgs) != 1 {
			return fmt.Errorf("pop of queue 1: %d messages, %v", len(pr.Msgs), err)
		}
		return nil
	})
	v, err := message.Decode(pr.Record(0), false)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := v.Property(message.PropPriority); ok {
		t.Errorf("the FIFO message kept its priority %q", p)
	}
	if _, ok := v.Property(message.PropJavaShardingKey); !ok {
		t.Error("the FIFO message lost its message group")
	}
	if err := c.Pop(&PopRequest{Group: []byte("gq3"), Topic: []byte("Prio"), QueueID: 3, MaxMsgs: 8, InvisibleTime: 60000, FromFirst: true}, &pr); err != nil || len(pr.Msgs) != 1 {
		t.Fatalf("pop of queue 3: %d messages, %v", len(pr.Msgs), err)
	}
	if v, err = message.Decode(pr.Record(0), false); err != nil {
		t.Fatal(err)
	}
	if p, _ := v.Property(message.PropPriority); string(p) != "3" {
		t.Errorf("the priority message's priority property: %q, want 3", p)
	}
}

// A PRIORITY topic's pops take the highest queue first (RocketMQ 5.4's
// priority mode, priorityOrderAsc): a backlog of every priority comes out
// from the highest to the lowest, within a priority in send order.
func TestPriorityPopHighestFirst(t *testing.T) {
	c := newTestCore(t, nil)
	newPriorityTopic(t, c, "PrioPop")
	const perPriority = 3
	for j := range perPriority {
		for p := range 8 {
			prioSend(t, c, "PrioPop", 0, message.PropPriority, strconv.Itoa(p), "KEYS", fmt.Sprintf("p%d-%d", p, j))
		}
	}
	for q := range int32(8) {
		waitDispatched(t, c, "PrioPop", q, perPriority)
	}
	var got []string
	var pr PopResult
	wait.For(t, "the backlog popped one message at a time", func() error {
		for len(got) < 8*perPriority {
			if err := c.Pop(&PopRequest{Group: []byte("pg"), Topic: []byte("PrioPop"), QueueID: -1, MaxMsgs: 1, InvisibleTime: 60000, FromFirst: true}, &pr); err != nil {
				return err
			}
			if len(pr.Msgs) == 0 {
				return fmt.Errorf("%d popped: %v", len(got), got)
			}
			v, err := message.Decode(pr.Record(0), false)
			if err != nil {
				return err
			}
			k, _ := v.Property(message.PropKeys)
			got = append(got, string(k))
		}
		return nil
	})
	var want []string
	for p := 7; p >= 0; p-- {
		for j := range perPriority {
			want = append(want, fmt.Sprintf("p%d-%d", p, j))
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pop order:\n got %v\nwant %v", got, want)
	}

	// An orderly (FIFO) pop of the topic is no priority pop (RocketMQ
	// excludes order requests from priority mode): it still serves.
	prioSend(t, c, "PrioPop", 0, message.PropPriority, "2")
	wait.For(t, "an orderly pop of the priority topic", func() error {
		err := c.Pop(&PopRequest{Group: []byte("og"), Topic: []byte("PrioPop"), QueueID: -1, MaxMsgs: 32, InvisibleTime: 60000, FromFirst: true, Orderly: true}, &pr)
		if err != nil || len(pr.Msgs) == 0 {
			return fmt.Errorf("%d messages, %v", len(pr.Msgs), err)
		}
		return nil
	})
}

// A retry of a PRIORITY topic comes after the backlog of new messages of
// every priority (RocketMQ's default popFromRetryProbabilityForPriority=0:
// retries as the lowest priority).
func TestPriorityRetryAfterBacklog(t *testing.T) {
	c := newTestCore(t, nil)
	newPriorityTopic(t, c, "PrioRetry")
	prioSend(t, c, "PrioRetry", 0, message.PropPriority, "7", "KEYS", "first")
	var pr PopResult
	wait.For(t, "the first message popped", func() error {
		err := c.Pop(&PopRequest{Group: []byte("rg"), Topic: []byte("PrioRetry"), QueueID: -1, MaxMsgs: 1, InvisibleTime: 1, FromFirst: true}, &pr)
		if err != nil || len(pr.Msgs) != 1 {
			return fmt.Errorf("%d messages, %v", len(pr.Msgs), err)
		}
		return nil
	})
	visibleAt := time.UnixMilli(pr.PopTime + 1)
	prioSend(t, c, "PrioRetry", 0, message.PropPriority, "7", "KEYS", "high")
	prioSend(t, c, "PrioRetry", 0, message.PropPriority, "0", "KEYS", "low")
	prioSend(t, c, "PrioRetry", 3, "KEYS", "none") // no priority: the producer's queue
	waitDispatched(t, c, "PrioRetry", 7, 2)
	waitDispatched(t, c, "PrioRetry", 0, 1)
	waitDispatched(t, c, "PrioRetry", 3, 1)
	wait.Until(t, "the first message's invisible time passed", func() bool { return time.Now().After(visibleAt) })

	var got []string
	var attempts []int32
	wait.For(t, "the backlog and the retry popped", func() error {
		for len(got) < 4 {
			if err := c.Pop(&PopRequest{Group: []byte("rg"), Topic: []byte("PrioRetry"), QueueID: -1, MaxMsgs: 32, InvisibleTime: 60000}, &pr); err != nil {
				return err
			}
			for i := range pr.Msgs {
				v, err := message.Decode(pr.Record(i), false)
				if err != nil {
					return err
				}
				k, _ := v.Property(message.PropKeys)
				got = append(got, string(k))
				attempts = append(attempts, pr.Msgs[i].Attempts)
			}
			if len(got) < 4 {
				return fmt.Errorf("%d popped: %v", len(got), got)
			}
		}
		return nil
	})
	if want := []string{"high", "none", "low", "first"}; !slices.Equal(got, want) || attempts[3] != 2 {
		t.Fatalf("pop order %v (attempts %v): want %v, the retry of first last", got, attempts, want)
	}
}

// RocketMQ's priorityOrderAsc=false (PriorityQueueZeroHighest: queue 0 is
// the highest priority) and popFromRetryProbabilityForPriority=100
// (PriorityRetryFirstPercent: retries before the backlog).
func TestPriorityOptions(t *testing.T) {
	c := newTestCore(t, func(o *Options) { o.PriorityQueueZeroHighest, o.PriorityRetryFirstPercent = true, 100 })
	newPriorityTopic(t, c, "PrioOpts")
	prioSend(t, c, "PrioOpts", 0, message.PropPriority, "5", "KEYS", "first")
	var pr PopResult
	wait.For(t, "the first message popped", func() error {
		err := c.Pop(&PopRequest{Group: []byte("og"), Topic: []byte("PrioOpts"), QueueID: -1, MaxMsgs: 1, InvisibleTime: 1, FromFirst: true}, &pr)
		if err != nil || len(pr.Msgs) != 1 {
			return fmt.Errorf("%d messages, %v", len(pr.Msgs), err)
		}
		return nil
	})
	visibleAt := time.UnixMilli(pr.PopTime + 1)
	for _, p := range []string{"7", "3", "0"} {
		prioSend(t, c, "PrioOpts", 0, message.PropPriority, p, "KEYS", "p"+p)
	}
	for _, q := range []int32{0, 3, 7} {
		waitDispatched(t, c, "PrioOpts", q, 1)
	}
	wait.Until(t, "the first message's invisible time passed", func() bool { return time.Now().After(visibleAt) })
	if err := c.Pop(&PopRequest{Group: []byte("og"), Topic: []byte("PrioOpts"), QueueID: -1, MaxMsgs: 32, InvisibleTime: 60000}, &pr); err != nil {
		t.Fatal(err)
	}
	var got []string
	for i := range pr.Msgs {
		v, err := message.Decode(pr.Record(i), false)
		if err != nil {
			t.Fatal(err)
		}
		k, _ := v.Property(message.PropKeys)
		got = append(got, string(k))
	}
	if want := []string{"first", "p0", "p3", "p7"}; !slices.Equal(got, want) {
		t.Fatalf("popped %v, want %v (the retry first, then queue 0 up)", got, want)
	}

	opts := testOptions(t, t.TempDir())
	opts.PriorityRetryFirstPercent = 101
	if _, _, err := opts.withDefaults(); err == nil {
		t.Error("PriorityRetryFirstPercent 101 accepted")
	}
}

// The PRIORITY type: a topic attribute the admin protocol sets, the route's
// accepted types (PRIORITY alone, as RocketMQ's proxy), and a priority
// message refused by a topic of another declared type where the send asks
// for the check (gRPC).
func TestPriorityTopicType(t *testing.T) {
	c := newTestCore(t, nil)
	newPriorityTopic(t, c, "PrioType")
	cfg, ok := c.TopicConfig("PrioType")
	if !ok || cfg.Attributes["message.type"] != "PRIORITY" {
		t.Fatalf("the topic's attributes: %v (%v)", cfg.Attributes, ok)
	}
	// RocketMQ 5's rule: a PRIORITY topic takes PRIORITY alone, an untyped
	// one is NORMAL (names.go).
	if got := AcceptedMessageTypes(cfg); !slices.Equal(got, []MessageType{MessagePriority}) {
		t.Errorf("a PRIORITY topic accepts %v", got)
	}
	if got := AcceptedMessageTypes(protocol.TopicConfig{TopicName: "Untyped"}); !slices.Equal(got, []MessageType{MessageNormal}) {
		t.Errorf("a topic without message.type accepts %v", got)
	}
	prioSend(t, c, "PrioType", -1) // a NORMAL message unchecked (remoting, as RocketMQ's broker): accepted

	if err := c.Admin().CreateTopic(&TopicRequest{Topic: "NormalType", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6,
		Attributes: "+message.type=NORMAL"}); err != nil {
		t.Fatal(err)
	}
	r := sendReq("NormalType", 0, 16)
	r.Properties = append(r.Properties, testProps(message.PropPriority, "1")...)
	r.CheckTopicType = true // the gRPC front end's check (RocketMQ's proxy's)
	var res SendResult
	if err := c.Send(r, &res); ReasonOf(err) != ReasonTopicMessageTypeMismatch {
		t.Fatalf("a PRIORITY message to a NORMAL topic: %v, want %v", err, ReasonTopicMessageTypeMismatch)
	}
	if err := CheckMessageType(MessagePriority, true, false); ReasonOf(err) != ReasonMessageTypeConflict {
		t.Errorf("a PRIORITY message with a message group: %v", err)
	}
	if MessagePriority.String() != "PRIORITY" {
		t.Errorf("MessagePriority.String() = %q", MessagePriority.String())
	}
}
