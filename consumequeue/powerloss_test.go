package consumequeue

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/crashfs"
	"github.com/apogeemq/apogee/internal/wait"
)

// Power loss (internal/vfs/crashfs). Consume queues are not synced per
// append: Flush makes durable what was appended before it, and the store
// writes its checkpoint (the dispatched offset it resumes from after a
// crash) only after a Flush returned. So the promise to test is Flush's:
// every entry appended before a Flush that returned survives a power loss,
// exactly, whatever happened meanwhile (files rolled, new topic and queue
// directories, files unmapped by Sweep and synced by fdatasync instead, a
// power loss again after recovery).

type plKey struct {
	topic string
	id    int32
}

// plQueues appends from one goroutine (as the store's dispatcher does) to
// queues of topics that appear over time, and flushes from another,
// publishing after each Flush the max offsets that were in place before it
// started: those entries are durable.
type plQueues struct {
	s   *Set
	rng *rand.Rand

	mu       sync.Mutex
	appended map[plKey][]Entry // every entry, by queue offset
	durable  map[plKey]int64   // max offsets a returned Flush covered
	appends  int
	err      error

	stop chan struct{}
	wg   sync.WaitGroup
}

func plRun(s *Set, seed uint64, prior *plQueues) *plQueues {
	p := &plQueues{s: s, rng: rand.New(rand.NewPCG(seed, 1)), appended: map[plKey][]Entry{}, durable: map[plKey]int64{}, stop: make(chan struct{})}
	if prior != nil {
		for k, v := range prior.appended {
			p.appended[k] = v
		}
		for k, v := range prior.durable {
			p.durable[k] = v
		}
	}
	p.wg.Add(2)
	go p.appendLoop()
	go p.flushLoop(rand.New(rand.NewPCG(seed, 2)))
	return p
}

func (p *plQueues) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

func (p *plQueues) appendLoop() {
	defer p.wg.Done()
	var clOff int64
	for _, es := range p.appended {
		if len(es) > 0 {
			clOff = max(clOff, es[len(es)-1].End())
		}
	}
	for i := 0; ; i++ {
		select {
		case <-p.stop:
			return
		default:
		}
		// A new topic every 40 appends or so, up to 6.
		k := plKey{"Topic" + strconv.Itoa(p.rng.IntN(min(1+i/40, 6))), int32(p.rng.IntN(3))}
		q, err := p.s.Queue(k.topic, k.id)
		if err != nil {
			p.fail(err)
			return
		}
		size := int32(100 + p.rng.IntN(900))
		e := Entry{CommitLogOffset: clOff, Size: size, TagCode: int64(p.rng.Uint32())}
		clOff += int64(size)
		p.mu.Lock()
		off := int64(len(p.appended[k]))
		p.mu.Unlock()
		if err := q.Append(off, e); err != nil {
			p.fail(fmt.Errorf("append %s/%d at %d: %w", k.topic, k.id, off, err))
			return
		}
		p.mu.Lock()
		p.appended[k] = append(p.appended[k], e)
		p.appends++
		p.mu.Unlock()
	}
}

func (p *plQueues) flushLoop(rng *rand.Rand) {
	defer p.wg.Done()
	for {
		select {
		case <-p.stop:
			return
		default:
		}
		before := map[plKey]int64{}
		p.s.ForEach(func(topic string, id int32, q *Queue) bool {
			before[plKey{topic, id}] = q.MaxOffset()
			return true
		})
		if rng.IntN(3) == 0 {
			// Unmap what is idle: its next flush is an fdatasync.
			p.s.Sweep(time.Now().Add(time.Hour))
		}
		if err := p.s.Flush(); err != nil {
			p.fail(err)
			return
		}
		p.mu.Lock()
		for k, v := range before {
			p.durable[k] = max(p.durable[k], v)
		}
		p.mu.Unlock()
		// Let some appends pile up between flushes.
		target := p.count() + rng.IntN(40)
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

func (p *plQueues) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.appends
}

// snapshot copies what is durable and what was appended.
func (p *plQueues) snapshot() (map[plKey]int64, map[plKey][]Entry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := make(map[plKey]int64, len(p.durable))
	for k, v := range p.durable {
		d[k] = v
	}
	a := make(map[plKey][]Entry, len(p.appended))
	for k, v := range p.appended {
		a[k] = v[:len(v):len(v)]
	}
	return d, a
}

func (p *plQueues) halt(t *testing.T) {
	t.Helper()
	close(p.stop)
	p.wg.Wait()
	if p.err != nil {
		t.Fatal(p.err)
	}
}

func plOptions(fsys vfs.FS) Options {
	return Options{EntriesPerFile: 32, IdleUnmap: time.Nanosecond, RecoveryWindow: 16, FS: fsys}
}

// plCheck opens the clone's set and checks every durable entry; in a strict
// clone every entry past them too is the one appended or zeros (a page that
// never reached the disk, which the store's re-dispatch fills in).
func plCheck(t *testing.T, what, dir string, durable map[plKey]int64, appended map[plKey][]Entry, strict bool, fsys vfs.FS) *Set {
	t.Helper()
	s, err := OpenSet(dir, plOptions(fsys))
	if err != nil {
		t.Fatalf("%s: open after the power loss: %v", what, err)
	}
	for _, d := range s.Damaged() {
		if _, ok := durable[plKey{d.Topic, d.QueueID}]; ok {
			t.Fatalf("%s: queue %s/%d damaged after a power loss: %v", what, d.Topic, d.QueueID, d.Err)
		}
	}
	for k, n := range durable {
		if n == 0 {
			continue
		}
		q, ok := s.Lookup(k.topic, k.id)
		if !ok {
			t.Fatalf("%s: queue %s/%d with %d durable entries is gone", what, k.topic, k.id, n)
		}
		if q.MaxOffset() < n {
			t.Fatalf("%s: queue %s/%d ends at %d, %d entries were durable", what, k.topic, k.id, q.MaxOffset(), n)
		}
		for off := q.MinOffset(); off < q.MaxOffset(); off++ {
			e, err := q.Get(off)
			if err != nil {
				t.Fatalf("%s: %s/%d entry %d: %v", what, k.topic, k.id, off, err)
			}
			switch {
			case off < n && e != appended[k][off]:
				t.Fatalf("%s: %s/%d durable entry %d is %+v, appended %+v", what, k.topic, k.id, off, e, appended[k][off])
			case strict && off >= n && off < int64(len(appended[k])) && e != appended[k][off] && e != (Entry{}):
				t.Fatalf("%s: %s/%d entry %d is %+v: neither the one appended (%+v) nor zeros", what, k.topic, k.id, off, e, appended[k][off])
			}
		}
	}
	return s
}

// Every entry appended before a Flush that returned survives a power loss
// taken at any moment, strict or torn, across file rolls, new topic and
// queue directories and unmapped files; a second power loss after recovery
// keeps them too.
func TestPowerLossKeepsFlushedEntries(t *testing.T) {
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
		root := filepath.Join(dir, "consumequeue")
		s, err := OpenSet(root, plOptions(fsys))
		if err != nil {
			t.Fatal(err)
		}
		p := plRun(s, seed, nil)
		type clone struct {
			what     string
			dir      string
			strict   bool
			durable  map[plKey]int64
			appended map[plKey][]Entry
		}
		var taken []clone
		for c := 0; c < 5; c++ {
			target := p.count() + 1 + rng.IntN(200)
			wait.For(t, fmt.Sprintf("%d appends", target), func() error {
				if n := p.count(); n < target && p.err == nil {
					return fmt.Errorf("%d appended", n)
				}
				return nil
			})
			mode := crashfs.Mode(rng.IntN(2))
			cs := rng.Uint64()
			cl := clone{what: fmt.Sprintf("round %d (seed %d) clone %d (%s, seed %d)", round, seed, c, mode, cs), dir: filepath.Join(t.TempDir(), "clone"), strict: mode == crashfs.Strict}
			cl.durable, _ = p.snapshot()
			st, err := fsys.CrashClone(cl.dir, crashfs.CloneOptions{Mode: mode, Seed: cs})
			if err != nil {
				t.Fatal(err)
			}
			_, cl.appended = p.snapshot()
			lost += st.LostBytes
			taken = append(taken, cl)
		}
		p.halt(t)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for i, c := range taken {
			clones++
			root := filepath.Join(c.dir, "consumequeue")
			if i%2 == 0 {
				plCheck(t, c.what, root, c.durable, c.appended, c.strict, vfs.Default).Close()
				continue
			}
			// Again: recover under the model, append and flush, crash.
			fs2, err := crashfs.New(c.dir)
			if err != nil {
				t.Fatal(err)
			}
			s2 := plCheck(t, c.what, root, c.durable, c.appended, c.strict, fs2)
			// Entries past the durable ones are the store's to re-dispatch
			// (a torn one is rewritten from its record); here the queues go
			// on from what recovery kept, as it is.
			prior := &plQueues{appended: map[plKey][]Entry{}, durable: c.durable}
			s2.ForEach(func(topic string, id int32, q *Queue) bool {
				k := plKey{topic, id}
				kept := make([]Entry, q.MaxOffset())
				for off := q.MinOffset(); off < q.MaxOffset(); off++ {
					e, err := q.Get(off)
					if err != nil {
						t.Fatalf("%s: %s/%d entry %d: %v", c.what, topic, id, off, err)
					}
					kept[off] = e
				}
				prior.appended[k] = kept
				return true
			})
			p2 := plRun(s2, rng.Uint64(), prior)
			target := p2.count() + 1 + rng.IntN(100)
			wait.For(t, "appends after recovery", func() error {
				if n := p2.count(); n < target && p2.err == nil {
					return fmt.Errorf("%d appended", n)
				}
				return nil
			})
			mode := crashfs.Mode(rng.IntN(2))
			what := fmt.Sprintf("%s, then again (%s)", c.what, mode)
			durable, _ := p2.snapshot()
			dst := filepath.Join(t.TempDir(), "clone")
			if _, err := fs2.CrashClone(dst, crashfs.CloneOptions{Mode: mode, Seed: rng.Uint64()}); err != nil {
				t.Fatal(err)
			}
			_, appended := p2.snapshot()
			p2.halt(t)
			s2.Close()
			plCheck(t, what, filepath.Join(dst, "consumequeue"), durable, appended, mode == crashfs.Strict, vfs.Default).Close()
		}
	}
	if lost == 0 {
		t.Fatalf("none of %d clones lost a byte: the power losses tested nothing", clones)
	}
	t.Logf("%d clones, %d unsynced bytes lost in them", clones, lost)
}

// A file followed by another that ends in an unwritten entry: a power loss
// made the new file's name durable (a journal commits a create whenever it
// likes) before the last entries of the file before it were synced. After
// a crash that is the torn tail, cut at the first unwritten entry (the
// later file holds nothing synced: a flush syncs files in order); after a
// clean shutdown it is damage.
func TestPowerLossTornTailAcrossFiles(t *testing.T) {
	const per = 16
	for _, clean := range []bool{false, true} {
		root := t.TempDir()
		s, err := OpenSet(root, Options{EntriesPerFile: per})
		if err != nil {
			t.Fatal(err)
		}
		q, err := s.Queue("T", 0)
		if err != nil {
			t.Fatal(err)
		}
		var want []Entry
		for off := int64(0); off < 2*per+3; off++ {
			e := Entry{CommitLogOffset: 1000 + 100*off, Size: 100, TagCode: off}
			if err := q.Append(off, e); err != nil {
				t.Fatal(err)
			}
			want = append(want, e)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if !clean {
			if err := os.Remove(filepath.Join(root, cleanRecordName)); err != nil {
				t.Fatal(err)
			}
		}
		// Entries 2*per-3 on never reached the disk; the last file did (empty).
		dir := filepath.Join(root, "T", "0")
		f, err := os.OpenFile(filepath.Join(dir, fileName(per*EntrySize)), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteAt(make([]byte, 3*EntrySize), (per-3)*EntrySize); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.Truncate(filepath.Join(dir, fileName(2*per*EntrySize)), 0); err != nil {
			t.Fatal(err)
		}
		s, err = OpenSet(root, Options{EntriesPerFile: per})
		if err != nil {
			t.Fatal(err)
		}
		if clean {
			if d := s.Damaged(); len(d) != 1 || !errors.Is(d[0].Err, ErrDamaged) {
				t.Fatalf("after a clean shutdown: damaged %+v, want the queue", d)
			}
			s.Close()
			continue
		}
		if d := s.Damaged(); len(d) != 0 {
			t.Fatalf("after a crash: damaged %+v, want the torn tail cut", d)
		}
		q, ok := s.Lookup("T", 0)
		if !ok || q.MaxOffset() != 2*per-3 || q.Files() != 2 {
			t.Fatalf("after a crash: queue %v, max offset %d, %d files; want it to end at %d in 2 files", ok, q.MaxOffset(), q.Files(), 2*per-3)
		}
		for off := int64(0); off < q.MaxOffset(); off++ {
			if e, err := q.Get(off); err != nil || e != want[off] {
				t.Fatalf("entry %d: %+v, %v; want %+v", off, e, err, want[off])
			}
		}
		// Appends go on from the cut (re-dispatch refills it).
		if err := q.Append(2*per-3, want[2*per-3]); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
}
