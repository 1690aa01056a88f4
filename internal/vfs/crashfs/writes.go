package crashfs

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// Clone is one crash clone taken by CloneDuringWrites, and what the
// numbered writes had done when it was taken.
type Clone struct {
	// Dir is the clone: the FS's root as the power loss left it.
	Dir string
	// Lo is the number of the last write that had returned before the
	// clone was taken (0: none); Hi that of the last one begun before the
	// clone was done. A file written by each write must hold the version
	// of one of Lo..Hi: the last answered, or one in flight.
	Lo, Hi int64
	// Where names the clone for a failure: the test's seed, the clone's
	// mode and seed, and what it lost, so the run can be repeated.
	Where string
}

// CloneDuringWrites is the power-loss test of a file rewritten in place of
// itself (a state file, a checkpoint): it runs write(1), write(2), ... on a
// goroutine of its own, each as soon as the one before returned, and
// meanwhile takes n crash clones of fsys at random moments (a pause of up
// to 3 ms before each, from a seed it logs with every failure; Strict and
// Torn in turn), handing each to check on the test's goroutine. It fails
// the test if a write fails, and if no clone had anything unsynced to
// lose: a test whose clones never caught a write in flight proves nothing.
func CloneDuringWrites(t testing.TB, fsys *FS, n int, write func(i int64) error, check func(c Clone)) {
	t.Helper()
	var began, returned atomic.Int64
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for i := int64(1); ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			began.Store(i)
			if err := write(i); err != nil {
				done <- fmt.Errorf("write %d: %w", i, err)
				return
			}
			returned.Store(i)
		}
	}()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 1))
	lost := 0
	for i := range n {
		// Not synchronisation: a random moment to crash at.
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
		o := CloneOptions{Mode: Mode(i % 2), Seed: rng.Uint64()}
		lo := returned.Load()
		dir := filepath.Join(t.TempDir(), "clone")
		st, err := fsys.CrashClone(dir, o)
		if err != nil {
			t.Fatal(err)
		}
		hi := began.Load()
		if st.UnsyncedEntries+int(st.UnsyncedBytes) > 0 {
			lost++
		}
		check(Clone{Dir: dir, Lo: lo, Hi: hi,
			Where: fmt.Sprintf("test seed %d, clone %d (%s, seed %d; %v)", seed, i, o.Mode, o.Seed, st)})
		if t.Failed() {
			return
		}
	}
	if lost == 0 {
		t.Fatalf("test seed %d: no clone had anything unsynced to lose: the test did not crash a write", seed)
	}
}

// Rounds is how many rounds (crashes) a power-loss test runs: def, or the
// environment's APOGEE_POWERLOSS_ROUNDS for a longer run by hand.
func Rounds(def int) int {
	if n, err := strconv.Atoi(os.Getenv("APOGEE_POWERLOSS_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return def
}
