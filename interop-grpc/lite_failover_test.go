package interopgrpc

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	rmq "github.com/apache/rocketmq-clients/golang/v5"
	"github.com/apache/rocketmq-clients/golang/v5/credentials"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// liteOffsetOn asks the broker at addr for the lite consumer offsets it
// holds (APOGEE_GET_LITE_CONSUMER_OFFSETS from change 0: what a slave of
// it would follow) and returns group's offset in parent/lite.
func liteOffsetOn(addr, group, parent, lite string) (int64, bool, error) {
	body, _ := json.Marshal(protocol.LiteConsumerOffsetsRequest{Limit: 8192})
	r, err := remotingCall(addr, int(protocol.ReqApogeeGetLiteConsumerOffsets), nil, body, 5*time.Second)
	if err != nil {
		return 0, false, err
	}
	if r.Code != 0 {
		return 0, false, fmt.Errorf("%s answered %d %s", addr, r.Code, r.Remark)
	}
	var page protocol.LiteConsumerOffsetsBody
	if err := page.Decode(r.Body); err != nil {
		return 0, false, err
	}
	for _, o := range page.Offsets {
		if o.Group == group && o.Parent == parent && o.Lite == lite {
			return o.Offset, true, nil
		}
	}
	return 0, false, nil
}

// TestLiteOffsetsSurviveFailover: a LitePushConsumer (Go SDK v5.1.4) of a
// controller-mode group of three consumes ten lite messages in each of
// two lite topics, then unsubscribes the second; once both slaves hold
// the group's two lite offsets (their periodic sync,
// APOGEE_GET_LITE_CONSUMER_OFFSETS), the master is SIGKILLed and another
// member elected. Five more messages are sent to each lite topic at once.
// The consumer, kept across the failover, resumes its lite topic on the
// new master (its connection moved to another member, which serves its
// receives before its settings come again); a second consumer of the group
// subscribing to the second lite topic then gets its five too; none of the
// twenty acked before the kill comes again. The second lite topic makes
// the check deterministic: without the sync, the new master would start
// the group at its end at that subscription and skip the five (the kept
// consumer's 30 s subscription refresh may or may not come before the
// sends).
func TestLiteOffsetsSurviveFailover(t *testing.T) {
	t.Parallel()
	const parent, group, lt, lt2 = "LiteOff", "LiteOffGroup", "O1", "O2"
	g := startFoGroup(t)
	master := g.waitFullSet(t)
	createLiteTopicAt(t, master.addr, parent, 2, "")
	liteGroupAt(t, master.addr, group, parent, nil)
	wait.For(t, "the lite topic on every member", func() error {
		for _, b := range g.brokers {
			r, err := remotingCall(b.addr, 21, nil, nil, 5*time.Second) // GET_ALL_TOPIC_CONFIG
			if err != nil {
				return err
			}
			if !strings.Contains(string(r.Body), `"`+parent+`"`) {
				return fmt.Errorf("%s lacks it", b.addr)
			}
		}
		return nil
	})
	cfg := func(group string) *rmq.Config {
		return &rmq.Config{Endpoint: g.endpoints(), ConsumerGroup: group, Credentials: &credentials.SessionCredentials{}}
	}
	p := startProducer(t, cfg(""), rmq.WithTopics(parent))
	consumer := func(log *liteLog, lites ...string) rmq.LitePushConsumer {
		t.Helper()
		return startLiteConsumer(t, cfg(group), parent, 10*time.Second, log, nil, lites...)
	}
	log := &liteLog{}
	c := consumer(log, lt, lt2)
	before := seq("a", 10)
	for _, b := range before {
		sendLite(t, p, parent, lt, b)
		sendLite(t, p, parent, lt2, b)
	}
	log.waitBodies(t, lt, before)
	log.waitBodies(t, lt2, before)
	if err := c.UnSubscribeLite(lt2); err != nil {
		t.Fatal(err)
	}
	for _, b := range g.brokers {
		if b == master {
			continue
		}
		for _, l := range []string{lt, lt2} {
			wait.For(t, "the slave "+b.addr+" holds the group's offset 10 in "+l, func() error {
				off, ok, err := liteOffsetOn(b.addr, group, parent, l)
				if err != nil {
					return err
				}
				if !ok || off != 10 {
					return fmt.Errorf("offset %d (known %v)", off, ok)
				}
				return nil
			})
		}
	}

	_ = master.p.Stop(syscall.SIGKILL)
	wait.For(t, "a new master", func() error {
		st, err := g.state()
		if err != nil {
			return err
		}
		if st.master == "" || st.master == master.addr {
			return fmt.Errorf("the controllers name %q", st.master)
		}
		return nil
	})
	after := seq("b", 5)
	for _, body := range after {
		for _, l := range []string{lt, lt2} {
			wait.For(t, "send "+body+" to "+l+" on the new master", func() error {
				m := &rmq.Message{Topic: parent, Body: []byte(body)}
				m.SetLiteTopic(l)
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := p.Send(ctx, m)
				return err
			})
		}
	}
	log2 := &liteLog{}
	consumer(log2, lt2)
	for _, w := range []struct {
		log *liteLog
		lt  string
	}{{log, lt}, {log2, lt2}} {
		wait.For(t, "the messages sent to "+w.lt+" after the failover handled", func() error {
			got := w.log.bodies(w.lt)
			for _, body := range after {
				if !slices.Contains(got, body) {
					return fmt.Errorf("handled %v", got)
				}
			}
			return nil
		})
	}
	for _, l := range []*liteLog{log, log2} {
		for _, name := range []string{lt, lt2} {
			seen := map[string]int{}
			for _, body := range l.bodies(name) {
				if seen[body]++; strings.HasPrefix(body, "a-") && (seen[body] > 1 || l == log2) {
					t.Fatalf("%s of %s delivered again after the failover (handled %v): its ack was on every slave before the kill",
						body, name, l.bodies(name))
				}
			}
		}
	}
}
