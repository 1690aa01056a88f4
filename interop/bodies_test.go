package interop

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/apogeemq/apogee/internal/wait"
)

// randomBody is incompressible; textBody compresses well.
func randomBody(n int, seed int64) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func textBody(n int) []byte {
	var buf bytes.Buffer
	for i := 0; buf.Len() < n; i++ {
		fmt.Fprintf(&buf, "line %d of a compressible body; ", i)
	}
	return buf.Bytes()[:n]
}

func TestBodiesRoundTrip(t *testing.T) {
	b := startBroker(t)
	p := newProducer(t, b)
	topic := uniq("TBodies")
	createTopic(t, b, topic, 4)

	// The client zlib-compresses single-message bodies of 4 KiB and more
	// (sysFlag bit 0); the broker stores and serves them as they are and the
	// consumer inflates them. The broker's limit is 4 MiB of stored body.
	cases := []struct {
		label string
		body  []byte
	}{
		{"empty", nil},
		{"1B", []byte{0}},
		{"100B", randomBody(100, 1)},
		{"4095B", randomBody(4095, 2)},
		{"4096B-random", randomBody(4096, 3)},
		{"4096B-text", textBody(4096)},
		{"4097B", randomBody(4097, 4)},
		{"64KiB", randomBody(64<<10, 5)},
		{"256KiB+1-random", randomBody(256<<10+1, 6)}, // more than one pull's byte budget
		{"1MiB-random", randomBody(1<<20, 7)},
		{"4MiB-text", textBody(4 << 20)},
		{"4MiB-64KiB-random", randomBody(4<<20-64<<10, 8)},
		{"binary-zeros-70000", make([]byte, 70000)},
	}
	want := map[string][]byte{}
	for _, c := range cases {
		m := primitive.NewMessage(topic, c.body)
		m.WithProperty("label", c.label)
		res, err := p.SendSync(context.Background(), m)
		if err != nil {
			t.Fatalf("send %s: %v", c.label, err)
		}
		if res.Status != primitive.SendOK {
			t.Fatalf("send %s: status %v", c.label, res.Status)
		}
		want[c.label] = c.body
	}
	// A batch (never compressed by the client) of mixed sizes.
	var batch []*primitive.Message
	for i, n := range []int{0, 1, 5000, 70000, 300 << 10} {
		label := fmt.Sprintf("batch-%d-%dB", i, n)
		body := randomBody(n, int64(100+i))
		m := primitive.NewMessage(topic, body)
		m.WithProperty("label", label)
		batch = append(batch, m)
		want[label] = body
	}
	if res, err := p.SendSync(context.Background(), batch...); err != nil || res.Status != primitive.SendOK {
		t.Fatalf("send batch: %v %v", res, err)
	}

	rec := newRecorder()
	startPush(t, b, uniq("GBodies"), topic, all, rec)
	labels := func() map[string]*primitive.MessageExt {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		out := map[string]*primitive.MessageExt{}
		for _, m := range rec.msgs {
			out[m.GetProperty("label")] = m
		}
		return out
	}
	wait.Within(t, 90*time.Second, fmt.Sprintf("%d bodies", len(want)), func() error {
		if n := len(labels()); n < len(want) {
			return fmt.Errorf("%d received", n)
		}
		return nil
	})
	got := labels()
	for label, body := range want {
		m := got[label]
		if m == nil {
			t.Errorf("%s: not received", label)
			continue
		}
		if !bytes.Equal(m.Body, body) {
			t.Errorf("%s: body of %d bytes came back as %d bytes (equal prefix %d)", label, len(body), len(m.Body), commonPrefix(m.Body, body))
		}
		compressed := m.SysFlag&primitive.FlagCompressed != 0
		if wantCompressed := len(body) >= 4096 && label[:5] != "batch"; compressed != wantCompressed {
			t.Errorf("%s: compressed flag %v, want %v (sysFlag %#x)", label, compressed, wantCompressed, m.SysFlag)
		}
	}
	if rec.received() != len(want) {
		t.Errorf("received %d messages for %d sent", rec.received(), len(want))
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestBodyOverLimit: 4 MiB of random bytes grows when the client compresses
// it, past the broker's 4 MiB limit. The send must fail with an error the
// client reports (MESSAGE_ILLEGAL), and the producer must keep working.
func TestBodyOverLimit(t *testing.T) {
	b := startBroker(t)
	p := newProducer(t, b)
	topic := uniq("TOverLimit")
	createTopic(t, b, topic, 2)
	res, err := p.SendSync(context.Background(), primitive.NewMessage(topic, randomBody(4<<20, 9)))
	if err == nil {
		t.Fatalf("an over-limit body was accepted: %v", res)
	}
	t.Logf("over-limit send: %v", err)
	sendAll(t, p, topic, "", []string{"after-over-limit"})
	drain(t, b, topic, []string{"after-over-limit"}, all)
}
