package broker

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// fastLevels are 18 delay levels of 25 ms steps (level n = 25n ms), so
// that retries and delays come back within tests' time.
var fastLevels = func() string {
	var b strings.Builder
	for i := 1; i <= 18; i++ {
		if i > 1 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(25*i) + "ms")
	}
	return b.String()
}()

// levelDelay is the delay of level n of fastLevels.
func levelDelay(n int) time.Duration { return time.Duration(25*n) * time.Millisecond }

// featureHarness is a harness with fast delay levels and short
// transaction and progress intervals.
func featureHarness(t *testing.T, mutate func(*Options)) *harness {
	t.Helper()
	return newHarness(t, func(o *Options) {
		o.Core.DelayLevels = fastLevels
		o.Core.ProgressFlushInterval = 20 * time.Millisecond
		o.Core.TransactionTimeout = 200 * time.Millisecond
		o.Core.TransactionCheckInterval = 300 * time.Millisecond
		if mutate != nil {
			mutate(o)
		}
	})
}

// arrive bounds a pullN that expects its n records: the pulls are held until
// messages come, so the bound only ends a test that would hang.
const arrive = wait.DefaultTimeout

// pulled is a record copied out of a pull response.
type pulled struct {
	message.View
	raw []byte
}

// pullN pulls (topic, q) from offset on with the subscription "*" carried
// by the request until n records arrived or within passed; it returns what
// it got, copied.
func pullN(t testing.TB, cl *remoting.Client, topic string, q int32, from int64, n int, within time.Duration) []pulled {
	t.Helper()
	return pullSub(t, cl, "pullgroup", topic, q, from, n, within, "*", "TAG")
}

// pullSub is pullN with a subscription and expression type of its own.
func pullSub(t testing.TB, cl *remoting.Client, group, topic string, q int32, from int64, n int, within time.Duration, sub, expr string) []pulled {
	t.Helper()
	var out []pulled
	deadline := time.Now().Add(within)
	off := from
	for len(out) < n {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		resp := invoke(t, cl, pullRequest(pullArgs{group: group, topic: topic, queueID: q, offset: off,
			sysFlag: protocol.PullFlagSuspend | protocol.PullFlagSubscription, suspendMs: max(left.Milliseconds(), 1),
			sub: sub, expr: expr}))
		switch resp.Code {
		case protocol.RespSuccess:
			hdr := pullHeaders(t, resp)
			for _, v := range decodeBody(t, resp.Body) {
				raw := append([]byte(nil), v.Bytes()...)
				cp, _ := message.Decode(raw, true)
				out = append(out, pulled{View: cp, raw: raw})
			}
			off = hdr.NextBeginOffset
		case protocol.RespPullNotFound, protocol.RespPullRetryImmediately:
			off = pullHeaders(t, resp).NextBeginOffset
		case protocol.RespPullOffsetMoved:
			off = pullHeaders(t, resp).NextBeginOffset
		default:
			t.Fatalf("pull %s/%d@%d: code %d %s", topic, q, off, resp.Code, resp.Remark)
		}
	}
	return out
}

// pullAll pulls what (topic, q) holds now, from offset 0 on, without
// waiting for more (an unknown topic holds nothing).
func pullAll(t testing.TB, cl *remoting.Client, topic string, q int32) []pulled {
	t.Helper()
	var out []pulled
	for off := int64(0); ; {
		resp := invoke(t, cl, pullRequest(pullArgs{group: "pullgroup", topic: topic, queueID: q, offset: off,
			sysFlag: protocol.PullFlagSubscription, sub: "*", expr: "TAG"}))
		switch resp.Code {
		case protocol.RespSuccess:
			for _, v := range decodeBody(t, resp.Body) {
				raw := append([]byte(nil), v.Bytes()...)
				cp, _ := message.Decode(raw, true)
				out = append(out, pulled{View: cp, raw: raw})
			}
			off = pullHeaders(t, resp).NextBeginOffset
		case protocol.RespPullNotFound, protocol.RespTopicNotExist:
			return out
		default:
			t.Fatalf("pull %s/%d@%d: code %d %s", topic, q, off, resp.Code, resp.Remark)
		}
	}
}

// pullNone checks that nothing more comes to (topic, q) from offset on
// within window. The window is what is tested ("no duplicate follows"), not
// a wait for something; use it after the expected records were pulled.
func pullNone(t testing.TB, cl *remoting.Client, topic string, q int32, from int64, window time.Duration) {
	t.Helper()
	if more := pullN(t, cl, topic, q, from, 1, window); len(more) != 0 {
		t.Fatalf("%s/%d: %q came at offset %d", topic, q, more[0].Body(), more[0].QueueOffset())
	}
}

// waitDispatched waits until everything the broker's store has written is
// visible to pulls: after it, a queue's max offset counts every message
// stored before the call (a send or an END_TRANSACTION is answered once
// what it puts is stored).
func (h *harness) waitDispatched() {
	h.t.Helper()
	st := h.b.Store()
	written := st.WrittenOffset()
	wait.For(h.t, "dispatch of everything stored", func() error {
		if d := st.DispatchedOffset(); d < written {
			return fmt.Errorf("dispatched to commit-log offset %d of %d", d, written)
		}
		return nil
	})
}

// prop returns a property of a record as a string ("" when absent).
func prop(v message.View, key string) string {
	b, _ := v.Property(key)
	return string(b)
}

// sendBackRequest is CONSUMER_SEND_MSG_BACK as the Go client's push
// consumer writes it (maxReconsumeTimes < 0: not sent).
func sendBackRequest(group string, offset int64, delayLevel, maxReconsume int32, originTopic, originMsgID string) *protocol.Command {
	cmd := goRequest(protocol.ReqConsumerSendMsgBack)
	h := protocol.ConsumerSendMsgBackRequest{Group: group, Offset: offset, DelayLevel: delayLevel,
		OriginTopic: originTopic, OriginMsgID: originMsgID, BrokerName: "broker-a"}
	if maxReconsume >= 0 {
		h.MaxReconsumeTimes, h.HasMaxReconsumeTimes = maxReconsume, true
	}
	h.Encode(&cmd.Ext)
	return cmd
}

// mustSend sends and fails the test unless the answer is SUCCESS.
func mustSend(t testing.TB, cl *remoting.Client, req *protocol.Command) *protocol.Command {
	t.Helper()
	resp := invoke(t, cl, req)
	if resp.Code != 0 {
		t.Fatalf("send to %s: code %d %s", ext(req, "topic"), resp.Code, resp.Remark)
	}
	return resp
}

// storeDelay is how long after the first record the second was stored.
func storeDelay(first, second message.View) time.Duration {
	return time.Duration(second.StoreTimestamp()-first.StoreTimestamp()) * time.Millisecond
}
