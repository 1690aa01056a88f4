package index

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/crashfs"
	"github.com/apogeemq/apogee/internal/wait"
)

// Power loss (internal/vfs/crashfs). The index is not synced per Put:
// Flush makes durable what was put before it (the store writes its
// checkpoint after a Flush returned), and a file that fills is synced
// before the next one is created. So: every key put before a Flush that
// returned survives a power loss, whatever happened meanwhile (files
// filled and rolled, a Flush racing the Puts, a second power loss after
// recovery), and no query returns an offset that was never put.

type plPut struct {
	key string
	off int64
}

// plIndexer puts from one goroutine (the store's dispatcher) and flushes
// from another; after each Flush it publishes how many puts came before it.
type plIndexer struct {
	x *Index

	mu      sync.Mutex
	puts    []plPut
	durable int // puts[:durable] were put before a Flush that returned
	err     error

	stop chan struct{}
	wg   sync.WaitGroup
}

func plRun(x *Index, seed uint64, prior []plPut, durable int, from int64) *plIndexer {
	p := &plIndexer{x: x, puts: prior, durable: durable, stop: make(chan struct{})}
	p.wg.Add(2)
	go p.putLoop(rand.New(rand.NewPCG(seed, 1)), from)
	go p.flushLoop(rand.New(rand.NewPCG(seed, 2)))
	return p
}

func (p *plIndexer) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

func (p *plIndexer) putLoop(rng *rand.Rand, off int64) {
	defer p.wg.Done()
	for i := 0; ; i++ {
		select {
		case <-p.stop:
			return
		default:
		}
		off += int64(100 + rng.IntN(2000))
		// One key, sometimes two, per record (a message's KEYS).
		for k := 0; k <= rng.IntN(3)/2; k++ {
			key := fmt.Sprintf("key-%d-%d-%d", off, k, rng.Uint32())
			if err := p.x.Put("PowerLoss", key, off, time.Now().UnixMilli()); err != nil {
				p.fail(err)
				return
			}
			p.mu.Lock()
			p.puts = append(p.puts, plPut{key, off})
			p.mu.Unlock()
		}
	}
}

func (p *plIndexer) flushLoop(rng *rand.Rand) {
	defer p.wg.Done()
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		n := p.count()
		if err := p.x.Flush(); err != nil {
			p.fail(err)
			return
		}
		p.mu.Lock()
		p.durable = max(p.durable, n)
		p.mu.Unlock()
		target := p.count() + rng.IntN(60)
		_ = wait.Poll(time.Minute, func() error {
			select {
			case <-p.stop:
				return nil
			default:
			}
			if p.count() < target {
				return fmt.Errorf("waiting")
			}
			return nil
		})
	}
}

func (p *plIndexer) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.puts)
}

func (p *plIndexer) snapshot() ([]plPut, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.puts[:len(p.puts):len(p.puts)], p.durable
}

func (p *plIndexer) halt(t *testing.T) {
	t.Helper()
	close(p.stop)
	p.wg.Wait()
	if p.err != nil {
		t.Fatal(p.err)
	}
}

// plCheck opens the clone's index: no file repaired as damaged, every key
// put before a returned Flush found at its offset, no offset returned that
// was not put.
func plCheck(t *testing.T, what, dir string, o Options, puts []plPut, durable int) *Index {
	t.Helper()
	x, err := Open(dir, o)
	if err != nil {
		t.Fatalf("%s: open after the power loss: %v", what, err)
	}
	if r := x.Repaired(); len(r) > 0 {
		t.Fatalf("%s: index files repaired as damaged after a power loss: %v", what, r)
	}
	offs := make(map[int64]bool, len(puts))
	for _, p := range puts {
		offs[p.off] = true
	}
	for i, p := range puts {
		got, err := x.Query("PowerLoss", p.key, 0, 1<<62, 64, nil)
		if err != nil {
			t.Fatalf("%s: query %s: %v", what, p.key, err)
		}
		found := false
		for _, o := range got {
			found = found || o == p.off
			if !offs[o] {
				t.Fatalf("%s: query %s returned offset %d, which was never put", what, p.key, o)
			}
		}
		if i < durable && !found {
			t.Fatalf("%s: key %s (put %d of %d, before a flush) not found at %d: got %v", what, p.key, i, len(puts), p.off, got)
		}
	}
	return x
}

// Every key put before a Flush that returned survives a power loss taken at
// any moment, strict or torn: small and large slot tables (the slots in the
// header's page, or pages of their own), files filling and rolling, and a
// second power loss after recovery.
func TestPowerLossKeepsFlushedKeys(t *testing.T) {
	rounds := crashfs.Rounds(4)
	var clones int
	var lost int64
	for round := 0; round < rounds; round++ {
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, 0))
		dir := t.TempDir()
		fsys, err := crashfs.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		o := Options{SlotCount: []int{64, 3000}[rng.IntN(2)], MaxEntries: 150 + rng.IntN(200), FS: fsys}
		root := filepath.Join(dir, "index")
		x, err := Open(root, o)
		if err != nil {
			t.Fatal(err)
		}
		p := plRun(x, seed, nil, 0, 0)
		type clone struct {
			what    string
			dir     string
			puts    []plPut
			durable int
		}
		var taken []clone
		for c := 0; c < 5; c++ {
			target := p.count() + 1 + rng.IntN(300)
			wait.For(t, fmt.Sprintf("%d puts", target), func() error {
				if n := p.count(); n < target && p.err == nil {
					return fmt.Errorf("%d put", n)
				}
				return nil
			})
			mode := crashfs.Mode(rng.IntN(2))
			cs := rng.Uint64()
			cl := clone{what: fmt.Sprintf("round %d (seed %d, %d slots, %d entries a file) clone %d (%s, seed %d)", round, seed, o.SlotCount, o.MaxEntries, c, mode, cs), dir: filepath.Join(t.TempDir(), "clone")}
			_, cl.durable = p.snapshot()
			st, err := fsys.CrashClone(cl.dir, crashfs.CloneOptions{Mode: mode, Seed: cs})
			if err != nil {
				t.Fatal(err)
			}
			cl.puts, _ = p.snapshot()
			lost += st.LostBytes
			taken = append(taken, cl)
		}
		p.halt(t)
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		for i, c := range taken {
			clones++
			root := filepath.Join(c.dir, "index")
			if i%2 == 0 {
				o := o
				o.FS = vfs.Default
				plCheck(t, c.what, root, o, c.puts, c.durable).Close()
				continue
			}
			fs2, err := crashfs.New(c.dir)
			if err != nil {
				t.Fatal(err)
			}
			o2 := o
			o2.FS = fs2
			x2 := plCheck(t, c.what, root, o2, c.puts, c.durable)
			// Puts go on past everything put before (the store re-indexes
			// from its checkpoint; the index skips what it holds), after
			// the keys recovery kept.
			var from int64
			var kept []plPut
			for _, q := range c.puts {
				from = max(from, q.off)
				got, err := x2.Query("PowerLoss", q.key, 0, 1<<62, 64, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range got {
					if o == q.off {
						kept = append(kept, q)
						break
					}
				}
			}
			p2 := plRun(x2, rng.Uint64(), kept, len(kept), from)
			target := p2.count() + 1 + rng.IntN(200)
			wait.For(t, "puts after recovery", func() error {
				if n := p2.count(); n < target && p2.err == nil {
					return fmt.Errorf("%d put", n)
				}
				return nil
			})
			mode := crashfs.Mode(rng.IntN(2))
			what := fmt.Sprintf("%s, then again (%s)", c.what, mode)
			_, durable := p2.snapshot()
			dst := filepath.Join(t.TempDir(), "clone")
			st, err := fs2.CrashClone(dst, crashfs.CloneOptions{Mode: mode, Seed: rng.Uint64()})
			if err != nil {
				t.Fatal(err)
			}
			lost += st.LostBytes
			puts, _ := p2.snapshot()
			p2.halt(t)
			x2.Close()
			o3 := o
			o3.FS = vfs.Default
			plCheck(t, what, filepath.Join(dst, "index"), o3, puts, durable).Close()
		}
	}
	if lost == 0 {
		t.Fatalf("none of %d clones lost a byte: the power losses tested nothing", clones)
	}
	t.Logf("%d clones, %d unsynced bytes lost in them", clones, lost)
}
