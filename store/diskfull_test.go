package store

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
	"github.com/apogeemq/apogee/internal/wait"
	"golang.org/x/sys/unix"
)

// TestDispatchStallsOnAFullDiskAndResumes fills the disk for the consume
// queues (through the file-system seam): a message to a new queue is
// accepted by the commit log (its segment was reserved up front) but cannot
// get a consume-queue block: dispatch stalls before it, Put does not wait
// for the stalled dispatcher, and once space returns the message becomes
// visible with nothing lost.
func TestDispatchStallsOnAFullDiskAndResumes(t *testing.T) {
	fsys := errorfs.New(vfs.Default)
	var full atomic.Bool
	fsys.FailWhen(func(op errorfs.Op, path string) unix.Errno {
		if full.Load() && op == errorfs.OpAllocate && strings.Contains(path, string(filepath.Separator)+"consumequeue"+string(filepath.Separator)) {
			return unix.ENOSPC
		}
		return 0
	})
	o := testOptions(t.TempDir())
	o.FS = fsys
	o.SegmentSize = 256 << 10
	o.MaxMessageSize = 4 << 10
	o.MaxDispatchLag = 4 << 10 // a stalled dispatcher must not hold Put back
	s := openStore(t, o)
	defer s.Close()
	if _, err := s.Put(msg("T", 0, "before")); err != nil {
		t.Fatal(err)
	}
	waitVisible(t, s, "T", 0, 1)
	full.Store(true)

	const n = 20 // ~20 KiB: more than MaxDispatchLag
	for i := 0; i < n; i++ {
		if _, err := s.Put(msg("T", 1, string(make([]byte, 1000)))); err != nil {
			t.Fatalf("put %d on a full disk: %v (the commit log's segment was reserved)", i, err)
		}
	}
	wait.For(t, "dispatch to stall on the full disk", func() error {
		if st := s.Stats(); st.DispatchStalls == 0 {
			return fmt.Errorf("no stall; lag %d, T/1 max %d", st.DispatchLag, s.MaxOffset("T", 1))
		}
		return nil
	})
	if got := s.MaxOffset("T", 1); got != 0 {
		t.Fatalf("T/1 shows %d messages without a consume-queue block", got)
	}
	// Stalled now, and further behind than MaxDispatchLag: Puts go on without
	// waiting (a Put that waited before the stall was released by it).
	waits := s.Stats().LagWaits
	for i := 0; i < n; i++ {
		if _, err := s.Put(msg("T", 1, string(make([]byte, 1000)))); err != nil {
			t.Fatalf("put %d while dispatch is stalled: %v", i, err)
		}
	}
	if w := s.Stats().LagWaits; w != waits {
		t.Errorf("%d Puts waited for a dispatcher that could not progress", w-waits)
	}

	full.Store(false)
	waitVisible(t, s, "T", 1, 2*n)
	var r GetResult
	if err := s.Get("T", 1, 0, 2*n, 1<<20, nil, &r); err != nil {
		t.Fatal(err)
	}
	defer r.Release()
	if len(r.Messages) != 2*n {
		t.Fatalf("got %d messages after space returned, want %d", len(r.Messages), 2*n)
	}
	if lag := s.Stats().DispatchLag; lag != 0 {
		t.Errorf("dispatch lag %d after recovery", lag)
	}
}
