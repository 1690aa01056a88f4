package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
)

// copyLog feeds the master's log into the replica from the replica's end, in
// chunks of at most chunk bytes, as package ha's client does.
func copyLog(t *testing.T, master, replica *Store, chunk int) {
	t.Helper()
	var pend []byte
	pos := replica.WrittenOffset()
	pendOff := pos
	for pos < master.WrittenOffset() {
		v, err := master.ReadLog(pos, chunk)
		if err != nil {
			t.Fatal(err)
		}
		pend = append(pend, v.Bytes()...)
		pos += int64(len(v.Bytes()))
		v.Release()
		n, err := replica.AppendReplicated(pendOff, pend)
		if err != nil {
			t.Fatal(err)
		}
		pend = append(pend[:0], pend[n:]...)
		pendOff += int64(n)
	}
}

// waitDispatched waits until dispatch has reached the end of s's log.
func waitDispatched(t *testing.T, s *Store) {
	t.Helper()
	wait.For(t, "dispatch to the end of the log", func() error {
		if d, w := s.DispatchedOffset(), s.WrittenOffset(); d < w {
			return fmt.Errorf("dispatched %d of %d", d, w)
		}
		return nil
	})
}

// sameQueues checks that every queue of a holds the same entries in b.
func sameQueues(t *testing.T, a, b *Store) int {
	t.Helper()
	n := 0
	a.Queues(func(topic string, id int32, min, max int64) bool {
		ea, err := a.ReadEntries(topic, id, min, make([]QueueEntry, 0, max-min))
		if err != nil {
			t.Fatal(err)
		}
		eb, err := b.ReadEntries(topic, id, min, make([]QueueEntry, 0, max-min))
		if err != nil {
			t.Fatalf("%s/%d on the replica: %v", topic, id, err)
		}
		if !slices.Equal(ea, eb) {
			t.Fatalf("%s/%d: master %d entries, replica %d (or they differ)", topic, id, len(ea), len(eb))
		}
		n += len(ea)
		return true
	})
	return n
}

func TestReplicaRefusesPut(t *testing.T) {
	o := testOptions(t.TempDir())
	o.Replica = true
	s := openStore(t, o)
	defer s.Close()
	if _, err := s.Put(msg("T", 0, "x")); !errors.Is(err, ErrReplica) {
		t.Fatalf("put on a replica: %v", err)
	}
	master := openStore(t, testOptions(t.TempDir()))
	defer master.Close()
	if _, err := master.AppendReplicated(0, nil); !errors.Is(err, ErrNotReplica) {
		t.Fatalf("replicated append on a master: %v", err)
	}
}

func TestAppendReplicatedDispatches(t *testing.T) {
	master := openStore(t, testOptions(t.TempDir()))
	defer master.Close()
	o := testOptions(t.TempDir())
	o.Replica = true
	replica := openStore(t, o)
	defer replica.Close()
	for i := 0; i < 3000; i++ {
		m := msg(fmt.Sprintf("T%d", i%7), int32(i%3), fmt.Sprintf("body-%d-%s", i, make([]byte, i%700)), message.PropKeys, fmt.Sprintf("k%d", i))
		m.NoWait = true
		if _, err := master.Put(m); err != nil {
			t.Fatal(err)
		}
		if i%500 == 0 {
			copyLog(t, master, replica, 1000+i)
		}
	}
	copyLog(t, master, replica, 64<<10)
	waitDispatched(t, master)
	waitDispatched(t, replica)
	if n := sameQueues(t, master, replica); n != 3000 {
		t.Fatalf("%d entries compared, want 3000", n)
	}
	vs, err := replica.QueryByKey("T3", "k2999", 0, time.Now().UnixMilli()+1000, 10, nil)
	if err != nil || len(vs) != 1 {
		t.Fatalf("query by key on the replica: %d, %v", len(vs), err)
	}
	vs[0].Release()
	if st := replica.Stats(); st.ReplicatedBytes != replica.WrittenOffset() {
		t.Fatalf("replicated bytes %d, written %d", st.ReplicatedBytes, replica.WrittenOffset())
	}
}

func TestResetReplica(t *testing.T) {
	master := openStore(t, testOptions(t.TempDir()))
	defer master.Close()
	o := testOptions(t.TempDir())
	o.Replica = true
	replica := openStore(t, o)
	for i := 0; i < 500; i++ {
		m := msg("T", 0, fmt.Sprintf("%d-%s", i, make([]byte, 900)))
		m.NoWait = true
		if _, err := master.Put(m); err != nil {
			t.Fatal(err)
		}
	}
	copyLog(t, master, replica, 4096)
	waitDispatched(t, replica)
	held, err := replica.ReadMessage(0)
	if err != nil {
		t.Fatal(err)
	}
	oldMax := replica.MaxOffset("T", 0)
	base := 10 * replica.SegmentSize()
	aside, err := replica.ResetReplica(base)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := message.Decode(held.Bytes(), true); err != nil {
		t.Fatalf("a view taken before the reset: %v", err)
	}
	held.Release()
	if entries, _ := os.ReadDir(aside); len(entries) == 0 {
		t.Fatalf("nothing set aside in %q", aside)
	}
	if min, max := replica.MinOffset("T", 0), replica.MaxOffset("T", 0); min != oldMax || max != oldMax {
		t.Fatalf("queue after reset: [%d, %d), want empty at %d", min, max, oldMax)
	}
	var res GetResult
	if err := replica.Get("T", 0, 0, 32, 1<<20, nil, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Messages) != 0 {
		t.Fatalf("%d messages of the discarded log served", len(res.Messages))
	}
	res.Release()
	if replica.LogMinOffset() != base || replica.WrittenOffset() != base || replica.DispatchedOffset() != base {
		t.Fatalf("after reset: min %d written %d dispatched %d, want %d", replica.LogMinOffset(), replica.WrittenOffset(), replica.DispatchedOffset(), base)
	}
	if err := replica.Close(); err != nil {
		t.Fatal(err)
	}
	replica = openStore(t, o)
	defer replica.Close()
	if replica.LogMinOffset() != base || replica.WrittenOffset() != base {
		t.Fatalf("reopened: min %d written %d", replica.LogMinOffset(), replica.WrittenOffset())
	}
	if _, err := os.Stat(filepath.Join(aside, "00000000000000000000")); err != nil {
		t.Fatal(err)
	}
}

// replicatedOptions: sync replication to one replica, with a short timeout.
func replicatedOptions(dir string) Options {
	o := testOptions(dir)
	o.SyncReplicas = 1
	o.SyncFlushTimeout = 300 * time.Millisecond
	return o
}

func putNoWait(t *testing.T, s *Store, body string) int64 {
	t.Helper()
	m := msg("T", 0, body)
	m.NoWait = true
	r, err := s.Put(m)
	if err != nil {
		t.Fatal(err)
	}
	return r.CommitLogOffset + int64(r.Size)
}

func TestSyncReplicasNoReplica(t *testing.T) {
	for _, mode := range []FlushMode{FlushAsync, FlushSync} {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { // virtual time: a wait on the replicas shows as all of SyncFlushTimeout
				o := replicatedOptions(t.TempDir())
				o.FlushMode = mode
				s := openStore(t, o)
				defer s.Close()
				if !s.DurableWaits() {
					t.Fatal("DurableWaits false with replicas required")
				}
				start := time.Now()
				r, err := s.Put(msg("T", 0, "x"))
				if err != nil || r.Status != StatusSlaveNotAvailable {
					t.Fatalf("put without a replica: %v, status %d", err, r.Status)
				}
				if d := time.Since(start); d >= o.SyncFlushTimeout { // the bubble's time: a wait on the replicas takes all of it
					t.Fatalf("not available took %v: it must not wait", d)
				}
				end := r.CommitLogOffset + int64(r.Size)
				if err := s.WaitDurable(end); !errors.Is(err, ErrReplicaNotAvailable) || !NotDurable(err) {
					t.Fatalf("wait: %v", err)
				}
				w := newWaiter()
				s.OnDurable(end, w)
				if err := w.wait(t); !errors.Is(err, ErrReplicaNotAvailable) {
					t.Fatalf("OnDurable: %v", err)
				}
				if s.DurableOffset() != 0 {
					t.Fatalf("durable offset %d with nothing replicated", s.DurableOffset())
				}
				// The message is stored all the same.
				waitVisible(t, s, "T", 0, 1)
			})
		})
	}
}

func TestSyncReplicasAck(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // the store's timers in virtual time: waits are parked, not guessed
		s := openStore(t, replicatedOptions(t.TempDir()))
		defer s.Close()
		r := s.AddReplica("replica-1", 0)
		end := putNoWait(t, s, "a")
		done := make(chan error, 1)
		go func() { done <- s.WaitDurable(end) }()
		var ws []*recordingWaiter
		var last int64
		for i := 0; i < 20; i++ {
			last = putNoWait(t, s, "b")
			w := newWaiter()
			s.OnDurable(last, w)
			ws = append(ws, w)
		}
		// The wait is parked (nothing else moves in the bubble) and has not
		// returned: it waits for the ack.
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("wait returned before the ack: %v", err)
		default:
		}
		r.Ack(end)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if s.DurableOffset() != end {
			t.Fatalf("durable offset %d, want %d", s.DurableOffset(), end)
		}
		// One ack covers every waiter below it.
		r.Ack(last)
		for i, w := range ws {
			if err := w.wait(t); err != nil {
				t.Fatalf("waiter %d: %v", i, err)
			}
		}
		info := s.Replicas()
		if len(info) != 1 || info[0].Name != "replica-1" || info[0].Acked != last || !info[0].InSync {
			t.Fatalf("replicas: %+v", info)
		}
		// A lower ack is ignored.
		r.Ack(1)
		if r.Acked() != last || s.ReplicatedOffset() != last {
			t.Fatalf("acked %d replicated %d after a lower ack", r.Acked(), s.ReplicatedOffset())
		}
	})
}

func TestSyncReplicasTimeoutAndLeave(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // the store's timers in virtual time: waits are parked, not guessed
		o := replicatedOptions(t.TempDir())
		o.FlushMode = FlushSync
		s := openStore(t, o)
		defer s.Close()
		r := s.AddReplica("stalled", 0)
		start := time.Now()
		res, err := s.Put(msg("T", 0, "x"))
		if err != nil || res.Status != StatusFlushSlaveTimeout {
			t.Fatalf("put with a silent replica: %v, status %d", err, res.Status)
		}
		if d := time.Since(start); d < o.SyncFlushTimeout { // the bubble's time: exact
			t.Fatalf("timed out after %v, before SyncFlushTimeout", d)
		}
		// Flushed locally all the same.
		if s.Log().FlushedOffset() < res.CommitLogOffset+int64(res.Size) {
			t.Fatal("not flushed")
		}
		// The replica leaving ends a wait at once.
		end := putNoWait(t, s, "y")
		done := make(chan error, 1)
		go func() { done <- s.WaitDurable(end) }()
		synctest.Wait() // the wait is parked for the ack
		start = time.Now()
		r.Remove()
		// The leave ends it (ErrReplicaNotAvailable; its timeout would end it
		// with ErrReplicaTimeout), before any time passes in the bubble.
		if err := <-done; !errors.Is(err, ErrReplicaNotAvailable) {
			t.Fatalf("wait after the replica left: %v", err)
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("the wait ended %v after the replica left", d)
		}
		r.Ack(end) // after Remove: ignored
		if s.ReplicatedOffset() != 0 {
			t.Fatalf("a removed replica's ack counted: %d", s.ReplicatedOffset())
		}
	})
}

func TestSyncReplicasGap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) { // virtual time: a wait on the replicas shows as all of SyncFlushTimeout
		o := replicatedOptions(t.TempDir())
		o.MaxReplicaGap = 4096
		s := openStore(t, o)
		defer s.Close()
		s.AddReplica("behind", 0)
		for s.WrittenOffset() < 8192 {
			putNoWait(t, s, string(make([]byte, 500)))
		}
		start := time.Now()
		res, err := s.Put(msg("T", 0, "x"))
		if err != nil || res.Status != StatusSlaveNotAvailable || time.Since(start) >= o.SyncFlushTimeout { // the bubble's time
			t.Fatalf("put with a replica %d bytes behind: %v, status %d after %v", s.WrittenOffset(), err, res.Status, time.Since(start))
		}
		if info := s.Replicas(); len(info) != 1 || info[0].InSync {
			t.Fatalf("replicas: %+v", info)
		}
	})
}

// TestSyncReplicasTwo requires two replicas: the second-highest ack counts.
func TestSyncReplicasTwo(t *testing.T) {
	o := replicatedOptions(t.TempDir())
	o.SyncReplicas = 2
	s := openStore(t, o)
	defer s.Close()
	a := s.AddReplica("a", 0)
	end := putNoWait(t, s, "x")
	if err := s.WaitDurable(end); !errors.Is(err, ErrReplicaNotAvailable) {
		t.Fatalf("one replica of two: %v", err)
	}
	b := s.AddReplica("b", 0)
	a.Ack(end)
	if s.DurableOffset() != 0 {
		t.Fatal("durable with one ack of two")
	}
	b.Ack(end)
	if err := s.WaitDurable(end); err != nil || s.DurableOffset() != end {
		t.Fatalf("two acks: %v, durable %d", err, s.DurableOffset())
	}
}
