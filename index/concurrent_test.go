package index

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
)

// TestConcurrentPutQuery runs one writer (rolling small files) against
// readers. A reader notes how many puts had completed before its query: all
// of those must be in the result, and nothing that was not put.
func TestConcurrentPutQuery(t *testing.T) {
	o := Options{SlotCount: 8, MaxEntries: 64}
	x := openT(t, t.TempDir(), o)
	const nkeys, nputs = 20, 6000
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	var done atomic.Int64 // puts completed: put i has offset i*10, key i%nkeys
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			var buf []int64
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := rng.IntN(nkeys)
				d := done.Load()
				var err error
				buf, err = x.Query("T", keys[k], 0, ts0*2, 1<<30, buf[:0])
				if err != nil {
					t.Error(err)
					return
				}
				got := map[int64]bool{}
				for _, off := range buf {
					if off%10 != 0 || int(off/10)%nkeys != k || off/10 >= nputs {
						t.Errorf("key %d: offset %d was never put for it", k, off)
						return
					}
					got[off] = true
				}
				for i := int64(k); i < d; i += nkeys {
					if !got[i*10] {
						t.Errorf("key %d: put %d completed before the query but is missing", k, i)
						return
					}
				}
			}
		})
	}
	wg.Go(func() { // a periodic flusher, as the store has
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			if err := x.Flush(); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for i := range nputs {
		if err := x.Put("T", keys[i%nkeys], int64(i)*10, ts0+int64(i)); err != nil {
			t.Fatal(err)
		}
		done.Store(int64(i + 1))
	}
	close(stop)
	wg.Wait()
}

// TestDeleteWhileQuerying deletes old files (DeleteBefore) and cuts the tail
// (TruncateAfter) under running queries: queries never fail, never return
// an offset that was not put for the key, and see every offset that is
// still indexed.
func TestDeleteWhileQuerying(t *testing.T) {
	o := Options{SlotCount: 4, MaxEntries: 32}
	x := openT(t, t.TempDir(), o)
	const nkeys = 7
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var queries atomic.Int64
	for r := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(r), 2))
			var buf []int64
			for {
				select {
				case <-stop:
					return
				default:
				}
				k := rng.IntN(nkeys)
				var err error
				buf, err = x.Query("T", keys[k], 0, ts0*2, 1<<30, buf[:0])
				if err != nil {
					t.Error(err)
					return
				}
				for i, off := range buf {
					if off%10 != 0 || int(off/10)%nkeys != k {
						t.Errorf("key %d: offset %d was never put for it", k, off)
						return
					}
					if i > 0 && off >= buf[i-1] {
						t.Errorf("key %d: not newest first: %v", k, buf)
						return
					}
				}
				queries.Add(1)
			}
		})
	}
	next := int64(0) // next put number; put i has offset i*10
	put := func(n int) {
		for range n {
			if err := x.Put("T", keys[next%nkeys], next*10, ts0+next); err != nil {
				t.Fatal(err)
			}
			next++
		}
	}
	for round := range 60 {
		put(200)
		if _, err := x.DeleteBefore((next - 300) * 10); err != nil {
			t.Fatal(err)
		}
		if round%5 == 4 { // the log lost its last 50 records
			from, err := x.TruncateAfter((next - 50) * 10)
			if err != nil {
				t.Fatal(err)
			}
			next = from / 10
			put(50)
		}
	}
	close(stop)
	wg.Wait()
	if queries.Load() == 0 {
		t.Fatal("no query ran")
	}
	// Everything from the oldest kept file on is indexed exactly once.
	files := *x.files.Load()
	first := files[0].beginPhy.Load() / 10
	for k := range nkeys {
		got, _ := x.Query("T", keys[k], 0, ts0*2, 1<<30, nil)
		var want []int64
		for i := next - 1; i >= first; i-- {
			if int(i)%nkeys == k {
				want = append(want, i*10)
			}
		}
		if len(got) != len(want) {
			t.Fatalf("key %d: %d offsets, want %d", k, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("key %d: got %v, want %v", k, got, want)
			}
		}
	}
}

// TestCrashCopyWhileWriting copies the directory while a writer is putting,
// which is what a process crash leaves on disk at an arbitrary moment (a
// copy reads the header first and the entries last, so it mixes moments).
// Every copy must open, return only offsets that were put for the key, and
// after TruncateAfter and a re-dispatch from resumeFrom, be exact.
func TestCrashCopyWhileWriting(t *testing.T) {
	o := Options{SlotCount: 16, MaxEntries: 500}
	src := t.TempDir()
	x := openT(t, src, o)
	const nkeys, nputs = 50, 6000
	keys := make([]string, nkeys)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%d", i)
	}
	// The writer stops at every eighth of its puts until a copy has begun,
	// then goes on putting while the copy reads the files: the copies are
	// taken under a running writer, and there are always seven of them.
	var copies []string
	var wg sync.WaitGroup
	mark := make(chan struct{})
	wg.Go(func() {
		defer close(mark)
		for i := range nputs {
			if i > 0 && i%(nputs/8) == 0 {
				mark <- struct{}{}
			}
			if err := x.Put("T", keys[i%nkeys], int64(i)*10, ts0+int64(i)*100); err != nil {
				t.Error(err)
				return
			}
		}
	})
	for range mark {
		copies = append(copies, copyDir(t, src))
	}
	wg.Wait()
	if len(copies) < 3 {
		t.Fatalf("only %d copies taken", len(copies))
	}
	for _, dir := range copies {
		y := openT(t, dir, o)
		check := func(exact bool, upTo int64) {
			for k := range nkeys {
				got, err := y.Query("T", keys[k], 0, ts0*2, 1<<30, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, off := range got {
					if off%10 != 0 || int(off/10)%nkeys != k || off/10 >= nputs {
						t.Fatalf("key %d: offset %d was never put for it", k, off)
					}
				}
				if exact {
					want := 0
					for i := k; int64(i) < upTo; i += nkeys {
						want++
					}
					if len(got) != want {
						t.Fatalf("key %d: %d offsets after re-dispatch, want %d", k, len(got), want)
					}
				}
			}
		}
		check(false, 0)
		// The copy's commit log "ends" after everything the writer put.
		from, err := y.TruncateAfter(nputs * 10)
		if err != nil {
			t.Fatal(err)
		}
		for i := from / 10; i < nputs; i++ {
			if err := y.Put("T", keys[i%nkeys], i*10, ts0+i*100); err != nil {
				t.Fatal(err)
			}
		}
		check(true, nputs)
	}
}

// TestCloseWhileQuerying closes the index under running queries: they
// finish on the mappings they hold or return ErrClosed.
func TestCloseWhileQuerying(t *testing.T) {
	x := openT(t, t.TempDir(), Options{SlotCount: 4, MaxEntries: 64})
	for i := range 1000 {
		if err := x.Put("T", "k", int64(i), ts0+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	var closed atomic.Bool
	var queried atomic.Int64
	for range 3 {
		wg.Go(func() {
			var buf []int64
			for {
				var err error
				buf, err = x.Query("T", "k", 0, ts0*2, 1<<30, buf[:0])
				if err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Error(err)
					}
					return
				}
				if !closed.Load() && len(buf) != 1000 {
					t.Errorf("%d results before Close", len(buf))
					return
				}
				queried.Add(1)
			}
		})
	}
	// Close comes while the queries run.
	wait.For(t, "queries under way", func() error {
		if n := queried.Load(); n < 9 {
			return fmt.Errorf("%d queries done", n)
		}
		return nil
	})
	closed.Store(true)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
}
