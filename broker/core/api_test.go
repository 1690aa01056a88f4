package core_test

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// These tests drive the core the way a second front end would: through its
// exported methods and plain Go types alone (no remoting, no protocol
// header), which is what proves one can be written.

func openCore(t *testing.T, mutate func(*core.Options)) *core.Core {
	t.Helper()
	o := core.Options{
		DataDir:       t.TempDir(),
		AdvertiseAddr: "127.0.0.1:10911",
		Store: store.Options{SegmentSize: 8 << 20, ConsumeQueueEntries: 4096,
			IndexSlots: 1024, IndexMaxEntries: 8192, CleanInterval: -1},
		Logger: testlog.New(t, "core"),
	}
	if mutate != nil {
		mutate(&o)
	}
	c, err := core.New(o)
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(func() {
		if err := c.Shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return c
}

func props(kv ...string) []byte {
	var b []byte
	for i := 0; i+1 < len(kv); i += 2 {
		b = message.AppendProperty(b, kv[i], kv[i+1])
	}
	return b
}

// fakeConn is a front end's client connection that records what the core
// pushes to it.
type fakeConn struct {
	addr string

	mu       sync.Mutex
	notified []string
	resets   []core.OffsetReset
}

func (f *fakeConn) RemoteAddr() string { return f.addr }
func (f *fakeConn) Close() error       { return nil }
func (f *fakeConn) NotifyConsumerIDsChanged(group string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.notified = append(f.notified, group)
	return nil
}
func (f *fakeConn) ResetOffset(r *core.OffsetReset) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resets = append(f.resets, *r)
	return nil
}
func (f *fakeConn) CheckTransaction(string, *core.TransactionCheck) error { return nil }

func (f *fakeConn) notifications() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.notified...)
}

// waitDispatched waits until topic's queue q holds n messages visible to
// pulls: a send returns once its message is stored, and dispatch makes it
// visible after that.
func waitDispatched(t *testing.T, c *core.Core, topic string, q int32, n int64) {
	t.Helper()
	wait.Equal(t, fmt.Sprintf("%d messages of %s/%d dispatched", n, topic, q), n, func() int64 { return c.MaxOffset(topic, q) })
}

func TestTopicSendPullOffsets(t *testing.T) {
	var changed []string
	var mu sync.Mutex
	c := openCore(t, func(o *core.Options) {
		o.TopicChanged = func(name string) { mu.Lock(); changed = append(changed, name); mu.Unlock() }
	})

	// A topic made by an admin.
	if err := c.Admin().CreateTopic(&core.TopicRequest{Topic: "Orders", ReadQueueNums: 2, WriteQueueNums: 2,
		Perm: protocol.PermRead | protocol.PermWrite, Attributes: "+message.type=NORMAL"}); err != nil {
		t.Fatal(err)
	}
	cfg, ok := c.TopicConfig("Orders")
	if !ok || cfg.ReadQueueNums != 2 || cfg.Attributes["message.type"] != "NORMAL" {
		t.Fatalf("topic: %+v %v", cfg, ok)
	}
	mu.Lock()
	if len(changed) != 1 || changed[0] != "Orders" {
		t.Fatalf("TopicChanged told %v", changed)
	}
	mu.Unlock()
	if err := c.Admin().CreateTopic(&core.TopicRequest{Topic: "SCHEDULE_TOPIC_XXXX", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}); !errors.Is(err, core.ErrSystem) {
		t.Fatalf("a system topic: %v", err)
	}
	if err := c.Admin().CreateTopic(&core.TopicRequest{Topic: "Big", ReadQueueNums: core.MaxQueues + 1, WriteQueueNums: 1, Perm: 6}); !errors.Is(err, core.ErrInvalidParameter) {
		t.Fatalf("too many queues: %v", err)
	}

	// An arrival listener, as a front end's long polling registers.
	arrived := make(chan int64, 16)
	c.OnArrival(func(topic string, queue int32, max int64) {
		if topic == "Orders" && queue == 1 {
			arrived <- max
		}
	})

	// Sends: offsets dense from 0, ids, the UNIQ_KEY as transaction id.
	born := netip.MustParseAddrPort("10.0.0.7:4000")
	var res core.SendResult
	for i := range 5 {
		tag := "a"
		if i%2 == 1 {
			tag = "b"
		}
		err := c.Send(&core.SendRequest{ProducerGroup: []byte("pg"), Topic: []byte("Orders"), QueueID: 1,
			BornTimestamp: time.Now().UnixMilli(), Body: []byte("order"), BornHost: born,
			Properties: props(message.PropUniqKey, "UNIQ-"+string(rune('0'+i)), message.PropTags, tag)}, &res)
		if err != nil {
			t.Fatal(err)
		}
		if res.QueueID != 1 || res.QueueOffset != int64(i) || len(res.MsgID) != 32 || string(res.TransactionID) != "UNIQ-"+string(rune('0'+i)) || res.Pending.Waiting() {
			t.Fatalf("send %d: %+v", i, res)
		}
	}
	waitDispatched(t, c, "Orders", 1, 5)
	select {
	case <-arrived:
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("no arrival reported")
	}

	// Refusals carry RocketMQ's codes.
	err := c.Send(&core.SendRequest{Topic: []byte("SCHEDULE_TOPIC_XXXX"), Body: []byte("x")}, &res)
	if !errors.Is(err, core.ErrNoPermission) || core.Code(err) != protocol.RespNoPermission || core.Remark(err) == "" {
		t.Fatalf("send to a system topic: %v", err)
	}
	if err := c.Send(&core.SendRequest{Topic: []byte("bad topic"), Body: []byte("x")}, &res); core.Code(err) != protocol.RespSystemError {
		t.Fatalf("send to a bad name: %v", err)
	}

	// A pull with its own filter: the three "a" records, zero-copy.
	var pr core.PullResult
	defer pr.Release()
	req := core.PullRequest{Group: []byte("cg"), Topic: []byte("Orders"), QueueID: 1, MaxMsgs: 32,
		OwnSubscription: true, Expression: []byte("a")}
	if err := c.Pull(&req, &pr); err != nil {
		t.Fatal(err)
	}
	if pr.Status != core.PullFound || len(pr.Records) != 3 || pr.NextOffset != 5 || pr.MaxOffset != 5 || pr.MinOffset != 0 {
		t.Fatalf("pull: status %d, %d records, next %d", pr.Status, len(pr.Records), pr.NextOffset)
	}
	for _, rec := range pr.Records {
		v, err := message.Decode(rec, true)
		if err != nil || string(v.Body()) != "order" || v.BornHost() != born {
			t.Fatalf("record: %v", err)
		}
	}
	// At the end: nothing new (a front end would hold it), then an
	// arrival, then PullAgain finds it.
	req.Offset = 5
	if err := c.Pull(&req, &pr); err != nil || pr.Status != core.PullNoNewMessage || pr.NextOffset != 5 {
		t.Fatalf("pull at the end: %v %d %d", err, pr.Status, pr.NextOffset)
	}
	if err := c.Send(&core.SendRequest{Topic: []byte("Orders"), QueueID: 1, Body: []byte("late"),
		Properties: props(message.PropTags, "a")}, &res); err != nil {
		t.Fatal(err)
	}
	waitDispatched(t, c, "Orders", 1, 6)
	if err := c.PullAgain(&pr, pr.NextOffset); err != nil || pr.Status != core.PullFound || len(pr.Records) != 1 {
		t.Fatalf("pull again: %v %d %d", err, pr.Status, len(pr.Records))
	}
	req.Offset = -3
	if err := c.Pull(&req, &pr); err != nil || pr.Status != core.PullOffsetMoved {
		t.Fatalf("pull at a negative offset: %v %d", err, pr.Status)
	}
	// Without its own filter a pull needs the group's registered subscription.
	req.OwnSubscription, req.Offset = false, 0
	if err := c.Pull(&req, &pr); !errors.Is(err, core.ErrSubscriptionNotExist) {
		t.Fatalf("pull without a subscription: %v", err)
	}
	if err := c.Pull(&core.PullRequest{Group: []byte("cg"), Topic: []byte("Nope"), MaxMsgs: 1}, &pr); !errors.Is(err, core.ErrTopicNotExist) {
		t.Fatalf("pull of an unknown topic: %v", err)
	}

	// Offsets.
	if _, err := c.QueryConsumerOffset([]byte("Orders"), []byte("cg"), 1); err != nil {
		t.Fatalf("a young queue reads from 0: %v", err)
	}
	if err := c.UpdateConsumerOffset([]byte("Orders"), []byte("cg"), 1, 4); err != nil {
		t.Fatal(err)
	}
	if off, err := c.QueryConsumerOffset([]byte("Orders"), []byte("cg"), 1); err != nil || off != 4 {
		t.Fatalf("committed offset: %d %v", off, err)
	}
	if off, err := c.SearchOffset("Orders", 1, 0); err != nil || off != 0 {
		t.Fatalf("search by time: %d %v", off, err)
	}
	if ts := c.EarliestStoreTime("Orders", 1); ts <= 0 {
		t.Fatalf("earliest store time %d", ts)
	}
	if ts := c.EarliestStoreTime("Orders", 0); ts != -1 {
		t.Fatalf("earliest store time of an empty queue %d", ts)
	}
	if c.MinOffset("Orders", 1) != 0 {
		t.Fatal("min offset")
	}
	if err := c.UpdateConsumerOffset([]byte("Orders"), []byte("cg"), -1, 4); !errors.Is(err, core.ErrSystem) {
		t.Fatalf("a negative queue: %v", err)
	}

	// Query by key and view by offset: views of the log.
	q, err := c.QueryMessage("Orders", "UNIQ-3", 0, 1<<62, 8)
	if err != nil || len(q.Views) != 1 {
		t.Fatalf("query: %v %d", err, len(q.Views))
	}
	core.ReleaseViews(q.Views)
	if _, err := c.QueryMessage("Orders", "absent", 0, 1<<62, 8); !errors.Is(err, core.ErrQueryNotFound) {
		t.Fatalf("query an absent key: %v", err)
	}
}

func TestClientRegistryAndPushes(t *testing.T) {
	c := openCore(t, nil)
	hb := func(conn core.ClientConn, id string) {
		t.Helper()
		err := c.Heartbeat(conn, &protocol.HeartbeatData{ClientID: id,
			ConsumerDataSet: []protocol.ConsumerData{{GroupName: "cg", ConsumeType: "CONSUME_PASSIVELY",
				SubscriptionDataSet: []protocol.SubscriptionData{{Topic: "T", SubString: "x || y", SubVersion: 1}}}}}, "GO", 317)
		if err != nil {
			t.Fatal(err)
		}
	}
	a, b := &fakeConn{addr: "10.0.0.1:1"}, &fakeConn{addr: "10.0.0.2:2"}
	hb(a, "A")
	if _, ok := c.TopicConfig("%RETRY%cg"); !ok {
		t.Fatal("the heartbeat made no retry topic")
	}
	hb(b, "B")
	if got := a.notifications(); len(got) != 2 || got[1] != "cg" {
		t.Fatalf("A was told %v", got)
	}
	ids, err := c.ConsumerIDs("cg")
	if err != nil || len(ids) != 2 {
		t.Fatalf("members: %v %v", ids, err)
	}
	info, err := c.Admin().ConsumerGroupInfo("cg")
	if err != nil || !info.Consistent || len(info.Connections) != 2 || info.Connections[1].ClientAddr != "10.0.0.2:2" {
		t.Fatalf("group info: %+v %v", info, err)
	}
	if _, err := c.Admin().ConsumerGroupInfo("none"); !errors.Is(err, core.ErrConsumerNotOnline) {
		t.Fatalf("an empty group: %v", err)
	}

	// A pull through the registered subscription.
	if err := c.Admin().CreateTopic(&core.TopicRequest{Topic: "T", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	var sr core.SendResult
	for _, tag := range []string{"x", "z", "y"} {
		if err := c.Send(&core.SendRequest{Topic: []byte("T"), Body: []byte(tag), Properties: props(message.PropTags, tag)}, &sr); err != nil {
			t.Fatal(err)
		}
	}
	waitDispatched(t, c, "T", 0, 3)
	var pr core.PullResult
	defer pr.Release()
	if err := c.Pull(&core.PullRequest{Group: []byte("cg"), Topic: []byte("T"), MaxMsgs: 32, SubVersion: 1}, &pr); err != nil || len(pr.Records) != 2 {
		t.Fatalf("pull by subscription: %v %d", err, len(pr.Records))
	}
	if err := c.Pull(&core.PullRequest{Group: []byte("cg"), Topic: []byte("T"), MaxMsgs: 32, SubVersion: 2}, &pr); !errors.Is(err, core.ErrSubscriptionNotLatest) {
		t.Fatalf("pull with a newer version: %v", err)
	}

	// A reset pushes the new offsets to the members.
	table, told, err := c.Admin().ResetConsumerOffset("T", "cg", -1, true, -1, -1)
	if err != nil || told != 2 || len(table) != 1 || table[0].Offset != 3 {
		t.Fatalf("reset: %v %d %v", table, told, err)
	}
	a.mu.Lock()
	if len(a.resets) != 1 || a.resets[0].Offsets[0].Offset != 3 || a.resets[0].Topic != "T" {
		t.Fatalf("A's reset: %+v", a.resets)
	}
	a.mu.Unlock()
	if _, _, err := c.Admin().ResetConsumerOffset("Nope", "cg", -1, true, -1, -1); !errors.Is(err, core.ErrNoTopic) {
		t.Fatalf("reset of an unknown topic: %v", err)
	}

	// B's connection closes: A is told.
	c.ClientClosed(b)
	if got := a.notifications(); len(got) != 3 {
		t.Fatalf("A was told %v", got)
	}
	if ids, _ := c.ConsumerIDs("cg"); len(ids) != 1 || ids[0] != "A" {
		t.Fatalf("members after close: %v", ids)
	}
	c.UnregisterClient(a, "", "cg")
	if _, err := c.ConsumerIDs("cg"); err == nil {
		t.Fatal("members after unregistering")
	}
}

// waiter is a DurableWaiter on a channel.
type waiter chan error

func (w waiter) Durable(err error) { w <- err }

// In sync-flush mode a send's answer waits for its Pending, which the
// front end hands to WhenDurable: no goroutine per waiting send.
func TestSyncFlushPending(t *testing.T) {
	c := openCore(t, func(o *core.Options) { o.Store.FlushMode = store.FlushSync })
	var res core.SendResult
	if err := c.Send(&core.SendRequest{Topic: []byte("S"), Body: []byte("x")}, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Pending.Waiting() {
		t.Fatal("a sync-flush send does not wait")
	}
	w := make(waiter, 1)
	c.WhenDurable(res.Pending, w)
	select {
	case err := <-w:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("not durable")
	}
	if got := c.Admin().RuntimeInfo()["sendInFlightBytes"]; got != "0" {
		t.Fatalf("in-flight bytes after the answer: %s", got)
	}
	// WAIT=false: answered at once.
	if err := c.Send(&core.SendRequest{Topic: []byte("S"), Body: []byte("x"), Properties: props(message.PropWait, "false")}, &res); err != nil || res.Pending.Waiting() {
		t.Fatalf("WAIT=false: %v %v", err, res.Pending.Waiting())
	}
	// A blocking caller waits itself.
	if err := c.Send(&core.SendRequest{Topic: []byte("S"), Body: []byte("y")}, &res); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitDurable(res.Pending); err != nil {
		t.Fatal(err)
	}
}

func TestSubscriptionGroups(t *testing.T) {
	c := openCore(t, nil)
	cfg := protocol.DefaultSubscriptionGroupConfig("sg")
	cfg.RetryMaxTimes = 3
	if err := c.Admin().UpdateSubscriptionGroup(cfg); err != nil {
		t.Fatal(err)
	}
	got, err := c.SubscriptionGroup([]byte("sg"))
	if err != nil || got.RetryMaxTimes != 3 {
		t.Fatalf("group: %+v %v", got, err)
	}
	if _, ok := c.Replication().SubscriptionGroupTable().Groups["sg"]; !ok {
		t.Fatal("the table lacks the group")
	}
	bad := protocol.DefaultSubscriptionGroupConfig("bad name")
	if err := c.Admin().UpdateSubscriptionGroup(bad); !errors.Is(err, core.ErrInvalidParameter) {
		t.Fatalf("a bad name: %v", err)
	}
	if err := c.Admin().DeleteSubscriptionGroup("sg", true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscriptionGroup([]byte("sg")); !errors.Is(err, core.ErrSubscriptionGroupNotExist) {
		t.Fatalf("a deleted group: %v", err)
	}
}
