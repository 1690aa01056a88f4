package controller

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/crashfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
)

// newSnapRaft starts a one-node Raft group on the controller's state
// machine with its snapshots in a snapshotStore on fsys (the log and
// Raft's metadata in memory: raft.db is bbolt's, outside the seam).
func newSnapRaft(t *testing.T, fsys vfs.FS, dir string) (*raft.Raft, *fsm) {
	t.Helper()
	snaps, err := newSnapshotStore(fsys, dir, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	conf := raft.DefaultConfig()
	conf.LocalID = "a"
	conf.Logger = hclog.NewNullLogger()
	conf.HeartbeatTimeout, conf.ElectionTimeout = 50*time.Millisecond, 50*time.Millisecond
	conf.LeaderLeaseTimeout, conf.CommitTimeout = 50*time.Millisecond, 5*time.Millisecond
	conf.SnapshotThreshold, conf.SnapshotInterval, conf.TrailingLogs = 1<<40, time.Hour, 2
	store := raft.NewInmemStore()
	_, trans := raft.NewInmemTransport("a")
	f := newFSM()
	r, err := raft.NewRaft(conf, f, store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Shutdown().Error() })
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: "a", Address: trans.LocalAddr()}}}).Error(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.State() != raft.Leader {
		if time.Now().After(deadline) {
			t.Fatal("the one-node group elected no leader in 30 s")
		}
		time.Sleep(time.Millisecond)
	}
	return r, f
}

// The controller's Raft snapshots under power loss: while the state
// changes (an entry that sets node "n" to 1, 2, ...) and Raft takes a
// snapshot after each change (compacting its log behind it), a crash clone
// taken at any moment holds a snapshot at least as new as the last one
// whose creation returned before the clone, whole (its CRC checks), and
// restoring it gives the state at its index.
func TestSnapshotsPowerLoss(t *testing.T) {
	root := t.TempDir()
	fsys, err := crashfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	r, _ := newSnapRaft(t, fsys, filepath.Join(root, "ctl"))

	var mu sync.Mutex
	valueAt := map[uint64]int{} // log index of each change → the value it set
	var returned atomic.Uint64  // index of the last snapshot whose creation returned
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := 1; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			b, _ := json.Marshal(command{Op: opAnnounce, Node: "n", Addr: strconv.Itoa(i)})
			af := r.Apply(b, 10*time.Second)
			if err := af.Error(); err != nil {
				done <- err
				return
			}
			mu.Lock()
			valueAt[af.Index()] = i
			mu.Unlock()
			sf := r.Snapshot()
			if err := sf.Error(); err != nil {
				done <- fmt.Errorf("snapshot: %w", err)
				return
			}
			meta, rc, err := sf.Open()
			if err != nil {
				done <- err
				return
			}
			rc.Close()
			returned.Store(meta.Index)
		}
	}()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Errorf("writer: %v", err)
		}
	}()

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	lost := 0
	for i := range 30 {
		time.Sleep(time.Duration(rng.IntN(5000)) * time.Microsecond)
		o := crashfs.CloneOptions{Mode: crashfs.Mode(i % 2), Seed: rng.Uint64()}
		lo := returned.Load()
		clone := filepath.Join(t.TempDir(), "clone")
		st, err := fsys.CrashClone(clone, o)
		if err != nil {
			t.Fatal(err)
		}
		if st.UnsyncedEntries+int(st.UnsyncedBytes) > 0 {
			lost++
		}
		where := fmt.Sprintf("test seed %d, clone %d (%s, seed %d; %v)", seed, i, o.Mode, o.Seed, st)
		s, err := newSnapshotStore(vfs.Default, filepath.Join(clone, "ctl"), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		metas, err := s.List()
		if err != nil {
			t.Fatalf("%s: list: %v", where, err)
		}
		if lo > 0 && (len(metas) == 0 || metas[0].Index < lo) {
			t.Fatalf("%s: snapshots %v, want one at index %d or later (its creation returned before the crash)", where, metaIndexes(metas), lo)
		}
		for _, m := range metas {
			_, rc, err := s.Open(m.ID)
			if err != nil {
				t.Fatalf("%s: snapshot %s does not open: %v", where, m.ID, err)
			}
			f := newFSM()
			if err := f.Restore(rc); err != nil {
				t.Fatalf("%s: snapshot %s does not restore: %v", where, m.ID, err)
			}
			mu.Lock()
			want, at := 0, uint64(0)
			for idx, v := range valueAt {
				if idx <= m.Index && idx >= at {
					want, at = v, idx
				}
			}
			mu.Unlock()
			if got := f.nodeAddr("n"); got != strconv.Itoa(want) {
				t.Fatalf("%s: snapshot %s (index %d) restores n = %q, want %d (set at index %d)", where, m.ID, m.Index, got, want, at)
			}
		}
	}
	if lost == 0 {
		t.Fatalf("test seed %d: no clone had anything unsynced to lose: the test did not crash a snapshot", seed)
	}
}

func metaIndexes(ms []*raft.SnapshotMeta) []uint64 {
	out := make([]uint64, len(ms))
	for i, m := range ms {
		out[i] = m.Index
	}
	return out
}

// Every file operation of writing, listing and opening snapshots failed in
// turn: a failed operation returns the injected error; a snapshot whose
// Close returned nil is listed and opens whole after the faults (the store
// reopened without them), and nothing listed is torn.
func TestSnapshotsFaults(t *testing.T) {
	quiet := slog.New(slog.DiscardHandler)
	state := func(index uint64) []byte { return []byte(fmt.Sprintf(`{"index":%d,"pad":"%0200d"}`, index, index)) }
	errorfs.Walk(t, vfs.Default, []errorfs.Mode{errorfs.Once, errorfs.Stop}, func(t *testing.T, fsys *errorfs.FS, root string) {
		check := func(what string, err error) bool {
			if err != nil && !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("%s: %v, not the injected failure", what, err)
			}
			return err == nil
		}
		dir := filepath.Join(root, "ctl")
		s, err := newSnapshotStore(fsys, dir, quiet)
		if !check("open", err) {
			return
		}
		var durable uint64 // index of the last snapshot whose Close returned nil
		for index := uint64(10); index <= 40; index += 10 {
			k, err := s.Create(1, index, 1, raft.Configuration{}, 1, nil)
			if !check("create", err) {
				continue
			}
			if _, err := k.Write(state(index)); err != nil {
				t.Fatalf("write (buffered): %v", err)
			}
			if check("close", k.Close()) {
				durable = index
			}
		}
		if metas, err := s.List(); check("list", err) && len(metas) > 0 {
			if _, rc, err := s.Open(metas[0].ID); check("open snapshot", err) {
				_, err := io.ReadAll(rc)
				check("read snapshot", err)
				rc.Close()
			}
		}

		s, err = newSnapshotStore(vfs.Default, dir, quiet)
		if err != nil {
			t.Fatalf("after the faults the store does not open: %v", err)
		}
		metas, err := s.List()
		if err != nil {
			t.Fatal(err)
		}
		if durable > 0 && (len(metas) == 0 || metas[0].Index < durable) {
			t.Fatalf("snapshots %v, want the one at %d (its Close returned nil)", metaIndexes(metas), durable)
		}
		for _, m := range metas {
			_, rc, err := s.Open(m.ID)
			if err != nil {
				t.Fatalf("snapshot %s listed but does not open: %v", m.ID, err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || string(b) != string(state(m.Index)) {
				t.Fatalf("snapshot %s: %q %v, want %q", m.ID, b, err, state(m.Index))
			}
		}
		ents, _ := os.ReadDir(filepath.Join(dir, snapDirName))
		for _, e := range ents {
			if filepath.Ext(e.Name()) == snapTmpSuffix {
				t.Fatalf("an unfinished snapshot %s outlived the reopen", e.Name())
			}
		}
	})
}

// A controller node's own files go through Options.FS: its data
// directory, snapshots/ and the snapshots (raft.db does not: bbolt's I/O
// is its own). A snapshot the node took survives a power loss right after.
func TestNodeSnapshotsThroughFS(t *testing.T) {
	root := t.TempDir()
	fsys, err := crashfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := New(Options{ID: "a", Peers: []Peer{{ID: "a", Addr: ln.Addr().String()}}, RaftListener: ln,
		DataDir: filepath.Join(root, "ctl"), Advertise: "127.0.0.1:1", FS: fsys, Logger: slog.New(slog.DiscardHandler),
		RaftLogOutput: io.Discard, Raft: RaftTiming{HeartbeatTimeout: 100 * time.Millisecond, ElectionTimeout: 100 * time.Millisecond,
			LeaderLeaseTimeout: 50 * time.Millisecond, CommitTimeout: 5 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	deadline := time.Now().Add(30 * time.Second)
	for !n.leading.Load() { // leading: its announcement applied
		if time.Now().After(deadline) {
			t.Fatal("the node did not lead within 30 s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := n.Snapshot(); err != nil {
		t.Fatal(err)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	if _, err := fsys.CrashClone(clone, crashfs.CloneOptions{Mode: crashfs.Strict}); err != nil {
		t.Fatal(err)
	}
	s, err := newSnapshotStore(vfs.Default, filepath.Join(clone, "ctl"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	metas, err := s.List()
	if err != nil || len(metas) != 1 {
		t.Fatalf("snapshots in the clone: %v %v, want the one the node took", metaIndexes(metas), err)
	}
	_, rc, err := s.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	f := newFSM()
	if err := f.Restore(rc); err != nil {
		t.Fatal(err)
	}
	if got := f.nodeAddr("a"); got != "127.0.0.1:1" {
		t.Fatalf("the snapshot's state names node a at %q, want its announcement 127.0.0.1:1", got)
	}
}
