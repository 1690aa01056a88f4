package broker

import (
	"bytes"
	"strconv"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// TestLongPollAnsweredOnDispatcher: held pulls woken by arrivals are run
// by the store's dispatcher itself (the holder's InlineArrivals, counted in
// pullHeldInline) and their answers, queued and flushed per connection,
// reach the consumer whole: each pull gets its queue's message and the
// headers of a found pull.
func TestLongPollAnsweredOnDispatcher(t *testing.T) {
	const topic, queues = "Inline", 3
	h := newHarness(t, nil)
	puller, sender := h.dial(nil), h.dial(nil)
	for q := range int32(queues) {
		invoke(t, sender, sendRequest(topic, q, []byte("first"), ""))
		h.waitMax(topic, q, 1)
	}
	invoke(t, puller, heartbeatRequest(t, "127.0.0.1@3", "cg", map[string]string{topic: "*"}))

	type result struct {
		code int32
		body []byte
		hdr  protocol.PullMessageResponse
	}
	done := make(chan result, queues)
	for q := range int32(queues) {
		// Held for an hour unless woken: an answer within the test is the wake.
		req := pullRequest(pullArgs{group: "cg", topic: topic, queueID: q, offset: 1, sysFlag: protocol.PullFlagSuspend,
			suspendMs: time.Hour.Milliseconds()})
		if err := puller.InvokeAsync(req, 2*time.Hour, func(resp *protocol.Command, err error) {
			if err != nil {
				t.Errorf("pull: %v", err)
				done <- result{}
				return
			}
			var hdr protocol.PullMessageResponse
			_ = hdr.Decode(&resp.Ext)
			done <- result{resp.Code, bytes.Clone(resp.Body), hdr}
		}); err != nil {
			t.Fatal(err)
		}
	}
	h.waitHeld(queues)
	before := h.b.holds.Stats()
	for q := range int32(queues) {
		if r := invoke(t, sender, sendRequest(topic, q, []byte("wake "+strconv.Itoa(int(q))), "")); r.Code != 0 {
			t.Fatalf("send: %d", r.Code)
		}
	}
	got := map[string]bool{}
	for range queues {
		select {
		case r := <-done:
			if r.code != 0 {
				t.Fatalf("pull: code %d", r.code)
			}
			recs := decodeBody(t, r.body)
			if len(recs) != 1 || r.hdr.NextBeginOffset != 2 || r.hdr.MaxOffset != 2 {
				t.Fatalf("woken pull: %d records, headers %+v", len(recs), r.hdr)
			}
			got[string(recs[0].Body())] = true
		case <-time.After(wait.DefaultTimeout):
			t.Fatalf("held pulls not woken by the sends: holder %+v", h.b.holds.Stats())
		}
	}
	for q := range queues {
		if !got["wake "+strconv.Itoa(q)] {
			t.Fatalf("answers: %v", got)
		}
	}
	st := h.b.holds.Stats()
	// Each arrival found the holder's loop idle and woke one pull: all
	// three ran on the dispatcher.
	if st.Woken-before.Woken != queues || st.Inline-before.Inline != queues || st.Held != 0 || st.Expired != 0 {
		t.Fatalf("holder before %+v, after %+v", before, st)
	}
	if v := h.b.RuntimeInfo()["pullHeldInline"]; v != strconv.FormatInt(st.Inline, 10) {
		t.Fatalf("pullHeldInline %q, holder %+v", v, st)
	}
}
