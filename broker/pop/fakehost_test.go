package pop

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// fakeHost is an in-memory Host: queues of encoded records, an offset
// table, the dead letters put, and the state file. It reads the way
// store.Get does, as far as the manager can tell (statuses, next offsets,
// filters, a scan bound).
type fakeHost struct {
	t *testing.T

	mu      sync.Mutex
	queues  map[qkey]*fakeQueue
	offsets map[okey]int64
	commits int
	puts    []store.Message
	dlqErr  error // DeadLetterTopic fails with it
	putErr  error // Put fails with it
	readErr error // Read fails with it

	state       []byte // the state file; nil: none
	bakState    []byte // its previous version
	writes      int
	writeErr    error
	loadErr     error
	parseErrors int
}

type qkey struct {
	topic string
	queue int32
}

type okey struct {
	group, topic string
	queue        int32
}

type fakeQueue struct {
	min  int64
	recs [][]byte // recs[i] has queue offset i (those below min are nil)
}

func newFakeHost(t *testing.T) *fakeHost {
	return &fakeHost{t: t, queues: map[qkey]*fakeQueue{}, offsets: map[okey]int64{}}
}

var testHost = netip.MustParseAddrPort("10.0.0.7:10911")

// send appends a message to (topic, queue) with the properties given as
// key, value pairs and returns its queue offset.
func (h *fakeHost) send(topic string, queue int32, body string, props ...string) int64 {
	h.t.Helper()
	var p []byte
	for i := 0; i+1 < len(props); i += 2 {
		p = message.AppendProperty(p, props[i], props[i+1])
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[qkey{topic, queue}]
	if q == nil {
		q = &fakeQueue{}
		h.queues[qkey{topic, queue}] = q
	}
	off := int64(len(q.recs))
	rec, err := message.AppendRecord(nil, &message.Record{Topic: topic, QueueID: queue, QueueOffset: off,
		PhysicalOffset: 1000 + off, BornTimestamp: 1, BornHost: testHost, StoreTimestamp: 2, StoreHost: testHost,
		Body: []byte(body), Properties: p})
	if err != nil {
		h.t.Fatal(err)
	}
	q.recs = append(q.recs, rec)
	return off
}

// sendN sends n messages "m0".."m<n-1>" to (topic, queue).
func (h *fakeHost) sendN(topic string, queue int32, n int) {
	for i := range n {
		h.send(topic, queue, fmt.Sprintf("m%d", i))
	}
}

// retain drops the records of (topic, queue) below min (retention).
func (h *fakeHost) retain(topic string, queue int32, min int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queues[qkey{topic, queue}]
	for i := q.min; i < min; i++ {
		q.recs[i] = nil
	}
	q.min = min
}

func (h *fakeHost) MinOffset(topic string, queue int32) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[qkey{topic, queue}]; q != nil {
		return q.min
	}
	return 0
}

func (h *fakeHost) MaxOffset(topic string, queue int32) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.queues[qkey{topic, queue}]; q != nil {
		return int64(len(q.recs))
	}
	return 0
}

// fakeMaxScan bounds the entries one Read inspects, as store.Get's maxScan.
const fakeMaxScan = 800

func (h *fakeHost) Read(topic string, queue int32, offset int64, max, maxBytes int, f store.Filter,
	fn func(rec []byte)) (store.GetStatus, int64, error) {
	h.mu.Lock()
	if h.readErr != nil {
		h.mu.Unlock()
		return store.NoMatchedLogicQueue, 0, h.readErr
	}
	q := h.queues[qkey{topic, queue}]
	if q == nil {
		h.mu.Unlock()
		return store.NoMatchedLogicQueue, 0, nil
	}
	qmax := int64(len(q.recs))
	switch {
	case qmax == 0:
		h.mu.Unlock()
		return store.NoMessageInQueue, 0, nil
	case offset < q.min:
		h.mu.Unlock()
		return store.OffsetTooSmall, q.min, nil
	case offset == qmax:
		h.mu.Unlock()
		return store.OffsetOverflowOne, offset, nil
	case offset > qmax:
		h.mu.Unlock()
		return store.OffsetOverflowBadly, qmax, nil
	}
	var out [][]byte
	bytes := 0
	next := offset
	for ; next < qmax && next-offset < fakeMaxScan && len(out) < max; next++ {
		if len(out) > 0 && bytes >= maxBytes {
			break
		}
		rec := q.recs[next]
		v, err := message.Decode(rec, false)
		if err != nil {
			h.t.Errorf("fake host: bad record at %d: %v", next, err)
			continue
		}
		if f != nil && (!f.MatchTagCode(message.TagCode(v.Tags())) || (f.NeedsRecord() && !f.MatchProperties(v.Properties()))) {
			continue
		}
		out = append(out, rec)
		bytes += len(rec)
	}
	h.mu.Unlock()
	if len(out) == 0 {
		return store.NoMatchedMessage, next, nil
	}
	for _, rec := range out {
		fn(append([]byte(nil), rec...)) // the manager must not keep it
	}
	return store.Found, next, nil
}

func (h *fakeHost) CommittedOffset(group, topic string, queue int32) (int64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	off, ok := h.offsets[okey{group, topic, queue}]
	return off, ok
}

func (h *fakeHost) CommitOffset(group, topic string, queue int32, offset int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.offsets[okey{group, topic, queue}] = offset
	h.commits++
}

func (h *fakeHost) committed(group, topic string, queue int32) int64 {
	h.t.Helper()
	off, ok := h.CommittedOffset(group, topic, queue)
	if !ok {
		h.t.Fatalf("no offset committed for %s %s %d", group, topic, queue)
	}
	return off
}

func (h *fakeHost) DeadLetterTopic(group string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dlqErr != nil {
		return "", h.dlqErr
	}
	return "%DLQ%" + group, nil
}

func (h *fakeHost) Put(m store.Message) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.putErr != nil {
		return h.putErr
	}
	m.Body = append([]byte(nil), m.Body...)
	m.Properties = append([]byte(nil), m.Properties...)
	h.puts = append(h.puts, m)
	return nil
}

// LoadState reads the state, or its previous version when the state is
// missing or does not parse (as the broker's loadStateFile does).
func (h *fakeHost) LoadState(parse func([]byte) error) (bool, error) {
	h.mu.Lock()
	cur, bak, lerr := h.state, h.bakState, h.loadErr
	h.mu.Unlock()
	if lerr != nil {
		return false, lerr
	}
	var perr error
	if cur != nil {
		if perr = parse(cur); perr == nil {
			return true, nil
		}
		h.parseErrors++
	}
	if bak != nil {
		if err := parse(bak); err != nil {
			h.parseErrors++
			return false, errors.Join(perr, err)
		}
		return true, nil
	}
	if perr != nil {
		return false, perr
	}
	return false, nil
}

func (h *fakeHost) WriteState(data []byte) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.writeErr != nil {
		return h.writeErr
	}
	h.bakState = h.state
	h.state = append([]byte(nil), data...)
	h.writes++
	return nil
}

func (h *fakeHost) stateWrites() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.writes
}

// tagFilter passes the messages whose TAGS is one of tags.
type tagFilter struct{ tags []string }

func (f *tagFilter) MatchTagCode(code int64) bool {
	for _, t := range f.tags {
		if message.TagCode([]byte(t)) == code {
			return true
		}
	}
	return false
}

func (f *tagFilter) NeedsRecord() bool { return true }

func (f *tagFilter) MatchProperties(props []byte) bool {
	tags, _ := message.LookupProperty(props, message.PropTags)
	for _, t := range f.tags {
		if string(tags) == t {
			return true
		}
	}
	return false
}
