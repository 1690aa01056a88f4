package ha

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/store"
)

// syncMasterOptions: a SYNC_MASTER's store with a short timeout.
func syncMasterOptions(dir string, flush store.FlushMode) store.Options {
	o := storeOptions(dir)
	o.SyncReplicas = 1
	o.FlushMode = flush
	o.SyncFlushTimeout = 500 * time.Millisecond
	return o
}

func putOne(t *testing.T, st *store.Store, body string, noWait bool) (store.PutResult, time.Duration) {
	t.Helper()
	start := time.Now()
	r, err := st.Put(&store.Message{Topic: "sync", QueueID: 0, BornHost: born, Body: []byte(body), NoWait: noWait})
	if err != nil {
		t.Fatal(err)
	}
	return r, time.Since(start)
}

type waiter struct {
	once sync.Once
	err  error
	done chan struct{}
}

func newWaiter() *waiter { return &waiter{done: make(chan struct{})} }

func (w *waiter) Durable(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.done)
	})
}

func (w *waiter) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-w.done:
		return w.err
	case <-time.After(wait.DefaultTimeout):
		t.Fatal("waiter never told")
		return nil
	}
}

// TestSyncReplication: a SYNC_MASTER's puts answer when the slave holds the
// message, fail with SLAVE_NOT_AVAILABLE without a slave, and with
// FLUSH_SLAVE_TIMEOUT while the slave is connected but stalled; the message
// is in the master's log every time.
func TestSyncReplication(t *testing.T) {
	for _, flush := range []store.FlushMode{store.FlushAsync, store.FlushSync} {
		t.Run(flush.String(), func(t *testing.T) {
			master := openStore(t, syncMasterOptions(t.TempDir(), flush))
			defer master.Close()
			m, addr := startMaster(t, master, MasterOptions{})
			defer m.Close()

			// No slave: not available, at once. The status says so: only the
			// check made before waiting answers SLAVE_NOT_AVAILABLE for a slave
			// that never came; a put that waited for one would end with
			// FLUSH_SLAVE_TIMEOUT.
			r, d := putOne(t, master, "alone", false)
			if r.Status != store.StatusSlaveNotAvailable {
				t.Fatalf("put without a slave: status %d after %v", r.Status, d)
			}

			ro := replicaOptions(t.TempDir())
			ro.FlushMode = flush // a sync-flush slave acknowledges what it flushed
			replica := openStore(t, ro)
			defer replica.Close()
			px := newProxy(t, addr)
			s := startSlave(t, replica, px.addr(), SlaveOptions{})
			defer s.Close()
			wait.Until(t, "the slave to be in sync", func() bool {
				rs := master.Replicas()
				return len(rs) == 1 && rs[0].InSync
			})

			// Each acknowledged put is on the slave by the time it returns.
			for i := 0; i < 50; i++ {
				r, _ := putOne(t, master, "replicated", false)
				if r.Status != store.StatusOK {
					t.Fatalf("put %d: status %d", i, r.Status)
				}
				end := r.CommitLogOffset + int64(r.Size)
				if got := replica.WrittenOffset(); got < end {
					t.Fatalf("put %d acknowledged at %d, the slave holds %d", i, end, got)
				}
				if flush == store.FlushSync && replica.DurableOffset() < end {
					t.Fatalf("put %d acknowledged at %d, the slave flushed %d", i, end, replica.DurableOffset())
				}
			}
			// One acknowledgement serves a group of OnDurable waiters.
			var ws []*waiter
			for i := 0; i < 100; i++ {
				r, _ := putOne(t, master, "grouped", true)
				w := newWaiter()
				master.OnDurable(r.CommitLogOffset+int64(r.Size), w)
				ws = append(ws, w)
			}
			for i, w := range ws {
				if err := w.wait(t); err != nil {
					t.Fatalf("waiter %d: %v", i, err)
				}
			}

			// A stalled slave: connected, silent. Timeout.
			px.pause(true)
			r, d = putOne(t, master, "stalled", false)
			if r.Status != store.StatusFlushSlaveTimeout || d < 400*time.Millisecond {
				t.Fatalf("put to a stalled slave: status %d after %v", r.Status, d)
			}
			w := newWaiter()
			master.OnDurable(r.CommitLogOffset+int64(r.Size), w)
			if err := w.wait(t); !errors.Is(err, store.ErrReplicaTimeout) {
				t.Fatalf("OnDurable with a stalled slave: %v", err)
			}
			if v, err := master.ReadMessage(r.CommitLogOffset); err != nil {
				t.Fatalf("the timed-out message is not in the master's log: %v", err)
			} else {
				v.Release()
			}
			px.pause(false)
			wait.Until(t, "the slave to catch up", func() bool {
				return replica.WrittenOffset() == master.WrittenOffset()
			})
			r, _ = putOne(t, master, "again", false)
			if r.Status != store.StatusOK {
				t.Fatalf("put after the stall: status %d", r.Status)
			}

			// The slave goes: not available again.
			s.Close()
			wait.Until(t, "the master to see the slave leave", func() bool { return len(master.Replicas()) == 0 })
			r, d = putOne(t, master, "gone", false)
			if r.Status != store.StatusSlaveNotAvailable {
				t.Fatalf("put after the slave left: status %d after %v", r.Status, d)
			}
		})
	}
}

// TestSyncReplicationGap: a connected slave further behind than
// MaxReplicaGap is not in sync; puts answer SLAVE_NOT_AVAILABLE at once until
// it catches up.
func TestSyncReplicationGap(t *testing.T) {
	o := syncMasterOptions(t.TempDir(), store.FlushAsync)
	o.MaxReplicaGap = 64 << 10
	master := openStore(t, o)
	defer master.Close()
	m, addr := startMaster(t, master, MasterOptions{})
	defer m.Close()
	replica := openStore(t, replicaOptions(t.TempDir()))
	defer replica.Close()
	px := newProxy(t, addr)
	s := startSlave(t, replica, px.addr(), SlaveOptions{})
	defer s.Close()
	wait.Until(t, "the slave to be in sync", func() bool { return len(master.Replicas()) == 1 })
	px.pause(true)
	for master.WrittenOffset() < 256<<10 {
		putOne(t, master, string(make([]byte, 4000)), true)
	}
	// At once: the gap is checked before waiting (a put that waited for the
	// stalled slave would end with FLUSH_SLAVE_TIMEOUT).
	r, d := putOne(t, master, "far ahead", false)
	if r.Status != store.StatusSlaveNotAvailable {
		t.Fatalf("put with the slave %d bytes behind: status %d after %v", master.WrittenOffset(), r.Status, d)
	}
	px.pause(false)
	wait.Until(t, "the slave to catch up", func() bool {
		rs := master.Replicas()
		return len(rs) == 1 && rs[0].InSync && rs[0].Acked == master.WrittenOffset()
	})
	if r, _ := putOne(t, master, "caught up", false); r.Status != store.StatusOK {
		t.Fatalf("put after catching up: status %d", r.Status)
	}
}
