package core

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/store"
)

// newSlaveCore starts a slave's core (broker id 1) in a temporary directory.
func newSlaveCore(tb testing.TB, mutate func(*Options)) *Core {
	tb.Helper()
	return newTestCore(tb, func(o *Options) {
		o.Role, o.BrokerID = RoleSlave, 1
		if mutate != nil {
			mutate(o)
		}
	})
}

// replicate copies what master's commit log holds beyond slave's end into
// slave's (what package ha does over TCP) and waits until the slave has
// dispatched it.
func replicate(tb testing.TB, master, slave *Core) {
	tb.Helper()
	ms, ss := master.Store(), slave.Store()
	for off := ss.WrittenOffset(); off < ms.WrittenOffset(); {
		v, err := ms.ReadLog(off, 1<<20)
		if err != nil {
			tb.Fatal(err)
		}
		n, err := ss.AppendReplicated(off, v.Bytes())
		v.Release()
		if err != nil {
			tb.Fatal(err)
		}
		off += int64(n)
	}
	wait.Equal(tb, "the slave's dispatch lag", 0, func() int64 { return ss.Stats().DispatchLag })
	// The configuration records are applied by the store's arrival hook,
	// after the dispatch that made the lag 0.
	wait.Until(tb, "the slave applied every configuration record", func() bool {
		slave.cfg.mu.Lock()
		defer slave.cfgUnlock()
		return slave.cfg.next >= ss.MaxOffset(configTopic, 0)
	})
}

func TestParseRoleAndOptions(t *testing.T) {
	for s, want := range map[string]Role{"ASYNC_MASTER": RoleAsyncMaster, "sync_master": RoleSyncMaster, " SLAVE ": RoleSlave} {
		if r, err := ParseRole(s); err != nil || r != want || r.String() != strings.ToUpper(strings.TrimSpace(s)) {
			t.Errorf("ParseRole(%q) = %v, %v", s, r, err)
		}
	}
	if _, err := ParseRole("BOSS"); err == nil {
		t.Error("ParseRole accepted BOSS")
	}
	for _, tc := range []struct {
		mutate func(*Options)
		want   string
	}{
		{func(o *Options) { o.Role = RoleSlave }, "a slave's broker id must be 1 or more"},
		{func(o *Options) { o.BrokerID = 2 }, "a master is broker 0"},
		{func(o *Options) { o.Store.Replica = true }, "a master's store cannot be a replica"},
		{func(o *Options) { o.AccessMessageInMemoryMaxRatio = 101 }, "is not a percentage"},
		{func(o *Options) { o.Role = Role(9) }, "unknown role"},
	} {
		o := testOptions(t, t.TempDir())
		tc.mutate(&o)
		if _, err := New(o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}

// durableAnswer records what WhenDurable told.
type durableAnswer struct {
	once sync.Once
	err  error
	done chan struct{}
}

func newDurableAnswer() *durableAnswer { return &durableAnswer{done: make(chan struct{})} }

func (d *durableAnswer) Durable(err error) {
	d.once.Do(func() { d.err = err; close(d.done) })
}

func (d *durableAnswer) wait(tb testing.TB) error {
	tb.Helper()
	select {
	case <-d.done:
		return d.err
	case <-time.After(wait.DefaultTimeout):
		tb.Fatalf("no answer in %v", wait.DefaultTimeout)
		return nil
	}
}

// A SYNC_MASTER's send waits for its replica: SLAVE_NOT_AVAILABLE at once
// without one, success once it acknowledges, FLUSH_SLAVE_TIMEOUT when it
// does not within the timeout; in every case the message is stored and the
// in-flight bytes are given back. Inner puts count a not-durable outcome as
// stored.
func TestSyncMasterAnswers(t *testing.T) {
	syncMaster := func(timeout time.Duration) func(*Options) {
		return func(o *Options) {
			o.Role = RoleSyncMaster
			o.Store.SyncFlushTimeout = timeout
		}
	}
	// c's replica timeout is longer than the test may run, so that the
	// acknowledged send cannot time out on a loaded machine; silent's is
	// short, for the send its replica never acknowledges.
	c := newTestCore(t, syncMaster(2*wait.DefaultTimeout))
	silent := newTestCore(t, syncMaster(300*time.Millisecond))
	if !c.Store().DurableWaits() {
		t.Fatal("a SYNC_MASTER's store does not wait for replicas")
	}
	var res SendResult
	if err := c.Send(sendReq("Sync", 0, 100), &res); err != nil {
		t.Fatal(err)
	}
	if !res.Pending.Waiting() {
		t.Fatal("a SYNC_MASTER's send does not wait")
	}
	err := c.WaitDurable(res.Pending)
	if Code(err) != protocol.RespSlaveNotAvailable || !NotDurable(err) || !errors.Is(err, store.ErrReplicaNotAvailable) {
		t.Fatalf("without a slave: %v (code %d)", err, Code(err))
	}
	waitDispatched(t, c, "Sync", 0, 1)

	r := c.Store().AddReplica("test", c.Store().WrittenOffset())
	if err := c.Send(sendReq("Sync", 0, 100), &res); err != nil {
		t.Fatal(err)
	}
	ans := newDurableAnswer()
	c.WhenDurable(res.Pending, ans)
	select {
	case <-ans.done:
		t.Fatalf("answered before the slave acknowledged: %v", ans.err)
	default:
	}
	r.Ack(c.Store().WrittenOffset())
	if err := ans.wait(t); err != nil {
		t.Fatalf("acknowledged by the slave: %v", err)
	}

	rs := silent.Store().AddReplica("test", silent.Store().WrittenOffset())
	if err := silent.Send(sendReq("Sync", 0, 100), &res); err != nil {
		t.Fatal(err)
	}
	ans = newDurableAnswer()
	silent.WhenDurable(res.Pending, ans)
	if err := ans.wait(t); Code(err) != protocol.RespFlushSlaveTimeout || !NotDurable(err) {
		t.Fatalf("a silent slave: %v (code %d)", err, Code(err))
	}
	rs.Remove()
	waitDispatched(t, silent, "Sync", 0, 1)
	for name, cc := range map[string]*Core{"c": c, "silent": silent} {
		if got := cc.inflight.Load(); got != 0 {
			t.Fatalf("%s's in-flight bytes after the waits: %d", name, got)
		}
	}

	r.Remove()
	msgs := []store.Message{{Topic: "Sync", QueueID: 1, Body: []byte("inner")}}
	if _, err := c.putInner(msgs, nil); err != nil {
		t.Fatalf("an inner put without a slave: %v (stored, not durable, is stored)", err)
	}
	waitDispatched(t, c, "Sync", 1, 1)
	// WAIT=false: answered at once.
	req := sendReq("Sync", 0, 10)
	req.Properties = append(req.Properties, testProps("WAIT", "false")...)
	if err := c.Send(req, &res); err != nil || res.Pending.Waiting() {
		t.Fatalf("WAIT=false: %v, waiting %v", err, res.Pending.Waiting())
	}
}

func TestDurableErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int32
	}{
		{store.ErrFlushTimeout, protocol.RespFlushDiskTimeout},
		{store.ErrReplicaTimeout, protocol.RespFlushSlaveTimeout},
		{store.ErrReplicaNotAvailable, protocol.RespSlaveNotAvailable},
	} {
		err := durableError(tc.err)
		if Code(err) != tc.code || !NotDurable(err) || !errors.Is(err, tc.err) {
			t.Errorf("%v: code %d, not durable %v", tc.err, Code(err), NotDurable(err))
		}
	}
	if NotDurable(nil) || NotDurable(durableError(store.ErrLogFailed)) || NotDurable(ErrSystem) {
		t.Error("NotDurable of a success or a failure")
	}
	if err := storeError(store.ErrReplica); err.Code != protocol.RespServiceNotAvailable {
		t.Errorf("ErrReplica: code %d", err.Code)
	}
}

// A slave refuses writes with the Java broker's answers, and serves reads
// of what it replicated.
func TestSlaveRefusesWritesServesReads(t *testing.T) {
	m := newTestCore(t, nil)
	s := newSlaveCore(t, nil)
	var res SendResult
	for i := 0; i < 5; i++ {
		if err := m.Send(sendReq("Repl", 0, 64), &res); err != nil {
			t.Fatal(err)
		}
	}
	replicate(t, m, s)
	s.Replication().SyncTopics(m.Replication().TopicTable())

	for _, tc := range []struct {
		what   string
		err    error
		code   int32
		remark string
	}{
		{"send", s.Send(sendReq("Repl", 0, 64), &res), protocol.RespSystemBusy, "[REJECTREQUEST]this broker is a slave"},
		{"send back", second(s.SendBack(&SendBackRequest{Group: "g", Offset: 0})), protocol.RespSystemBusy, "[REJECTREQUEST]"},
		{"end transaction", second(s.EndTransaction(&EndTransactionRequest{CommitOrRollback: protocol.TransactionCommitType})),
			protocol.RespSlaveNotAvailable, "slave mode"},
		{"create topic", s.Admin().CreateTopic(&TopicRequest{Topic: "New", ReadQueueNums: 1, WriteQueueNums: 1, Perm: 6}),
			protocol.RespSystemError, "Can't modify topic or subscription group from slave broker"},
		{"delete topic", s.Admin().DeleteTopic("Repl"), protocol.RespSystemError, "from slave broker"},
		{"update group", s.Admin().UpdateSubscriptionGroup(protocol.DefaultSubscriptionGroupConfig("g")), protocol.RespSystemError, "from slave broker"},
		{"delete group", s.Admin().DeleteSubscriptionGroup("g", true), protocol.RespSystemError, "from slave broker"},
		{"reset offsets", third(s.Admin().ResetConsumerOffset("Repl", "g", -1, true, -1, -1)), protocol.RespSystemError, "Can not reset offset in slave broker"},
		{"pop", s.Pop(&PopRequest{Group: []byte("g"), Topic: []byte("Repl"), QueueID: -1, MaxMsgs: 1, InvisibleTime: 1000}, &PopResult{}),
			protocol.RespServiceNotAvailable, "POP is served by the master"},
	} {
		if Code(tc.err) != tc.code || !strings.Contains(Remark(tc.err), tc.remark) {
			t.Errorf("%s on a slave: code %d %q, want %d %q", tc.what, Code(tc.err), Remark(tc.err), tc.code, tc.remark)
		}
	}

	var pr PullResult
	defer pr.Release()
	if err := s.Pull(&PullRequest{Group: []byte("g"), Topic: []byte("Repl"), MaxMsgs: 32, OwnSubscription: true}, &pr); err != nil ||
		pr.Status != PullFound || len(pr.Records) != 5 || pr.SuggestBrokerID != 0 {
		t.Fatalf("pull from the slave: %v status %d, %d records, suggest %d", err, pr.Status, len(pr.Records), pr.SuggestBrokerID)
	}
}

func second[T any](_ T, err error) error        { return err }
func third[T, U any](_ T, _ U, err error) error { return err }

// A slave's tables follow the master's: topics and groups created, changed
// and deleted; offsets replaced, except those committed on the slave that
// the master has not reached (returned to be forwarded); delay offsets.
func TestSlaveFollowsTables(t *testing.T) {
	m := newTestCore(t, nil)
	s := newSlaveCore(t, nil)
	if err := m.Admin().CreateTopic(&TopicRequest{Topic: "Followed", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6}); err != nil {
		t.Fatal(err)
	}
	g := protocol.DefaultSubscriptionGroupConfig("FollowedGroup")
	g.RetryMaxTimes = 3
	if err := m.Admin().UpdateSubscriptionGroup(g); err != nil {
		t.Fatal(err)
	}
	if n := s.Replication().SyncTopics(m.Replication().TopicTable()); n == 0 {
		t.Fatal("no topic changed")
	}
	if n := s.Replication().SyncSubscriptionGroups(m.Replication().SubscriptionGroupTable()); n == 0 {
		t.Fatal("no group changed")
	}
	if cfg, ok := s.TopicConfig("Followed"); !ok || cfg.WriteQueueNums != 4 {
		t.Fatalf("the slave's topic: %+v %v", cfg, ok)
	}
	if sg, err := s.SubscriptionGroup([]byte("FollowedGroup")); err != nil || sg.RetryMaxTimes != 3 {
		t.Fatalf("the slave's group: %+v %v", sg, err)
	}
	if n := s.Replication().SyncTopics(m.Replication().TopicTable()) + s.Replication().SyncSubscriptionGroups(m.Replication().SubscriptionGroupTable()); n != 0 {
		t.Fatalf("a second sync changed %d", n)
	}
	if err := m.Admin().DeleteTopic("Followed"); err != nil {
		t.Fatal(err)
	}
	if err := m.Admin().DeleteSubscriptionGroup("FollowedGroup", true); err != nil {
		t.Fatal(err)
	}
	s.Replication().SyncTopics(m.Replication().TopicTable())
	s.Replication().SyncSubscriptionGroups(m.Replication().SubscriptionGroupTable())
	if _, ok := s.TopicConfig("Followed"); ok {
		t.Fatal("a topic deleted on the master stays on the slave")
	}
	if _, err := s.SubscriptionGroup([]byte("FollowedGroup")); err == nil {
		t.Fatal("a group deleted on the master stays on the slave")
	}

	// Offsets.
	tp, grp := []byte("T"), []byte("G")
	m.UpdateConsumerOffset(tp, grp, 0, 10)
	m.UpdateConsumerOffset(tp, grp, 1, 20)
	if fwd := s.Replication().SyncConsumerOffsets(m.Replication().AllConsumerOffsets()); len(fwd) != 0 {
		t.Fatalf("forwarded %v with nothing committed on the slave", fwd)
	}
	if off, _ := s.CommittedOffset("T", "G", 1); off != 20 {
		t.Fatalf("slave's offset %d, want the master's 20", off)
	}
	// A client commits on the slave while the master is away: kept, and
	// returned for the master, until the master has it.
	s.UpdateConsumerOffset(tp, grp, 0, 15)
	s.UpdateConsumerOffset(tp, grp, 1, 18) // behind the master: the master's wins
	fwd := s.Replication().SyncConsumerOffsets(m.Replication().AllConsumerOffsets())
	if len(fwd) != 1 || fwd[0] != (OffsetCommit{Topic: "T", Group: "G", QueueID: 0, Offset: 15}) {
		t.Fatalf("to forward: %v", fwd)
	}
	if off, _ := s.CommittedOffset("T", "G", 0); off != 15 {
		t.Fatalf("the slave's own commit was overwritten: %d", off)
	}
	if off, _ := s.CommittedOffset("T", "G", 1); off != 20 {
		t.Fatalf("queue 1: %d, want the master's 20", off)
	}
	if fwd := s.Replication().SyncConsumerOffsets(m.Replication().AllConsumerOffsets()); len(fwd) != 1 {
		t.Fatalf("a commit not forwarded yet is not returned again: %v", fwd)
	}
	m.UpdateConsumerOffset(tp, grp, 0, 15) // what the front end's forward does
	s.Replication().OffsetForwarded(fwd[0])
	if fwd := s.Replication().SyncConsumerOffsets(m.Replication().AllConsumerOffsets()); len(fwd) != 0 {
		t.Fatalf("forwarded again: %v", fwd)
	}
	// A reset on the master (backwards) now reaches the slave.
	m.UpdateConsumerOffset(tp, grp, 0, 2)
	s.Replication().SyncConsumerOffsets(m.Replication().AllConsumerOffsets())
	if off, _ := s.CommittedOffset("T", "G", 0); off != 2 {
		t.Fatalf("slave's offset %d after the master's reset to 2", off)
	}

	// Delay offsets.
	s.Replication().SyncDelayOffsets(map[int32]int64{1: 7, 3: 9, 99: 1})
	if got := s.Admin().DelayOffsets(); got[1] != 7 || got[3] != 9 || got[2] != 0 {
		t.Fatalf("the slave's delay offsets: %v", got)
	}
	// A master ignores the Sync calls.
	if m.Replication().SyncTopics(TopicTable{}) != 0 || m.Replication().SyncConsumerOffsets(OffsetTable{}) != nil {
		t.Fatal("a master followed a table")
	}
	if _, ok := m.TopicConfig("TBW102"); !ok {
		t.Fatal("a master's table was emptied")
	}
}

// Reads from slaves: the master suggests the slave to a consumer behind the
// memory window (with SlaveReadEnable), the master otherwise; a slave whose
// master is online sends a consumer that is not far behind back to it,
// keeps the offset of one ahead of
// it (a miss is held as usual), and serves everyone when its master is
// away.
func TestPullSuggestions(t *testing.T) {
	m := newTestCore(t, func(o *Options) { o.SlaveReadEnable = true })
	var online sync.Mutex
	masterUp := true
	s := newSlaveCore(t, func(o *Options) {
		o.SlaveReadEnable = true
		o.MasterOnline = func() bool { online.Lock(); defer online.Unlock(); return masterUp }
	})
	setOnline := func(v bool) { online.Lock(); masterUp = v; online.Unlock() }
	m.memWindow, s.memWindow = 64<<10, 64<<10

	var res SendResult
	for i := 0; i < 200; i++ { // 200 KiB: 3 windows
		if err := m.Send(sendReq("Far", 0, 1024), &res); err != nil {
			t.Fatal(err)
		}
	}
	waitDispatched(t, m, "Far", 0, 200)
	pull := func(c *Core, off int64) PullResult {
		t.Helper()
		var pr PullResult
		if err := c.Pull(&PullRequest{Group: []byte("g"), Topic: []byte("Far"), Offset: off, MaxMsgs: 8, OwnSubscription: true}, &pr); err != nil {
			t.Fatal(err)
		}
		pr.Release()
		return pr
	}
	if pr := pull(m, 0); pr.Status != PullFound || pr.SuggestBrokerID != 1 {
		t.Fatalf("master, far behind: status %d suggest %d", pr.Status, pr.SuggestBrokerID)
	}
	if pr := pull(m, 190); pr.Status != PullFound || pr.SuggestBrokerID != 0 {
		t.Fatalf("master, near the end: status %d suggest %d", pr.Status, pr.SuggestBrokerID)
	}
	mNoRead := newTestCore(t, nil)
	mNoRead.memWindow = 0
	for i := 0; i < 4; i++ {
		mNoRead.Send(sendReq("Far", 0, 1024), &res)
	}
	waitDispatched(t, mNoRead, "Far", 0, 4)
	if pr := pull(mNoRead, 0); pr.SuggestBrokerID != 0 {
		t.Fatalf("without slaveReadEnable: suggest %d", pr.SuggestBrokerID)
	}

	replicate(t, m, s)
	s.Replication().SyncTopics(m.Replication().TopicTable())
	if pr := pull(s, 0); pr.Status != PullFound || pr.SuggestBrokerID != 1 {
		t.Fatalf("slave, far behind: status %d suggest %d", pr.Status, pr.SuggestBrokerID)
	}
	if pr := pull(s, 190); pr.Status != PullFound || pr.SuggestBrokerID != 0 {
		t.Fatalf("slave, caught up, master online: status %d suggest %d", pr.Status, pr.SuggestBrokerID)
	}
	if pr := pull(s, 200); pr.Status != PullNoNewMessage || pr.NextOffset != 200 || pr.SuggestBrokerID != 0 {
		t.Fatalf("slave, nothing new, master online: status %d next %d suggest %d", pr.Status, pr.NextOffset, pr.SuggestBrokerID)
	}
	setOnline(false)
	if pr := pull(s, 200); pr.Status != PullNoNewMessage || pr.NextOffset != 200 {
		t.Fatalf("slave, nothing new, master away: status %d next %d", pr.Status, pr.NextOffset)
	}
	// Ahead of the slave (it lags): not moved, nothing yet.
	if pr := pull(s, 250); pr.Status != PullNoNewMessage || pr.NextOffset != 250 {
		t.Fatalf("slave, offset beyond its end: status %d next %d", pr.Status, pr.NextOffset)
	}
	if pr := pull(m, 250); pr.Status != PullOffsetMoved {
		t.Fatalf("master, offset beyond its end: status %d", pr.Status)
	}
	// A pull's commitOffset is ignored on a slave.
	var pr PullResult
	if err := s.Pull(&PullRequest{Group: []byte("g"), Topic: []byte("Far"), Offset: 0, MaxMsgs: 1, OwnSubscription: true,
		HasCommitOffset: true, CommitOffset: 5}, &pr); err != nil {
		t.Fatal(err)
	}
	pr.Release()
	if _, ok := s.CommittedOffset("Far", "g", 0); ok {
		t.Fatal("a slave committed a pull's commitOffset")
	}
}

// A consumer whose offset is below the start of the slave's queue (the
// slave began at a later segment of its master's log) is sent to the master
// while it is online, and waits at its offset while the master is away,
// instead of being told to pull again at once (RocketMQ's answer, on which
// consumer and slave spin until the master returns). The offset is never
// moved on a slave.
func TestSlavePullBelowItsStart(t *testing.T) {
	m := newTestCore(t, nil)
	var online sync.Mutex
	masterUp := true
	s := newSlaveCore(t, func(o *Options) {
		o.SlaveReadEnable = true
		o.MasterOnline = func() bool { online.Lock(); defer online.Unlock(); return masterUp }
	})
	setOnline := func(v bool) { online.Lock(); masterUp = v; online.Unlock() }

	const segment = 8 << 20 // testOptions' segment size
	var res SendResult
	for m.Store().WrittenOffset() < 2*segment+segment/2 {
		if err := m.Send(sendReq("Below", 0, 4096), &res); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Store().ResetReplica(2 * segment); err != nil {
		t.Fatal(err)
	}
	replicate(t, m, s)
	s.Replication().SyncTopics(m.Replication().TopicTable())
	minOff := s.MinOffset("Below", 0)
	if minOff <= 0 || minOff >= s.MaxOffset("Below", 0) {
		t.Fatalf("slave's queue [%d, %d): want it to start after 0", minOff, s.MaxOffset("Below", 0))
	}
	pull := func(off int64) PullResult {
		t.Helper()
		var pr PullResult
		if err := s.Pull(&PullRequest{Group: []byte("g"), Topic: []byte("Below"), Offset: off, MaxMsgs: 8, OwnSubscription: true}, &pr); err != nil {
			t.Fatal(err)
		}
		pr.Release()
		return pr
	}
	if pr := pull(0); pr.Status != PullRetryImmediately || pr.NextOffset != 0 || pr.SuggestBrokerID != 0 {
		t.Fatalf("below the slave's start, master online: status %d next %d suggest %d; want retry at 0 on the master",
			pr.Status, pr.NextOffset, pr.SuggestBrokerID)
	}
	setOnline(false)
	if pr := pull(0); pr.Status != PullNoNewMessage || pr.NextOffset != 0 {
		t.Fatalf("below the slave's start, master away: status %d next %d; want nothing yet at 0", pr.Status, pr.NextOffset)
	}
	if pr := pull(minOff); pr.Status != PullFound {
		t.Fatalf("at the slave's start, master away: status %d", pr.Status)
	}
}
