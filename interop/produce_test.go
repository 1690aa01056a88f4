package interop

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/apogeemq/apogee/internal/wait"
)

// drain consumes topic with a fresh group from the first offset until every
// wanted body has arrived, and returns what was received.
func drain(t *testing.T, b *Broker, topic string, want []string, sel consumer.MessageSelector) *recorder {
	t.Helper()
	rec := newRecorder()
	stop := startPush(t, b, uniq("GDrain"), topic, sel, rec)
	defer stop()
	wait.Until(t, fmt.Sprintf("%d messages of %s", len(want), topic), func() bool {
		return rec.distinct() >= len(want)
	})
	if m := missing(rec, want); m != "" {
		t.Fatalf("not received: %s", m)
	}
	return rec
}

var all = consumer.MessageSelector{Type: consumer.TAG, Expression: "*"}

func TestSendSync(t *testing.T) {
	b := startBroker(t)
	p := newProducer(t, b)
	topic := uniq("TSync")
	want := bodies("sync", 40)
	perQueue := map[int]int64{}
	for i, body := range want {
		m := primitive.NewMessage(topic, []byte(body))
		m.WithTag("TagA")
		m.WithKeys([]string{fmt.Sprintf("key-%d", i)})
		m.WithProperty("seq", fmt.Sprint(i))
		res, err := p.SendSync(context.Background(), m)
		if err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
		if res.Status != primitive.SendOK {
			t.Fatalf("send %d: status %v", i, res.Status)
		}
		if res.MsgID == "" || res.OffsetMsgID == "" || res.MessageQueue == nil {
			t.Fatalf("send %d: incomplete result %+v", i, res)
		}
		// Queue offsets are dense per queue, from 0.
		q := res.MessageQueue.QueueId
		if res.QueueOffset != perQueue[q] {
			t.Fatalf("send %d to queue %d: queue offset %d, want %d", i, q, res.QueueOffset, perQueue[q])
		}
		perQueue[q]++
	}
	if len(perQueue) < 2 {
		t.Errorf("40 sends used %d queue(s); the producer should spread them", len(perQueue))
	}

	rec := drain(t, b, topic, want, all)
	for _, m := range rec.msgs {
		seq := m.GetProperty("seq")
		if m.GetTags() != "TagA" || m.GetKeys() != "key-"+seq || m.Topic != topic {
			t.Fatalf("message %q came back with tags %q keys %q seq %q topic %q", m.Body, m.GetTags(), m.GetKeys(), seq, m.Topic)
		}
		if want := fmt.Sprintf("sync-%04s", seq); string(m.Body) != want && seq != "" {
			// bodies() pads with zeros; compare numerically instead.
			var n int
			fmt.Sscan(seq, &n)
			if string(m.Body) != fmt.Sprintf("sync-%04d", n) {
				t.Fatalf("body %q with seq %s", m.Body, seq)
			}
		}
		if m.MsgId == "" || m.OffsetMsgId == "" {
			t.Fatalf("message %q without ids: %q %q", m.Body, m.MsgId, m.OffsetMsgId)
		}
	}
}

func TestSendAsync(t *testing.T) {
	b := startBroker(t)
	p := newProducer(t, b)
	topic := uniq("TAsync")
	// No route yet: the first sends go by TBW102's route and the broker
	// creates the topic under concurrent sends.
	want := bodies("async", 100)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for _, body := range want {
		wg.Add(1)
		err := p.SendAsync(context.Background(), func(ctx context.Context, res *primitive.SendResult, err error) {
			defer wg.Done()
			if err == nil && res.Status != primitive.SendOK {
				err = fmt.Errorf("status %v", res.Status)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}, primitive.NewMessage(topic, []byte(body)))
		if err != nil {
			wg.Done()
			t.Fatalf("SendAsync: %v", err)
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(wait.DefaultTimeout): // a bound on a hung test only
		t.Fatalf("async callbacks did not all run in %v", wait.DefaultTimeout)
	}
	if len(errs) > 0 {
		t.Fatalf("%d async sends failed, first: %v", len(errs), errs[0])
	}
	drain(t, b, topic, want, all)
}

func TestSendOneWay(t *testing.T) {
	b := startBroker(t)
	p := newProducer(t, b)
	topic := uniq("TOneWay")
	createTopic(t, b, topic, 4)
	want := bodies("oneway", 50)
	for _, body := range want {
		if err := p.SendOneWay(context.Background(), primitive.NewMessage(topic, []byte(body))); err != nil {
			t.Fatalf("SendOneWay: %v", err)
		}
	}
	drain(t, b, topic, want, all)
}

func TestSendBatch(t *testing.T) {
	b := startBroker(t)
	p := newProducer(t, b)
	topic := uniq("TBatch")
	var want []string
	for round := 0; round < 5; round++ {
		var msgs []*primitive.Message
		for i := 0; i < 20; i++ {
			body := fmt.Sprintf("batch-%d-%02d", round, i)
			want = append(want, body)
			m := primitive.NewMessage(topic, []byte(body))
			m.WithTag("TagB")
			m.WithKeys([]string{body})
			m.WithProperty("round", fmt.Sprint(round))
			msgs = append(msgs, m)
		}
		res, err := p.SendSync(context.Background(), msgs...)
		if err != nil {
			t.Fatalf("batch %d: %v", round, err)
		}
		if res.Status != primitive.SendOK {
			t.Fatalf("batch %d: status %v", round, res.Status)
		}
	}
	rec := drain(t, b, topic, want, all)
	// A batch goes to one queue in one piece: its messages keep their order
	// there, and each keeps its own tag, key and properties.
	for _, m := range rec.msgs {
		if m.GetTags() != "TagB" || m.GetKeys() != string(m.Body) || m.GetProperty("round") == "" {
			t.Fatalf("batch message %q came back with tags %q keys %q round %q", m.Body, m.GetTags(), m.GetKeys(), m.GetProperty("round"))
		}
	}
	if rec.received() != len(want) {
		t.Errorf("received %d messages for %d sent (duplicates?)", rec.received(), len(want))
	}
}
