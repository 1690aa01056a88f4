package store

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/vfs/crashfs"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
)

// TestLitePowerLossKeepsAcknowledged puts lite messages (sync flush: a Put
// returns once its record is synced) from two goroutines to 300 lite
// topics of a parent, with the lite-topic index's and the checkpoint's
// flushes on their own clocks, and cuts the power (crashfs clones, strict
// and torn) at random moments. Each clone, opened, holds every lite
// message acknowledged before it, in its lite topic, each once, the lite
// topics dense.
func TestLitePowerLossKeepsAcknowledged(t *testing.T) {
	for round := range crashfs.Rounds(3) {
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, 1))
		dir := t.TempDir()
		fsys, err := crashfs.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		o := Options{Dir: filepath.Join(dir, "store"), SegmentSize: 128 << 10, FlushMode: FlushSync, FS: fsys,
			ConsumeQueueEntries: 64, IndexSlots: 64, IndexMaxEntries: 256, MaxMessageSize: 8 << 10,
			SyncFlushTimeout: time.Minute, CleanInterval: -1, ScrubRate: -1,
			FlushInterval:      time.Duration(1+rng.IntN(5)) * time.Millisecond,
			CheckpointInterval: time.Duration(2+rng.IntN(20)) * time.Millisecond,
			LiteFileSize:       16 << 10, // 32 blocks: many files
			Logger:             testlog.New(t, "store")}
		s, _, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		acked := map[string][]string{}
		total := 0
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for g := range 2 {
			wg.Add(1)
			go func(g int) {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(g)+2))
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					lite := fmt.Sprintf("s%d", r.IntN(300))
					body := fmt.Sprintf("%d-%d", g, i)
					res, err := s.Put(&Message{Topic: "P", QueueID: int32(r.IntN(4)), BornHost: born, Body: []byte(body),
						Properties: props(message.PropertyLiteTopic, lite)})
					if err != nil || res.Status != StatusOK {
						t.Errorf("put: %v %v", err, res.Status)
						return
					}
					mu.Lock()
					acked[lite] = append(acked[lite], body)
					total++
					mu.Unlock()
				}
			}(g)
		}
		type clone struct {
			dir   string
			acked map[string][]string
			what  string
		}
		var clones []clone
		for c := range 3 {
			mu.Lock()
			want := total + 50 + rng.IntN(300)
			mu.Unlock()
			wait.For(t, fmt.Sprintf("%d lite messages acknowledged", want), func() error {
				mu.Lock()
				defer mu.Unlock()
				if total < want && !t.Failed() {
					return fmt.Errorf("%d acknowledged", total)
				}
				return nil
			})
			mu.Lock()
			snap := map[string][]string{}
			for k, v := range acked {
				snap[k] = append([]string(nil), v...)
			}
			mu.Unlock()
			mode := crashfs.Mode(rng.IntN(2))
			cs := rng.Uint64()
			cd := filepath.Join(t.TempDir(), "clone")
			if _, err := fsys.CrashClone(cd, crashfs.CloneOptions{Mode: mode, Seed: cs}); err != nil {
				t.Fatal(err)
			}
			clones = append(clones, clone{cd, snap, fmt.Sprintf("round %d (seed %d) clone %d (%v, seed %d)", round, seed, c, mode, cs)})
		}
		close(stop)
		wg.Wait()
		s.Close()
		for _, c := range clones {
			co := o
			co.Dir, co.FS = filepath.Join(c.dir, "store"), nil
			s2, _, err := Open(co)
			if err != nil {
				t.Fatalf("%s: open: %v", c.what, err)
			}
			for lite, bodies := range c.acked {
				got := readLiteChecked(t, s2, "P", lite, 0)
				seen := map[string]bool{}
				for _, b := range got {
					if seen[b] {
						t.Fatalf("%s: %s holds %s twice", c.what, lite, b)
					}
					seen[b] = true
				}
				for _, b := range bodies {
					if !seen[b] {
						t.Fatalf("%s: %s lost acknowledged %s (%d held, %d acknowledged)", c.what, lite, b, len(got), len(bodies))
					}
				}
			}
			s2.Close()
		}
	}
}
