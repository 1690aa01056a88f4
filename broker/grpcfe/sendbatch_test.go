package grpcfe

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/rmqpb"
	"github.com/apogeemq/apogee/store"
)

// sendReq sends a request of several messages and returns the answer.
func (e *env) sendReq(msgs ...*rmqpb.Message) *rmqpb.SendMessageResponse {
	e.t.Helper()
	r, err := e.cli.SendMessage(e.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: msgs})
	if err != nil {
		e.t.Fatal(err)
	}
	if len(r.Entries) != len(msgs) {
		e.t.Fatalf("%d entries for %d messages: %v", len(r.Entries), len(msgs), r)
	}
	return r
}

// receiveAll receives n messages of topic for group (acking none), in
// as many receives as it takes.
func (e *env) receiveAll(group, topic string, n int) map[string]*rmqpb.Message {
	e.t.Helper()
	got := map[string]*rmqpb.Message{}
	wait.For(e.t, fmt.Sprintf("%d messages of %s received", n, topic), func() error {
		msgs, st := e.receive(group, topic, 32, time.Minute, 100*time.Millisecond, nil)
		if st.Code != rmqpb.Code_OK && st.Code != rmqpb.Code_MESSAGE_NOT_FOUND {
			return fmt.Errorf("receive: %v", st)
		}
		for _, m := range msgs {
			got[m.SystemProperties.MessageId] = m
		}
		if len(got) < n {
			return fmt.Errorf("%d received", len(got))
		}
		return nil
	})
	return got
}

// queuesHolding returns the queues of topic that hold messages, and how
// many each.
func (e *env) queuesHolding(topic string) map[int32]int64 {
	e.t.Helper()
	cfg, ok := e.core.TopicConfig(topic)
	if !ok {
		e.t.Fatalf("no topic %s", topic)
	}
	out := map[int32]int64{}
	for q := int32(0); q < cfg.ReadQueueNums; q++ {
		if n := e.core.MaxOffset(topic, q); n > 0 {
			out[q] = n
		}
	}
	return out
}

// TestSendBatchOneQueue: the messages of one request (NORMAL, one topic)
// are stored together in one queue, consecutively, each answered with its
// own id and queue offset and delivered with its own properties; the next
// request goes to the next queue. In both flush modes (sync: one wait).
func TestSendBatchOneQueue(t *testing.T) {
	for _, mode := range []store.FlushMode{store.FlushAsync, store.FlushSync} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			e := newEnv(t, func(o *core.Options) { o.Store.FlushMode = mode })
			e.route("B")
			const n = 32
			batch := func(round int) []*rmqpb.Message {
				var msgs []*rmqpb.Message
				for k := range n {
					m := msg("B", fmt.Sprintf("id-%d-%02d", round, k), fmt.Sprintf("body-%d-%02d", round, k))
					tag := fmt.Sprintf("tag-%02d", k)
					m.SystemProperties.Tag = &tag
					m.SystemProperties.Keys = []string{fmt.Sprintf("key-%02d", k)}
					m.UserProperties = map[string]string{"k": strconv.Itoa(k)}
					m.SystemProperties.BornTimestamp = timestamppb.New(time.UnixMilli(1_700_000_000_000 + int64(k)))
					msgs = append(msgs, m)
				}
				return msgs
			}
			for round := range 2 {
				r := e.sendReq(batch(round)...)
				if r.Status.Code != rmqpb.Code_OK {
					t.Fatalf("round %d: %v", round, r.Status)
				}
				for k, ent := range r.Entries {
					if ent.Status.Code != rmqpb.Code_OK || ent.MessageId != fmt.Sprintf("id-%d-%02d", round, k) || ent.Offset != int64(k) {
						t.Fatalf("round %d, entry %d: %v (want offset %d: a new queue's first batch)", round, k, ent, k)
					}
				}
			}
			e.dispatched("B", 2*n)
			held := e.queuesHolding("B")
			if len(held) != 2 {
				t.Fatalf("queues holding messages: %v, want two (a batch each)", held)
			}
			for q, c := range held {
				if c != n {
					t.Fatalf("queue %d holds %d, want %d", q, c, n)
				}
			}
			got := e.receiveAll("G", "B", 2*n)
			for round := range 2 {
				var q int32 = -1
				for k := range n {
					m := got[fmt.Sprintf("id-%d-%02d", round, k)]
					if m == nil {
						t.Fatalf("id-%d-%02d not delivered", round, k)
					}
					sp := m.SystemProperties
					if q < 0 {
						q = sp.QueueId
					}
					if sp.QueueId != q || sp.GetQueueOffset() != int64(k) {
						t.Fatalf("id-%d-%02d at queue %d offset %d, want queue %d offset %d", round, k, sp.QueueId, sp.GetQueueOffset(), q, k)
					}
					if string(m.Body) != fmt.Sprintf("body-%d-%02d", round, k) || sp.GetTag() != fmt.Sprintf("tag-%02d", k) ||
						strings.Join(sp.Keys, ",") != fmt.Sprintf("key-%02d", k) || m.UserProperties["k"] != strconv.Itoa(k) ||
						sp.GetBornTimestamp().AsTime().UnixMilli() != 1_700_000_000_000+int64(k) || sp.MessageType != rmqpb.MessageType_NORMAL {
						t.Fatalf("id-%d-%02d delivered as %v", round, k, m)
					}
				}
			}
		})
	}
}

// TestSendBatchMixed: in a request mixing kinds, the NORMAL messages to the
// first one's topic share a batch (one queue, consecutive offsets, in the
// request's order); a message with a group, a transactional one, a
// scheduled one and one to another topic are sent alone with their own
// results (the group's queue, a transaction id, a recall handle); a
// message the front end refuses gets its own status; the answer says
// MULTIPLE_RESULTS.
func TestSendBatchMixed(t *testing.T) {
	e := newEnv(t, nil)
	e.typedTopic("M", "MIXED")
	e.route("U")
	grouped := msg("M", "g0", "g")
	grouped.SystemProperties.MessageGroup = new(string)
	*grouped.SystemProperties.MessageGroup = "grp"
	tx := msg("M", "t0", "t")
	tx.SystemProperties.MessageType = rmqpb.MessageType_TRANSACTION
	big := msg("M", "big", strings.Repeat("x", 1<<20+1))
	timed := msg("M", "d0", "d")
	timed.SystemProperties.DeliveryTimestamp = timestamppb.New(time.Now().Add(time.Hour))
	badKey := msg("M", "bad", "b")
	badKey.UserProperties = map[string]string{"TAGS": "x"}
	r := e.sendReq(msg("M", "a0", "a0"), grouped, msg("M", "a1", "a1"), tx, big, msg("M", "a2", "a2"),
		msg("U", "u0", "u0"), badKey, timed, msg("M", "a3", "a3"))
	if r.Status.Code != rmqpb.Code_MULTIPLE_RESULTS {
		t.Fatalf("status %v", r.Status)
	}
	want := []rmqpb.Code{rmqpb.Code_OK, rmqpb.Code_OK, rmqpb.Code_OK, rmqpb.Code_OK, rmqpb.Code_MESSAGE_BODY_TOO_LARGE,
		rmqpb.Code_OK, rmqpb.Code_OK, rmqpb.Code_ILLEGAL_MESSAGE_PROPERTY_KEY, rmqpb.Code_OK, rmqpb.Code_OK}
	ids := []string{"a0", "g0", "a1", "t0", "big", "a2", "u0", "bad", "d0", "a3"}
	for i, ent := range r.Entries {
		if ent.Status.Code != want[i] || ent.MessageId != ids[i] {
			t.Fatalf("entry %d: %v, want %v for %s", i, ent, want[i], ids[i])
		}
	}
	if r.Entries[3].TransactionId == "" || r.Entries[8].RecallHandle == "" {
		t.Fatalf("the half message's entry %v, the scheduled one's %v", r.Entries[3], r.Entries[8])
	}
	if r.Entries[0].TransactionId != "" || r.Entries[0].RecallHandle != "" {
		t.Fatalf("a batch entry: %v", r.Entries[0])
	}
	batch := []int{0, 2, 5, 9}
	first := r.Entries[0].Offset
	for k, i := range batch {
		if r.Entries[i].Offset != first+int64(k) {
			t.Fatalf("batch entry %s at %d, want %d", ids[i], r.Entries[i].Offset, first+int64(k))
		}
	}
	// Delivered: the batch in one queue at its offsets, the group's
	// message in its own (the half and the scheduled one are not due).
	e.dispatched("M", 5)
	got := e.receiveAll("G", "M", 5)
	q := got["a0"].SystemProperties.QueueId
	for k, i := range batch {
		sp := got[ids[i]].SystemProperties
		if sp.QueueId != q || sp.GetQueueOffset() != first+int64(k) {
			t.Fatalf("%s at queue %d offset %d, want queue %d offset %d", ids[i], sp.QueueId, sp.GetQueueOffset(), q, first+int64(k))
		}
	}
	if g := got["g0"]; g == nil || g.SystemProperties.GetMessageGroup() != "grp" || g.SystemProperties.GetQueueOffset() != r.Entries[1].Offset {
		t.Fatalf("the group's message: %v", g)
	}
	if u := e.receiveAll("G", "U", 1)["u0"]; u == nil || string(u.Body) != "u0" {
		t.Fatalf("the other topic's message: %v", u)
	}
}

// TestSendBatchRefusedTogether: what the core refuses for the batch as a
// whole (a type the topic does not take, back-pressure) fails every entry
// of the batch with the same status, and stores none of them; a message
// sent alone in the same request keeps its own result.
func TestSendBatchRefusedTogether(t *testing.T) {
	e := newEnv(t, nil)
	e.typedTopic("F", "FIFO")
	grouped := msg("F", "g0", "g")
	grouped.SystemProperties.MessageGroup = new(string)
	*grouped.SystemProperties.MessageGroup = "grp"
	r := e.sendReq(msg("F", "a0", "a"), grouped, msg("F", "a1", "a"), msg("F", "a2", "a"))
	if r.Status.Code != rmqpb.Code_MULTIPLE_RESULTS {
		t.Fatalf("status %v", r.Status)
	}
	for i, ent := range r.Entries {
		want := rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE
		if i == 1 {
			want = rmqpb.Code_OK
		}
		if ent.Status.Code != want || (i != 1 && ent.Status.Message != r.Entries[0].Status.Message) {
			t.Fatalf("entry %d: %v, want %v", i, ent, want)
		}
	}
	r = e.sendReq(msg("F", "b0", "b"), msg("F", "b1", "b"))
	if r.Status.Code != rmqpb.Code_MESSAGE_PROPERTY_CONFLICT_WITH_TYPE {
		t.Fatalf("all refused: status %v", r.Status)
	}
	e.dispatched("F", 1)
	var total int64
	for _, c := range e.queuesHolding("F") {
		total += c
	}
	if total != 1 {
		t.Fatalf("%d messages stored, want the group's one", total)
	}

	// Back-pressure counts the batch's bytes together.
	b := newEnv(t, func(o *core.Options) { o.MaxInFlightBytes = 1500 })
	b.route("P")
	r = b.sendReq(msg("P", "p0", strings.Repeat("x", 1000)), msg("P", "p1", strings.Repeat("x", 1000)))
	if r.Status.Code != rmqpb.Code_TOO_MANY_REQUESTS || r.Entries[0].Status.Code != rmqpb.Code_TOO_MANY_REQUESTS ||
		r.Entries[1].Status.Code != rmqpb.Code_TOO_MANY_REQUESTS {
		t.Fatalf("over the in-flight bytes: %v", r)
	}
	if r = b.sendReq(msg("P", "p2", strings.Repeat("x", 1000))); r.Status.Code != rmqpb.Code_OK {
		t.Fatalf("one message within the in-flight bytes: %v", r.Status)
	}
}

// TestSendBatchBodies: a request's NORMAL messages share a batch while
// their bodies together fit the maximum message size; the rest are sent
// alone, each still answered.
func TestSendBatchBodies(t *testing.T) {
	e := newEnv(t, func(o *core.Options) { o.MaxMessageSize = 4096 })
	e.route("S")
	body := strings.Repeat("s", 1500)
	r := e.sendReq(msg("S", "s0", body), msg("S", "s1", body), msg("S", "s2", body), msg("S", "s3", body))
	if r.Status.Code != rmqpb.Code_OK {
		t.Fatalf("status %v", r.Status)
	}
	// s0 and s1 share a batch (3000 bytes); s2 and s3 go alone.
	if r.Entries[1].Offset != r.Entries[0].Offset+1 {
		t.Fatalf("entries %v", r.Entries)
	}
	e.dispatched("S", 4)
	if held := e.queuesHolding("S"); len(held) != 3 {
		t.Fatalf("queues holding messages: %v, want the batch's and two others", held)
	}
}

// TestSendBatchConcurrent: batches sent at once from several callers each
// land consecutively in one queue, none lost (-race: the pooled jobs).
func TestSendBatchConcurrent(t *testing.T) {
	e := newEnv(t, nil)
	e.route("C")
	const callers, requests, n = 8, 10, 16
	var wg sync.WaitGroup
	errs := make(chan error, callers*requests)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for q := range requests {
				var msgs []*rmqpb.Message
				for k := range n {
					msgs = append(msgs, msg("C", fmt.Sprintf("c%d-%d-%d", c, q, k), "x"))
				}
				r, err := e.cli.SendMessage(e.ctx("producer-1", callTimeout), &rmqpb.SendMessageRequest{Messages: msgs})
				if err != nil || r.Status.Code != rmqpb.Code_OK {
					errs <- fmt.Errorf("send: %v %v", r, err)
					return
				}
				for k, ent := range r.Entries {
					if ent.Offset != r.Entries[0].Offset+int64(k) || ent.MessageId != msgs[k].SystemProperties.MessageId {
						errs <- fmt.Errorf("entry %d: %v, first at %d", k, ent, r.Entries[0].Offset)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	e.dispatched("C", callers*requests*n)
	var total int64
	for _, c := range e.queuesHolding("C") {
		if c%n != 0 {
			t.Fatalf("a queue holds %d messages: not whole batches of %d", c, n)
		}
		total += c
	}
	if total != callers*requests*n {
		t.Fatalf("%d stored, want %d", total, callers*requests*n)
	}
}

// TestSendBatchAllocs: a request of 32 messages costs the front end and
// the core three allocations (the answer, its entries and their
// pointers), none per message.
func TestSendBatchAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	e := newEnvTB(t, nil)
	e.route("orders-1")
	req := &rmqpb.SendMessageRequest{}
	for k := range 32 {
		req.Messages = append(req.Messages, msg("orders-1", "m"+strconv.Itoa(k), strings.Repeat("x", 1024)))
	}
	ctx := e.ctx("producer-1", callTimeout)
	allocs := testing.AllocsPerRun(200, func() {
		if r, err := e.srv.SendMessage(ctx, req); err != nil || r.Status.Code != rmqpb.Code_OK {
			t.Fatalf("send: %v %v", r, err)
		}
	})
	t.Logf("%.1f allocations per 32-message SendMessage", allocs)
	if allocs > 3 {
		t.Errorf("%.1f allocations per 32-message SendMessage, want at most 3", allocs)
	}
}

// TestSendBatchForwarded: a request of several messages sent to a slave
// is forwarded whole and stored by the master as one batch (one queue,
// consecutive offsets, each entry its own id); the slave stores nothing.
func TestSendBatchForwarded(t *testing.T) {
	master := newEnv(t, nil)
	slave := newMember(t, master.srv.opts.Addr, nil)
	master.route("T")
	const n = 8
	var msgs []*rmqpb.Message
	for k := range n {
		msgs = append(msgs, msg("T", fmt.Sprintf("f%d", k), "x"))
	}
	r := slave.sendReq(msgs...)
	if r.Status.Code != rmqpb.Code_OK {
		t.Fatalf("status %v", r.Status)
	}
	for k, ent := range r.Entries {
		if ent.MessageId != fmt.Sprintf("f%d", k) || ent.Offset != int64(k) {
			t.Fatalf("entry %d: %v", k, ent)
		}
	}
	master.dispatched("T", n)
	if held := master.queuesHolding("T"); len(held) != 1 {
		t.Fatalf("the master's queues holding messages: %v, want one", held)
	}
	if s := stored(slave.env, "T"); s != 0 {
		t.Fatalf("the slave stored %d", s)
	}
}

// TestSendBatchEncodings: in one batch, each message keeps its own body
// encoding: a zlib body is stored compressed (delivered as GZIP), a gzip
// one decoded, an identity one as it is.
func TestSendBatchEncodings(t *testing.T) {
	e := newEnv(t, nil)
	e.route("Z")
	var zb, gb bytes.Buffer
	zw := zlib.NewWriter(&zb)
	zw.Write([]byte("zlib body"))
	zw.Close()
	gw := gzip.NewWriter(&gb)
	gw.Write([]byte("gzip body"))
	gw.Close()
	z, g := msg("Z", "z", ""), msg("Z", "g", "")
	z.Body, z.SystemProperties.BodyEncoding = zb.Bytes(), rmqpb.Encoding_GZIP
	g.Body, g.SystemProperties.BodyEncoding = gb.Bytes(), rmqpb.Encoding_GZIP
	r := e.sendReq(msg("Z", "i", "identity body"), z, g)
	if r.Status.Code != rmqpb.Code_OK || r.Entries[2].Offset != r.Entries[0].Offset+2 {
		t.Fatalf("answer %v", r)
	}
	got := e.receiveAll("G", "Z", 3)
	for id, want := range map[string]struct {
		body string
		enc  rmqpb.Encoding
	}{"i": {"identity body", rmqpb.Encoding_IDENTITY}, "z": {string(zb.Bytes()), rmqpb.Encoding_GZIP}, "g": {"gzip body", rmqpb.Encoding_IDENTITY}} {
		m := got[id]
		if string(m.Body) != want.body || m.SystemProperties.BodyEncoding != want.enc {
			t.Fatalf("%s delivered as %q, %v", id, m.Body, m.SystemProperties.BodyEncoding)
		}
	}
}
