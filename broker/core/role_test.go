package core

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/protocol"
)

// roleConn is a producer's connection that counts the transaction checks
// it is asked.
type roleConn struct{ checks atomic.Int64 }

func (r *roleConn) RemoteAddr() string                               { return "127.0.0.1:40000" }
func (r *roleConn) NotifyConsumerIDsChanged(string) error            { return nil }
func (r *roleConn) ResetOffset(*OffsetReset) error                   { return nil }
func (r *roleConn) Close() error                                     { return nil }
func (r *roleConn) CheckTransaction(string, *TransactionCheck) error { r.checks.Add(1); return nil }

func createTopic(t testing.TB, c *Core, name string, queues int32) {
	t.Helper()
	if err := c.Admin().CreateTopic(&TopicRequest{Topic: name, ReadQueueNums: queues, WriteQueueNums: queues,
		Perm: protocol.PermRead | protocol.PermWrite}); err != nil {
		t.Fatal(err)
	}
}

func setRole(t testing.TB, c *Core, r Role) {
	t.Helper()
	if err := c.Replication().SetRole(r); err != nil {
		t.Fatalf("SetRole(%v): %v", r, err)
	}
	if c.Role() != r || c.IsSlave() != (r == RoleSlave) || c.Store().IsReplica() != (r == RoleSlave) {
		t.Fatalf("after SetRole(%v): role %v, slave %v, replica store %v", r, c.Role(), c.IsSlave(), c.Store().IsReplica())
	}
}

// A master becomes a slave and a master again in place: as a slave it
// refuses sends (errSlaveSend), then takes them with the queue offsets
// continuing; a SYNC_MASTER's sends wait for a replica; a no-op change and a
// change after Shutdown answer as documented.
func TestSetRoleMasterSlaveMaster(t *testing.T) {
	c := newTestCore(t, nil)
	createTopic(t, c, "R", 2)
	var res SendResult
	for i := range 5 {
		if err := c.Send(sendReq("R", 0, 100), &res); err != nil || res.QueueOffset != int64(i) {
			t.Fatalf("send %d: offset %d, %v", i, res.QueueOffset, err)
		}
	}
	setRole(t, c, RoleSlave)
	if err := c.Send(sendReq("R", 0, 100), &res); err != errSlaveSend {
		t.Fatalf("send to a slave: %v", err)
	}
	if err := c.Replication().SetRole(RoleSlave); err != nil {
		t.Fatalf("a no-op role change: %v", err)
	}
	waitDispatched(t, c, "R", 0, 5) // the slave serves what it stored as master
	setRole(t, c, RoleAsyncMaster)
	if err := c.Send(sendReq("R", 0, 100), &res); err != nil || res.QueueOffset != 5 {
		t.Fatalf("send after the promotion: offset %d, %v", res.QueueOffset, err)
	}

	setRole(t, c, RoleSyncMaster)
	if need, _ := c.Store().SyncReplicas(); need != 1 {
		t.Fatalf("a SYNC_MASTER's store needs %d replicas", need)
	}
	if err := c.Send(sendReq("R", 1, 100), &res); err != nil || !res.Pending.Waiting() {
		t.Fatalf("send to a SYNC_MASTER: pending %v, %v", res.Pending.Waiting(), err)
	}
	if err := c.WaitDurable(res.Pending); Code(err) != protocol.RespSlaveNotAvailable {
		t.Fatalf("a SYNC_MASTER's send without a slave: %v", err)
	}
	setRole(t, c, RoleSlave)
	setRole(t, c, RoleAsyncMaster)
	if need, _ := c.Store().SyncReplicas(); need != 0 {
		t.Fatalf("an ASYNC_MASTER's store needs %d replicas", need)
	}
	if err := c.Send(sendReq("R", 1, 100), &res); err != nil || res.Pending.Waiting() || res.QueueOffset != 1 {
		t.Fatalf("send to an ASYNC_MASTER: offset %d, pending %v, %v", res.QueueOffset, res.Pending.Waiting(), err)
	}
	if err := c.Replication().SetRole(Role(9)); err == nil {
		t.Fatal("an unknown role was accepted")
	}
	if err := c.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := c.Replication().SetRole(RoleSlave); err != ErrClosed {
		t.Fatalf("SetRole after Shutdown: %v", err)
	}
}

// A SetRole on a slave that follows its master's SyncStateSet leaves the
// requirement controller mode set alone.
func TestSetRoleLeavesTheInSyncSet(t *testing.T) {
	c := newSlaveCore(t, nil)
	c.Store().SetInSyncReplicas(0, []string{})
	setRole(t, c, RoleSyncMaster)
	if need, set := c.Store().SyncReplicas(); need != 0 || !set {
		t.Fatalf("SetRole changed the SyncStateSet's requirement: need %d, set %v", need, set)
	}
	if !c.waitDurable.Load() {
		t.Fatal("a SYNC_MASTER's sends do not wait for durability")
	}
}

// A delayed message and a timer stored before a demotion are delivered
// once, after the promotion, by the new master's features.
func TestDelayAndTimerDeliverAfterPromotion(t *testing.T) {
	c := newTestCore(t, func(o *Options) { o.DelayLevels = "2s" })
	createTopic(t, c, "D", 1)
	var res SendResult
	r := sendReq("D", 0, 10)
	r.Properties = message.AppendProperty(r.Properties, message.PropDelay, "1")
	if err := c.Send(r, &res); err != nil {
		t.Fatal(err)
	}
	r = sendReq("D", 0, 10)
	r.Properties = message.AppendProperty(r.Properties, message.PropTimerDeliverMS,
		strconv.FormatInt(time.Now().Add(2*time.Second).UnixMilli(), 10))
	if err := c.Send(r, &res); err != nil {
		t.Fatal(err)
	}
	wait.Equal(t, "the timer loaded", 1, func() int { return c.features().timers.Stats().Pending })
	for range 2 {
		setRole(t, c, RoleSlave)
		setRole(t, c, RoleAsyncMaster)
	}
	if n := c.MaxOffset("D", 0); n != 0 {
		t.Skipf("%d messages delivered before the role changes ended (a slow machine)", n)
	}
	waitDispatched(t, c, "D", 0, 2)
	// Both came once: a third entry would be a double delivery, by an
	// instance of an earlier term. The wheel and the scheduler finished.
	wait.Equal(t, "the timer wheel empty", 0, func() int { return c.features().timers.Stats().Pending })
	wait.Equal(t, "the delay delivered", int64(1), func() int64 { return c.features().sched.Stats().Delivered })
	if n := c.MaxOffset("D", 0); n != 2 {
		t.Fatalf("%d messages delivered, want 2", n)
	}
}

// A transaction's half message stored as master is checked back after a
// demotion and a promotion.
func TestTransactionCheckedAfterPromotion(t *testing.T) {
	c := newTestCore(t, func(o *Options) {
		o.TransactionTimeout, o.TransactionCheckInterval = 100*time.Millisecond, 20*time.Millisecond
	})
	createTopic(t, c, "X", 1)
	conn := &roleConn{}
	if err := c.Heartbeat(conn, &protocol.HeartbeatData{ClientID: "p1",
		ProducerDataSet: []protocol.ProducerData{{GroupName: "pg"}}}, "GO", 0); err != nil {
		t.Fatal(err)
	}
	r := sendReq("X", 0, 10)
	r.SysFlag = message.TxPreparedType
	r.Properties = message.AppendProperty(message.AppendProperty(r.Properties, message.PropTranMsg, "true"),
		message.PropProducerGroup, "pg")
	var res SendResult
	if err := c.Send(r, &res); err != nil {
		t.Fatal(err)
	}
	setRole(t, c, RoleSlave)
	setRole(t, c, RoleAsyncMaster)
	before := conn.checks.Load()
	wait.Until(t, "a transaction check after the promotion", func() bool { return conn.checks.Load() > before })
}

// POP is refused on a slave and works again once it is a master, and
// the revive listeners hear the new master's POP state.
func TestPopAfterPromotion(t *testing.T) {
	c := newTestCore(t, nil)
	createTopic(t, c, "P", 1)
	var res SendResult
	for range 4 {
		if err := c.Send(sendReq("P", 0, 10), &res); err != nil {
			t.Fatal(err)
		}
	}
	waitDispatched(t, c, "P", 0, 4)
	var revived atomic.Int64
	c.OnRevive(func(string, string, int32, time.Time) { revived.Add(1) })
	pop := func() (*PopResult, error) {
		var pr PopResult
		err := c.Pop(&PopRequest{Group: []byte("pg1"), Topic: []byte("P"), QueueID: -1, MaxMsgs: 2, InvisibleTime: 60000, FromFirst: true}, &pr)
		return &pr, err
	}
	if pr, err := pop(); err != nil || len(pr.Msgs) != 2 {
		t.Fatalf("pop as master: %d messages, %v", len(pr.Msgs), err)
	}
	setRole(t, c, RoleSlave)
	if _, err := pop(); err != errSlavePop {
		t.Fatalf("pop on a slave: %v", err)
	}
	setRole(t, c, RoleAsyncMaster)
	pr, err := pop()
	if err != nil || len(pr.Msgs) != 2 || pr.Msgs[0].Offset != 2 {
		t.Fatalf("pop after the promotion: %+v, %v", pr.Msgs, err)
	}
	if err := c.Ack([]byte("pg1"), []byte("P"), pr.Msgs[0].QueueID, pr.Msgs[0].Offset,
		Receipt{QueueID: pr.Msgs[0].QueueID, PopTime: pr.PopTime}); err != nil {
		t.Fatalf("ack after the promotion: %v", err)
	}
	// OnRevive's listener, registered before the role changes, hears the
	// new master's POP state.
	if _, err := c.ChangeInvisible([]byte("pg1"), []byte("P"), pr.Msgs[1].QueueID, pr.Msgs[1].Offset,
		Receipt{QueueID: pr.Msgs[1].QueueID, PopTime: pr.PopTime}, 1); err != nil {
		t.Fatalf("change invisible after the promotion: %v", err)
	}
	wait.Until(t, "a revive told after the promotion", func() bool { return revived.Load() > 0 })
}

// Sends run on 4 goroutines while the core changes role back and forth:
// each is either stored (SEND_OK) or refused with errSlaveSend, and the
// queues hold exactly the stored ones, each at its own queue offset.
func TestSetRoleUnderConcurrentSends(t *testing.T) {
	c := newTestCore(t, nil)
	createTopic(t, c, "C", 4)
	const senders = 4
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		stored  = map[string]bool{}
		refused atomic.Int64
		stop    atomic.Bool
	)
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res SendResult
			for i := 0; !stop.Load(); i++ {
				err := c.Send(sendReq("C", int32(w), 50), &res)
				switch {
				case err == nil:
					mu.Lock()
					key := fmt.Sprintf("%d/%d", res.QueueID, res.QueueOffset)
					if stored[key] {
						t.Errorf("queue offset %s given twice", key)
					}
					stored[key] = true
					mu.Unlock()
				case err == errSlaveSend:
					refused.Add(1)
				default:
					t.Errorf("send: %v", err)
					return
				}
			}
		}()
	}
	for i := range 6 {
		wait.Until(t, "sends stored", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(stored) > 20*(i+1)
		})
		setRole(t, c, RoleSlave)
		wait.Until(t, "sends refused", func() bool { return refused.Load() > int64(i) })
		setRole(t, c, RoleAsyncMaster)
	}
	stop.Store(true)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	wait.Equal(t, "every stored send dispatched", int64(len(stored)), func() int64 {
		var n int64
		for q := range int32(senders) {
			n += c.MaxOffset("C", q)
		}
		return n
	})
}

// BenchmarkSetRole measures master → slave → master cycles of a core with
// 20 topics (one op is both changes); promote-ms is the promotion's mean.
func BenchmarkSetRole(b *testing.B) {
	c := newTestCore(b, nil)
	for i := range 20 {
		createTopic(b, c, fmt.Sprintf("B%02d", i), 4)
		var res SendResult
		if err := c.Send(sendReq(fmt.Sprintf("B%02d", i), 0, 100), &res); err != nil {
			b.Fatal(err)
		}
	}
	var promote time.Duration
	n := 0
	for b.Loop() {
		if err := c.Replication().SetRole(RoleSlave); err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		if err := c.Replication().SetRole(RoleAsyncMaster); err != nil {
			b.Fatal(err)
		}
		promote += time.Since(began)
		n++
	}
	b.ReportMetric(float64(promote.Microseconds())/1000/float64(n), "promote-ms")
}
