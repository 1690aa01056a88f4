package store

import (
	"fmt"
	"testing"

	"github.com/apogeemq/apogee/internal/wait"
)

// A master whose replicas a SyncStateSet requires (controller mode)
// dispatches a message only once the replicas acknowledged it: consumers
// never read what a new master may lack. Without the requirement, or
// with need 0, dispatch goes to the written position.
func TestDispatchStopsAtConfirmOffset(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	s.SetInSyncReplicas(1, []string{"r1"})
	r := s.AddReplica("r1", 0)
	defer r.Remove()
	var end int64
	for i := range 3 {
		m := msg("TConfirm", 0, fmt.Sprintf("m%d", i))
		m.NoWait = true
		res, err := s.Put(m)
		if err != nil {
			t.Fatal(err)
		}
		end = res.CommitLogOffset + int64(res.Size)
	}
	s.dispatch.run() // what the dispatcher does on an append: nothing past the confirm offset
	if got := s.MaxOffset("TConfirm", 0); got != 0 {
		t.Fatalf("queue end %d before any acknowledgement, want 0", got)
	}
	if got := s.ConfirmOffset(); got != 0 {
		t.Fatalf("confirm offset %d before any acknowledgement", got)
	}
	// All but the last byte acknowledged: the last record waits.
	r.Ack(end - 1)
	wait.Equal(t, "the queue holding the acknowledged messages", int64(2), func() int64 { return s.MaxOffset("TConfirm", 0) })
	r.Ack(end)
	wait.Equal(t, "the queue holding all three", int64(3), func() int64 { return s.MaxOffset("TConfirm", 0) })

	// No replica required: visible at once.
	s.SetInSyncReplicas(0, []string{})
	m := msg("TConfirm", 0, "free")
	if _, err := s.Put(m); err != nil {
		t.Fatal(err)
	}
	wait.Equal(t, "a message visible without a replica requirement", int64(4), func() int64 { return s.MaxOffset("TConfirm", 0) })
}

// A replica promoted to master dispatches everything it holds (its log is
// the group's now), then stops at the confirm offset for new messages.
func TestPromotedStoreConfirmsWhatItHeld(t *testing.T) {
	master := openStore(t, testOptions(t.TempDir()))
	defer master.Close()
	ro := testOptions(t.TempDir())
	ro.Replica = true
	replica := openStore(t, ro)
	defer replica.Close()
	for i := range 5 {
		if _, err := master.Put(msg("TPromote", 0, fmt.Sprintf("m%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	copyLog(t, master, replica, 4096)
	replica.SetInSyncReplicas(1, []string{"r1"})
	if err := replica.SetReplica(false); err != nil {
		t.Fatal(err)
	}
	if got := replica.MaxOffset("TPromote", 0); got != 5 {
		t.Fatalf("promoted store's queue end %d, want 5", got)
	}
	m := msg("TPromote", 0, "new")
	m.NoWait = true
	if _, err := replica.Put(m); err != nil {
		t.Fatal(err)
	}
	replica.dispatch.run()
	if got := replica.MaxOffset("TPromote", 0); got != 5 {
		t.Fatalf("a new message unacknowledged is visible: queue end %d", got)
	}
	r := replica.AddReplica("r1", 0)
	defer r.Remove()
	r.Ack(replica.WrittenOffset())
	wait.Equal(t, "the new message visible once acknowledged", int64(6), func() int64 { return replica.MaxOffset("TPromote", 0) })
}
