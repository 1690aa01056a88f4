package core

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

func testProps(kv ...string) []byte {
	var b []byte
	for i := 0; i+1 < len(kv); i += 2 {
		b = message.AppendProperty(b, kv[i], kv[i+1])
	}
	return b
}

// sendReq is a 1 KiB send shaped as rocketmq-client-go sends it.
func sendReq(topic string, q int32, body int) *SendRequest {
	return &SendRequest{ProducerGroup: []byte("pg"), Topic: []byte(topic), DefaultTopic: []byte("TBW102"),
		DefaultTopicQueueNums: 4, QueueID: q, BornTimestamp: time.Now().UnixMilli(), Body: make([]byte, body),
		Properties: testProps("UNIQ_KEY", "C0A80001000000000000000000000001", "TAGS", "TagA", "KEYS", "k")}
}

// The core's send and pull, without any front end, allocate nothing per
// request (the remoting front end's handlers are checked too, in broker).
func TestSendAndPullDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	c := newTestCore(t, nil)
	req := sendReq("Allocs", 0, 1024)
	var res SendResult
	if err := c.Send(req, &res); err != nil { // auto-create the topic
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(2000, func() {
		if err := c.Send(req, &res); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Fatalf("Send: %v allocations", allocs)
	}
	wait.For(t, "256 messages of Allocs/0 dispatched", func() error {
		if n := c.MaxOffset("Allocs", 0); n < 256 {
			return fmt.Errorf("%d dispatched", n)
		}
		return nil
	})
	var pr PullResult
	pull := PullRequest{Group: []byte("g"), Topic: []byte("Allocs"), MaxMsgs: 32, OwnSubscription: true,
		Expression: []byte("TagA"), HasCommitOffset: true}
	run := func() {
		if err := c.Pull(&pull, &pr); err != nil || pr.Status != PullFound || len(pr.Records) != 32 {
			t.Fatalf("pull: %v %d %d", err, pr.Status, len(pr.Records))
		}
		pr.Release()
		pull.Offset = (pull.Offset + 32) % 224
		pull.CommitOffset = pull.Offset
	}
	run()
	if allocs := testing.AllocsPerRun(1000, run); allocs != 0 {
		t.Fatalf("Pull: %v allocations", allocs)
	}
}

func TestBackPressure(t *testing.T) {
	c := newTestCore(t, func(o *Options) { o.MaxInFlightBytes = 1000 })
	var res SendResult
	if err := c.Send(sendReq("BP", 0, 900), &res); err != nil {
		t.Fatalf("send under the limit: %v", err)
	}
	err := c.Send(sendReq("BP", 0, 1001), &res)
	if !errors.Is(err, ErrSystemBusy) || !strings.Contains(Remark(err), "TOO_MANY_REQUESTS") {
		t.Fatalf("send over MaxInFlightBytes: %v", err)
	}
	if c.inflight.Load() != 0 {
		t.Fatalf("in-flight bytes leak: %d", c.inflight.Load())
	}
	// A stalled store: a put in progress and none completed for BusyTimeout.
	c.putsActive.Add(1)
	c.lastProgress.Store(c.sinceStart() - int64(2*time.Second))
	err = c.Send(sendReq("BP", 0, 1), &res)
	c.putsActive.Add(-1)
	if !errors.Is(err, ErrSystemBusy) || !strings.Contains(Remark(err), "PC_SYNCHRONIZED") {
		t.Fatalf("send to a stalled store: %v", err)
	}
	if err := c.Send(sendReq("BP", 0, 1), &res); err != nil {
		t.Fatalf("send after the stall: %v", err)
	}
	// Refused sends hold no bytes; a failed put gives them back too.
	if err := c.Send(&SendRequest{Topic: []byte("BP"), QueueID: 99, Body: make([]byte, 10)}, &res); Code(err) != protocol.RespSystemError {
		t.Fatalf("a bad queue: %v", err)
	}
	if c.inflight.Load() != 0 {
		t.Fatalf("in-flight bytes after refusals: %d", c.inflight.Load())
	}
}

// In sync-flush mode the in-flight bytes of a send are held until its
// Pending is answered.
func TestPendingHoldsInFlightBytes(t *testing.T) {
	c := newTestCore(t, func(o *Options) { o.Store.FlushMode = store.FlushSync })
	var res SendResult
	if err := c.Send(sendReq("P", 0, 100), &res); err != nil {
		t.Fatal(err)
	}
	if got := c.inflight.Load(); got != 100 {
		t.Fatalf("in flight while pending: %d", got)
	}
	if err := c.WaitDurable(res.Pending); err != nil {
		t.Fatal(err)
	}
	if got := c.inflight.Load(); got != 0 {
		t.Fatalf("in flight once durable: %d", got)
	}
}

func TestStoreErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int32
	}{
		{store.ErrMessageTooLarge, protocol.RespMessageIllegal},
		{fmt.Errorf("wrapped: %w", store.ErrBadMessage), protocol.RespMessageIllegal},
		{store.ErrRecordTooLarge, protocol.RespMessageIllegal},
		{store.ErrDiskFull, protocol.RespServiceNotAvailable},
		{store.ErrClosed, protocol.RespServiceNotAvailable},
		{fmt.Errorf("wrapped: %w", store.ErrLogFailed), protocol.RespServiceNotAvailable},
		{errors.New("other"), protocol.RespSystemError},
	} {
		e := storeError(tc.err)
		if e.Code != tc.code || !errors.Is(e, tc.err) || Code(e) != tc.code {
			t.Errorf("%v: code %d, want %d", tc.err, e.Code, tc.code)
		}
	}
	if err := durableError(store.ErrFlushTimeout); !errors.Is(err, ErrFlushDiskTimeout) || !errors.Is(err, store.ErrFlushTimeout) {
		t.Errorf("flush timeout: %v", err)
	}
	if Code(nil) != protocol.RespSuccess || Remark(nil) != "" || Code(errors.New("x")) != protocol.RespSystemError {
		t.Error("Code and Remark of nil and plain errors")
	}
}

// BenchmarkCoreSend is one 1 KiB send through the core alone (no front end).
func BenchmarkCoreSend(b *testing.B) {
	c := newTestCore(b, func(o *Options) { o.Store.SegmentSize = 256 << 20 })
	req := sendReq("BenchCoreSend", 0, 1024)
	var res SendResult
	if err := c.Send(req, &res); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(1024)
	b.ResetTimer()
	for range b.N {
		if err := c.Send(req, &res); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPersistTopics is one write of topics.json holding
// APOGEE_BENCH_TOPICS (default 20,000) topics: what the background writer
// spends per write (encode, write, fsync, .bak link, rename, directory
// fsync), and what sets its gap once 10 × this exceeds 200 ms.
//
//	go test -run '^$' -bench PersistTopics ./broker/core/
func BenchmarkPersistTopics(b *testing.B) {
	topics := 20000
	if v := os.Getenv("APOGEE_BENCH_TOPICS"); v != "" {
		if _, err := fmt.Sscan(v, &topics); err != nil {
			b.Fatalf("APOGEE_BENCH_TOPICS: %v", err)
		}
	}
	t := newTopicManager(vfs.Default, filepath.Join(b.TempDir(), TopicsFile), WriteConfigFile, slog.New(slog.DiscardHandler))
	for i := 0; i < topics; i++ {
		t.put(newTopicConfig(fmt.Sprintf("Persist-%06d", i), 8, protocol.PermRead|protocol.PermWrite))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := t.persist(true); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if st, err := os.Stat(t.path); err == nil {
		b.ReportMetric(float64(st.Size()), "file_bytes")
	}
}
