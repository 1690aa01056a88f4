package store

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/message"
)

// queueTotals sums the max offsets of s's queues, by topic/queue.
func queueTotals(s *Store) map[string]int64 {
	m := map[string]int64{}
	s.Queues(func(topic string, id int32, _, max int64) bool {
		m[fmt.Sprintf("%s/%d", topic, id)] = max
		return true
	})
	return m
}

// A replica that received 1000 messages is promoted: its next message in
// each queue takes the queue offset after the last replicated one, its
// queues and index match the old master's, and a restart recovers the same.
func TestPromoteContinuesQueueOffsets(t *testing.T) {
	master := openStore(t, testOptions(t.TempDir()))
	defer master.Close()
	o := testOptions(t.TempDir())
	o.Replica = true
	replica := openStore(t, o)
	putMessages(t, master, 0, 1000)
	copyLogTo(t, master, replica, master.WrittenOffset())
	waitDispatched(t, master)
	if err := replica.SetReplica(false); err != nil {
		t.Fatal(err)
	}
	if replica.IsReplica() {
		t.Fatal("IsReplica after promotion")
	}
	// No wait for the dispatcher here: SetReplica dispatched everything.
	if n := sameQueues(t, master, replica); n != 1000 {
		t.Fatalf("%d entries compared, want 1000", n)
	}
	want := queueTotals(master)
	for i := 1000; i < 1030; i++ {
		topic, q := fmt.Sprintf("T%d", i%5), int32(i%3)
		m := msg(topic, q, truncBody(i), message.PropKeys, fmt.Sprintf("k%d", i))
		r, err := replica.Put(m)
		if err != nil {
			t.Fatal(err)
		}
		key := fmt.Sprintf("%s/%d", topic, q)
		if r.QueueOffset != want[key] {
			t.Fatalf("message %d in %s got queue offset %d, want %d", i, key, r.QueueOffset, want[key])
		}
		want[key]++
	}
	checkPromoted := func(s *Store) {
		t.Helper()
		waitDispatched(t, s)
		got := queueTotals(s)
		for k, v := range want {
			if got[k] != v {
				t.Fatalf("%s: max offset %d, want %d", k, got[k], v)
			}
		}
		for _, k := range []string{"k5", "k999", "k1029"} {
			var i int
			fmt.Sscanf(k, "k%d", &i)
			vs, err := s.QueryByKey(fmt.Sprintf("T%d", i%5), k, 0, time.Now().UnixMilli()+1000, 10, nil)
			if err != nil || len(vs) != 1 {
				t.Fatalf("query of %s: %d found, %v", k, len(vs), err)
			}
			vs[0].Release()
		}
	}
	checkPromoted(replica)
	if err := replica.Close(); err != nil {
		t.Fatal(err)
	}
	o.Replica = false
	reopened := openStore(t, o)
	defer reopened.Close()
	checkPromoted(reopened)
	r, err := reopened.Put(msg("T0", 0, "after the restart"))
	if err != nil || r.QueueOffset != want["T0/0"] {
		t.Fatalf("put after the restart: offset %d (want %d), %v", r.QueueOffset, want["T0/0"], err)
	}
}

// Puts run on 4 goroutines while the store is demoted: each is either
// stored and acknowledged (below the log's end when SetReplica returned)
// or refused with ErrReplica, and the log holds exactly the acknowledged
// ones.
func TestDemoteWhilePutting(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	const writers = 4
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		acked   []PutResult
		started = make(chan struct{}, writers)
	)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				m := msg(fmt.Sprintf("T%d", w), int32(i%2), fmt.Sprintf("w%d-%d", w, i))
				m.NoWait = i%2 == 0
				r, err := s.Put(m)
				if errors.Is(err, ErrReplica) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, r)
				mu.Unlock()
				if i == 50 {
					started <- struct{}{}
				}
			}
		}()
	}
	for range writers {
		<-started
	}
	if err := s.SetReplica(true); err != nil {
		t.Fatal(err)
	}
	end := s.WrittenOffset()
	wg.Wait()
	if w := s.WrittenOffset(); w != end {
		t.Fatalf("the log grew from %d to %d after SetReplica returned", end, w)
	}
	waitDispatched(t, s)
	mu.Lock()
	defer mu.Unlock()
	var stored int64
	for _, m := range queueTotals(s) {
		stored += m
	}
	if stored != int64(len(acked)) {
		t.Fatalf("%d messages stored, %d acknowledged", stored, len(acked))
	}
	seen := map[string]bool{}
	for _, r := range acked {
		if r.CommitLogOffset+int64(r.Size) > end {
			t.Fatalf("acknowledged message at %d beyond the log's end %d at demotion", r.CommitLogOffset, end)
		}
		v, err := s.ReadMessage(r.CommitLogOffset)
		if err != nil {
			t.Fatal(err)
		}
		mv, err := message.Decode(v.Bytes(), false)
		if err != nil {
			t.Fatal(err)
		}
		seen[string(mv.Body())] = true
		v.Release()
	}
	if len(seen) != len(acked) {
		t.Fatalf("%d distinct bodies for %d acknowledgements", len(seen), len(acked))
	}
	if _, err := s.Put(msg("T0", 0, "late")); !errors.Is(err, ErrReplica) {
		t.Fatalf("put on a demoted store: %v", err)
	}
}

// A demoted master follows its new master: it is cut back to their common
// offset (TruncateReplica) and appends the new master's records
// (AppendReplicated); roles then swap back and forth five times, each
// master writing in its term, and the two stores stay identical, with
// dense queue offsets.
func TestPromoteDemoteCycles(t *testing.T) {
	a := openStore(t, testOptions(t.TempDir()))
	defer a.Close()
	ob := testOptions(t.TempDir())
	ob.Replica = true
	b := openStore(t, ob)
	defer b.Close()
	if _, err := a.AppendReplicated(0, nil); !errors.Is(err, ErrNotReplica) {
		t.Fatalf("AppendReplicated on a master: %v", err)
	}
	master, replica := a, b
	n := 0
	for term := range 6 {
		putMessages(t, master, n, 300)
		n += 300
		copyLogTo(t, master, replica, master.WrittenOffset())
		common := master.WrittenOffset()
		// The old master writes a little more that its replica never gets.
		lost := putMessages(t, master, n, 7)
		if err := master.SetReplica(true); err != nil {
			t.Fatal(err)
		}
		if err := replica.SetReplica(false); err != nil {
			t.Fatal(err)
		}
		tr, err := master.TruncateReplica(common)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Messages != int64(len(lost)) {
			t.Fatalf("term %d: truncation cut %d messages, want %d", term, tr.Messages, len(lost))
		}
		master, replica = replica, master
		waitDispatched(t, master)
		if c := sameQueues(t, master, replica); c != n {
			t.Fatalf("term %d: %d entries compared, want %d", term, c, n)
		}
	}
	putMessages(t, master, n, 10)
	n += 10
	copyLogTo(t, master, replica, master.WrittenOffset())
	waitDispatched(t, master)
	waitDispatched(t, replica)
	if c := sameQueues(t, master, replica); c != n {
		t.Fatalf("%d entries compared, want %d", c, n)
	}
	// Dense: every message of every queue, in order, once.
	var total int64
	for _, m := range queueTotals(master) {
		total += m
	}
	if total != int64(n) {
		t.Fatalf("queues hold %d offsets, %d messages were put", total, n)
	}
}

// A store opened as a replica may keep SyncReplicas for when it is
// promoted: it does not wait for replicas of its own meanwhile.
func TestReplicaKeepsSyncReplicasForPromotion(t *testing.T) {
	o := testOptions(t.TempDir())
	o.Replica = true
	o.SyncReplicas = 1
	s := openStore(t, o)
	defer s.Close()
	if s.DurableWaits() {
		t.Fatal("a replica waits for replicas")
	}
	if err := s.SetReplica(false); err != nil {
		t.Fatal(err)
	}
	if !s.DurableWaits() {
		t.Fatal("a promoted store with SyncReplicas 1 does not wait for replicas")
	}
	r, err := s.Put(msg("T", 0, "x"))
	if err != nil || r.Status != StatusSlaveNotAvailable {
		t.Fatalf("put without a replica: status %v, %v", r.Status, err)
	}
	if err := s.SetReplica(true); err != nil {
		t.Fatal(err)
	}
	if s.DurableWaits() {
		t.Fatal("a demoted store waits for replicas")
	}
	if err := s.SetReplica(true); err != nil {
		t.Fatalf("a no-op demotion: %v", err)
	}
}

// SetSyncReplicas changes the requirement until SetInSyncReplicas sets a
// SyncStateSet, which wins from then on.
func TestSetSyncReplicasYieldsToInSyncSet(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	s.SetSyncReplicas(1)
	if need, set := s.SyncReplicas(); need != 1 || set || !s.DurableWaits() {
		t.Fatalf("after SetSyncReplicas(1): need %d, in-sync set %v, waits %v", need, set, s.DurableWaits())
	}
	s.SetInSyncReplicas(0, []string{})
	s.SetSyncReplicas(1)
	if need, set := s.SyncReplicas(); need != 0 || !set {
		t.Fatalf("SetSyncReplicas after SetInSyncReplicas: need %d, in-sync set %v", need, set)
	}
}

// A SYNC master's message that no replica acknowledged is not durable
// because the store was demoted: WaitPutDurable still needs the replicas
// (and fails once they are gone), while the replica's own WaitDurable is the
// flush alone.
func TestDemotionDoesNotMakePutsDurable(t *testing.T) {
	o := testOptions(t.TempDir())
	o.SyncReplicas = 1
	o.SyncFlushTimeout = time.Minute
	s := openStore(t, o)
	defer s.Close()
	rep := s.AddReplica("r1", 0)
	m := msg("T", 0, "x")
	m.NoWait = true
	r, err := s.Put(m)
	if err != nil {
		t.Fatal(err)
	}
	end := r.CommitLogOffset + int64(r.Size)
	if err := s.SetReplica(true); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitDurable(end); err != nil {
		t.Fatalf("a replica's WaitDurable: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.WaitPutDurable(end) }()
	rep.Remove()
	if err := <-done; !errors.Is(err, ErrReplicaNotAvailable) {
		t.Fatalf("WaitPutDurable after the demotion: %v", err)
	}
	if err := s.SetReplica(false); err != nil {
		t.Fatal(err)
	}
	if got := s.ReplicatedOffset(); got > s.WrittenOffset() {
		t.Fatalf("replicated offset %d beyond the log's end %d", got, s.WrittenOffset())
	}
}
