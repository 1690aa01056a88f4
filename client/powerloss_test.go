package client

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/crashfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
)

var plQueues = []MessageQueue{
	{Topic: "T", BrokerName: "b", QueueID: 0}, {Topic: "T", BrokerName: "b", QueueID: 1},
	{Topic: "U", BrokerName: "b", QueueID: 0}, {Topic: "U", BrokerName: "c", QueueID: 3},
}

// loadedOffsets opens the offset file under dir and returns every queue's
// stored offset (-1: none), as a new consumer reads them.
func loadedOffsets(t *testing.T, fsys vfs.FS, dir string) ([]int64, error) {
	t.Helper()
	l, err := newLocalOffsets(fsys, dir, "client@1", "group")
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(plQueues))
	for i, mq := range plQueues {
		if out[i], err = l.read(context.Background(), mq); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// A broadcasting consumer's offset file under power loss: while the
// consumer commits (every queue to k, for k = 1, 2, ... as fast as it
// can), a crash clone taken at any moment holds the table of the last
// commit that returned before it or of one in flight, whole: never an
// empty or torn file, never a missing one once a commit returned (its
// directories, created by the first commit, included).
func TestOffsetFilePowerLoss(t *testing.T) {
	root := t.TempDir()
	fsys, err := crashfs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "offsets")
	l, err := newLocalOffsets(fsys, dir, "client@1", "group")
	if err != nil {
		t.Fatal(err)
	}
	// Commit k sets every queue to k.
	crashfs.CloneDuringWrites(t, fsys, 40, func(k int64) error {
		for _, mq := range plQueues {
			l.update(mq, k, false)
		}
		return l.persist(context.Background(), plQueues, nil)
	}, func(c crashfs.Clone) {
		got, err := loadedOffsets(t, vfs.Default, filepath.Join(c.Dir, "offsets"))
		if err != nil {
			t.Fatalf("%s: the offset file does not load: %v", c.Where, err)
		}
		k := got[0]
		if k == -1 && c.Lo == 0 {
			k = 0 // no commit returned yet: none is fine
		}
		for i, o := range got {
			if o != got[0] || k < c.Lo || k > c.Hi {
				t.Fatalf("%s: queue %v holds %d (all: %v), want one commit's k for every queue, in [%d, %d] (the last commit returned, the last begun)",
					c.Where, plQueues[i], o, got, c.Lo, c.Hi)
			}
		}
	})
}

// Every file operation of committing and loading the offset file failed
// in turn: the commit reports the injected error, a commit that returned
// nil is on disk, and the file on disk is always one commit's table whole.
func TestOffsetFileFaults(t *testing.T) {
	errorfs.Walk(t, vfs.Default, []errorfs.Mode{errorfs.Once, errorfs.Stop}, func(t *testing.T, fsys *errorfs.FS, root string) {
		dir := filepath.Join(root, "offsets")
		check := func(what string, err error) bool {
			if err != nil && !errors.Is(err, errorfs.ErrInjected) {
				t.Fatalf("%s: %v, not the injected failure", what, err)
			}
			return err == nil
		}
		l, err := newLocalOffsets(fsys, dir, "client@1", "group")
		if !check("open", err) {
			return
		}
		var ok []int64 // the k of each commit that returned nil
		for k := int64(1); k <= 3; k++ {
			for _, mq := range plQueues {
				l.update(mq, k, false)
			}
			if check(fmt.Sprintf("commit %d", k), l.persist(context.Background(), plQueues, nil)) {
				ok = append(ok, k)
			}
		}
		_, err = loadedOffsets(t, fsys, dir)
		check("reload", err)
		got, err := loadedOffsets(t, vfs.Default, dir)
		if err != nil {
			t.Fatalf("after the faults the offset file does not load: %v", err)
		}
		for _, o := range got {
			if o != got[0] {
				t.Fatalf("offsets %v: not one commit's table", got)
			}
		}
		// A failed commit may have replaced the file before it failed (a
		// failed directory fsync): the last attempt (3) is possible too.
		if len(ok) > 0 && got[0] < ok[len(ok)-1] {
			t.Fatalf("offsets %v, but commit %d returned nil", got, ok[len(ok)-1])
		}
	})
}
