package litequeue

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// TestConcurrentReadersWriterDeleter runs the dispatcher's appends against
// readers that check every entry they see, a deleter and expirer of another
// parent's lite topics, offset commits and flushes (run it with -race).
func TestConcurrentReadersWriterDeleter(t *testing.T) {
	x, _ := openT(t, t.TempDir())
	defer x.Close()
	const lites = 40
	const perLite = 120
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
		stop.Store(true)
	}
	// The writer: P's lite topics get entries whose tag code names their
	// lite topic and offset; Q's are created and deleted meanwhile.
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer stop.Store(true)
		var cl int64
		for k := 0; k < perLite && !stop.Load(); k++ {
			for l := range lites {
				cl += 100
				e := Entry{CommitLogOffset: cl, Size: 50, TagCode: int64(l)*1_000_000 + int64(k)}
				if _, err := x.Append([]byte("P"), fmt.Appendf(nil, "L%d", l), e, cl); err != nil {
					fail(err)
					return
				}
				cl += 100
				if _, err := x.Append([]byte("Q"), fmt.Appendf(nil, "q%d", (k*lites+l)%97), Entry{CommitLogOffset: cl, Size: 50}, cl); err != nil {
					fail(err)
					return
				}
			}
		}
	}()
	for r := range 3 {
		wg.Add(1)
		go func(r int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			buf := make([]Entry, 0, 50)
			for !stop.Load() {
				l := rng.IntN(lites)
				_, max, ok := x.Offsets("P", fmt.Sprintf("L%d", l))
				if !ok || max == 0 {
					continue
				}
				from := rng.Int64N(max)
				got, _, _, _, err := x.Read("P", fmt.Sprintf("L%d", l), from, buf[:0])
				if err != nil {
					fail(err)
					return
				}
				for i, e := range got {
					if want := int64(l)*1_000_000 + from + int64(i); e.TagCode != want {
						fail(fmt.Errorf("L%d offset %d: tag %d, want %d", l, from+int64(i), e.TagCode, want))
						return
					}
				}
				x.Read("Q", fmt.Sprintf("q%d", rng.IntN(97)), 0, buf[:0])
			}
		}(r)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(9, 9))
		for !stop.Load() {
			switch rng.IntN(5) {
			case 0:
				x.Delete("Q", fmt.Sprintf("q%d", rng.IntN(97)))
			case 1:
				x.Expire("Q", rng.Int64N(1_000_000), nil)
			case 2:
				x.ForEach("", func(string, LiteInfo) bool { return true })
			case 3:
				x.CommitOffset("g", "P", fmt.Sprintf("L%d", rng.IntN(lites)), rng.Int64N(100))
			case 4:
				if err := x.Flush(); err != nil {
					fail(err)
					return
				}
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for l := range lites {
		if _, max, _ := x.Offsets("P", fmt.Sprintf("L%d", l)); max != perLite {
			t.Fatalf("L%d: max %d", l, max)
		}
	}
}

// TestConcurrentFlushesAndCommits runs flushes (with journal rewrites, the
// slack made small) against offset commits and appends; after a last
// Flush and a crash, every offset is the last one committed.
func TestConcurrentFlushesAndCommits(t *testing.T) {
	old := journalSlack
	journalSlack = 2 << 10
	defer func() { journalSlack = old }()
	dir := t.TempDir()
	x, _ := openT(t, dir)
	var wg sync.WaitGroup
	var stop atomic.Bool
	last := make([][]int64, 2)
	for g := range 2 {
		last[g] = make([]int64, 20)
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 1; i <= 400; i++ {
				l := i % 20
				if err := x.CommitOffset(fmt.Sprint("g", g), "P", fmt.Sprint("L", l), int64(i)); err != nil {
					t.Error(err)
					return
				}
				last[g][l] = int64(i)
			}
		}(g)
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if err := x.Flush(); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	var cl int64
	for i := range 300 {
		cl += 100
		if _, err := x.Append([]byte("P"), fmt.Appendf(nil, "L%d", i%20), Entry{CommitLogOffset: cl, Size: 10}, cl); err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if err := x.Flush(); err != nil {
		t.Fatal(err)
	}
	crash(t, x)
	x, _ = openT(t, dir)
	defer x.Close()
	for g := range 2 {
		for l := range 20 {
			if off, ok := x.Offset(fmt.Sprint("g", g), "P", fmt.Sprint("L", l)); !ok || off != last[g][l] {
				t.Fatalf("g%d L%d: %d %v, want %d", g, l, off, ok, last[g][l])
			}
		}
	}
	if x.Count() != 20 {
		t.Fatalf("count %d", x.Count())
	}
}
