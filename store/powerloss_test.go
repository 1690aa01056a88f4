package store

import (
	"context"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/crashfs"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
)

// Power loss for the whole store (internal/vfs/crashfs): writers put
// messages with keys into several queues while crash clones are taken; each
// clone is opened (the commit log recovered, the consume queues and the
// index checked and rebuilt from it as needed) and every message that was
// acknowledged before the clone must be there three ways: by its commit-log
// offset (ReadMessage), by its queue offset (Get), by its key (QueryByKey).

var plHost = netip.MustParseAddrPort("127.0.0.1:10922")

var plTopics = []string{"PowerLossA", "PowerLossB"}

// plMsg is a message as put, and where the store put it.
type plMsg struct {
	topic string
	queue int32
	key   string
	sum   uint32 // CRC of the body
	res   PutResult
}

func (m plMsg) end() int64 { return m.res.CommitLogOffset + int64(m.res.Size) }

// plPutters put from several goroutines. In sync mode Put returns once the
// message is durable: it is then acknowledged. With tokens each put takes
// one (async puts, which nothing slows down).
type plPutters struct {
	s      *Store
	mu     sync.Mutex
	acked  []plMsg
	err    error
	tokens chan struct{}
	stop   chan struct{}
	wg     sync.WaitGroup
}

func plPut(s *Store, n int, seed uint64, tokens chan struct{}, prior []plMsg) *plPutters {
	p := &plPutters{s: s, tokens: tokens, stop: make(chan struct{}), acked: prior}
	for g := 0; g < n; g++ {
		p.wg.Add(1)
		go p.loop(rand.New(rand.NewPCG(seed, uint64(g)+1)), g)
	}
	return p
}

func (p *plPutters) loop(rng *rand.Rand, g int) {
	defer p.wg.Done()
	for i := 0; ; i++ {
		if p.tokens != nil {
			select {
			case <-p.tokens:
			case <-p.stop:
				return
			}
		}
		select {
		case <-p.stop:
			return
		default:
		}
		body := make([]byte, 20+rng.IntN(1500))
		for j := range body {
			body[j] = byte(rng.Uint32())
		}
		m := plMsg{topic: plTopics[rng.IntN(len(plTopics))], queue: int32(rng.IntN(3)), key: fmt.Sprintf("k%d-%d-%d", g, i, rng.Uint32()), sum: crc32.ChecksumIEEE(body)}
		res, err := p.s.Put(&Message{Topic: m.topic, QueueID: m.queue, BornHost: plHost, BornTimestamp: time.Now().UnixMilli(),
			Body: body, Properties: message.AppendProperty(nil, message.PropKeys, m.key)})
		if err == nil && res.Status != StatusOK {
			err = fmt.Errorf("status %d", res.Status)
		}
		if err != nil {
			p.mu.Lock()
			if p.err == nil {
				p.err = fmt.Errorf("put: %w", err)
			}
			p.mu.Unlock()
			return
		}
		m.res = res
		p.mu.Lock()
		p.acked = append(p.acked, m)
		p.mu.Unlock()
	}
}

func (p *plPutters) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.acked)
}

func (p *plPutters) snapshot() []plMsg {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]plMsg(nil), p.acked...)
}

func (p *plPutters) waitUntil(t *testing.T, target int) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%d acknowledged puts", target), func() error {
		p.mu.Lock()
		got, err := len(p.acked), p.err
		p.mu.Unlock()
		if err != nil || got >= target {
			return nil // halt reports an error
		}
		return fmt.Errorf("%d acknowledged", got)
	})
}

func (p *plPutters) halt(t *testing.T) {
	t.Helper()
	close(p.stop)
	p.wg.Wait()
	if p.err != nil {
		t.Fatal(p.err)
	}
}

// plOptions: 128 KiB segments, consume-queue files of 64 entries, index
// files of 256 entries (all roll often), the derived files flushed every
// few ms and the checkpoint written often or almost never, retention by
// hand with every sealed segment expired (Clean retires them into the
// recycling pool).
func plOptions(dir string, mode commitlog.FlushMode, fsys vfs.FS, rng *rand.Rand, t *testing.T) Options {
	o := Options{Dir: dir, SegmentSize: 128 << 10, FlushMode: mode, FS: fsys,
		ConsumeQueueEntries: 64, IndexSlots: 64, IndexMaxEntries: 256, MaxMessageSize: 8 << 10,
		SyncFlushTimeout: time.Minute, CleanInterval: -1, RetentionTime: time.Nanosecond,
		FlushInterval: 2 * time.Millisecond, CheckpointInterval: time.Hour, ScrubRate: -1,
		Logger: testlog.New(t, "store")}
	if rng != nil {
		if rng.IntN(2) == 0 {
			o.CheckpointInterval = 3 * time.Millisecond
		}
		o.RecycleSegments = []int{-1, 1, 2}[rng.IntN(3)]
	}
	return o
}

// plClone is a crash clone and what was known when it was taken.
type plClone struct {
	what     string
	dir      string
	stats    crashfs.CloneStats
	acked    []plMsg // acknowledged (put) before the clone
	flushed  int64   // the commit log's flushed offset read just before it
	minAfter int64   // the commit log's minimum offset read just after it
}

func takeClone(t *testing.T, fsys *crashfs.FS, s *Store, p *plPutters, what string, mode crashfs.Mode, seed uint64) plClone {
	t.Helper()
	c := plClone{what: fmt.Sprintf("%s (%s clone, seed %d)", what, mode, seed), dir: filepath.Join(t.TempDir(), "clone")}
	c.acked = p.snapshot()
	c.flushed = s.Log().FlushedOffset()
	st, err := fsys.CrashClone(c.dir, crashfs.CloneOptions{Mode: mode, Seed: seed})
	if err != nil {
		t.Fatalf("%s: %v", c.what, err)
	}
	c.minAfter = s.Log().MinOffset()
	c.stats = st
	return c
}

// plOpen opens a clone's store (with APOGEE_POWERLOSS_KEEP=DIR, a copy of
// the clone as the power loss left it is kept in DIR when the test fails).
func plOpen(t *testing.T, c plClone, mode commitlog.FlushMode, fsys vfs.FS) (*Store, commitlog.Recovery) {
	t.Helper()
	return plOpenWith(t, c, plOptions(filepath.Join(c.dir, "store"), mode, fsys, nil, t))
}

func plOpenWith(t *testing.T, c plClone, o Options) (*Store, commitlog.Recovery) {
	t.Helper()
	if root := os.Getenv("APOGEE_POWERLOSS_KEEP"); root != "" {
		// Only the last clone opened is kept: the one a failure is about.
		keep := filepath.Join(root, "clone")
		os.RemoveAll(keep)
		if err := os.CopyFS(keep, os.DirFS(c.dir)); err == nil {
			t.Logf("%s: copied to %s", c.what, keep)
		}
	}
	s, rep, err := Open(o)
	if err != nil {
		t.Fatalf("%s: open after the power loss: %v (%s)", c.what, err, c.stats)
	}
	return s, rep
}

// plFind reports whether m is served by its commit-log offset, by its queue
// offset and by its key, and what is wrong when it is not (nil: served all
// three ways, byte for byte).
func plFind(s *Store, m plMsg) error {
	v, err := s.ReadMessage(m.res.CommitLogOffset)
	if err != nil {
		return fmt.Errorf("ReadMessage: %w", err)
	}
	err = plSame(v.Bytes(), m)
	v.Release()
	if err != nil {
		return fmt.Errorf("ReadMessage: %w", err)
	}
	var res GetResult
	defer res.Release()
	if err := s.Get(m.topic, m.queue, m.res.QueueOffset, 1, 1<<20, nil, &res); err != nil {
		return fmt.Errorf("Get: %w", err)
	}
	if res.Status != Found || len(res.Messages) != 1 {
		return fmt.Errorf("Get %s/%d at %d: status %d, %d messages (queue [%d, %d))", m.topic, m.queue, m.res.QueueOffset, res.Status, len(res.Messages), res.MinOffset, res.MaxOffset)
	}
	if err := plSame(res.Messages[0].Bytes(), m); err != nil {
		return fmt.Errorf("Get %s/%d at %d: %w", m.topic, m.queue, m.res.QueueOffset, err)
	}
	views, err := s.QueryByKey(m.topic, m.key, 0, 1<<62, 4, nil)
	if err != nil {
		return fmt.Errorf("QueryByKey: %w", err)
	}
	found := false
	for _, v := range views {
		found = found || plSame(v.Bytes(), m) == nil
		v.Release()
	}
	if !found {
		return fmt.Errorf("QueryByKey(%s, %s): not found among %d", m.topic, m.key, len(views))
	}
	return nil
}

// plSame checks a served record against the message put.
func plSame(rec []byte, m plMsg) error {
	v, err := message.Decode(rec, true)
	switch {
	case err != nil:
		return err
	case v.PhysicalOffset() != m.res.CommitLogOffset || string(v.Topic()) != m.topic || v.QueueID() != m.queue ||
		v.QueueOffset() != m.res.QueueOffset || crc32.ChecksumIEEE(v.Body()) != m.sum || string(v.Keys()) != m.key:
		return fmt.Errorf("the record at %d is not the message put there (%s/%d at %d, key %s)", v.PhysicalOffset(), v.Topic(), v.QueueID(), v.QueueOffset(), v.Keys())
	}
	return nil
}

// plServed walks every queue: each message Get serves must be valid (its
// body CRC) and at its own queue offset.
func plServed(t *testing.T, what string, s *Store) {
	t.Helper()
	s.Queues(func(topic string, q int32, min, max int64) bool {
		var res GetResult
		defer res.Release()
		for off := min; off < max; {
			if err := s.Get(topic, q, off, 32, 1<<20, nil, &res); err != nil {
				t.Fatalf("%s: Get %s/%d at %d: %v", what, topic, q, off, err)
			}
			for i, v := range res.Messages {
				m, err := message.Decode(v.Bytes(), true)
				if err == nil && (string(m.Topic()) != topic || m.QueueID() != q) {
					err = fmt.Errorf("a record of %s/%d", m.Topic(), m.QueueID())
				}
				if err != nil {
					t.Fatalf("%s: Get %s/%d from %d served a corrupt or foreign record (the %d-th, %d bytes): %v", what, topic, q, off, i, len(v.Bytes()), err)
				}
			}
			if res.NextOffset <= off {
				break
			}
			off = res.NextOffset
			res.Release()
		}
		return true
	})
}

// In sync-flush mode every acknowledged message survives a power loss at
// any moment: by commit-log offset, queue offset and key, across segment,
// consume-queue and index file rolls, retention into the recycling pool
// and recycled segments, the derived files flushed or not, strict and torn
// clones, and a second power loss after the recovery of some clones.
func TestPowerLossSyncFlushKeepsAcknowledgedMessages(t *testing.T) {
	rounds := crashfs.Rounds(3)
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
		o := plOptions(filepath.Join(dir, "store"), FlushSync, fsys, rng, t)
		s, _, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		p := plPut(s, 4, seed, nil, nil)
		var taken []plClone
		for c := 0; c < 4; c++ {
			p.waitUntil(t, p.count()+1+rng.IntN(80))
			if rng.IntN(3) == 0 {
				if _, err := s.Clean(); err != nil {
					t.Fatal(err)
				}
			}
			what := fmt.Sprintf("round %d (seed %d) clone %d (recycle %d, checkpoint every %v)", round, seed, c, o.RecycleSegments, o.CheckpointInterval)
			taken = append(taken, takeClone(t, fsys, s, p, what, crashfs.Mode(rng.IntN(2)), rng.Uint64()))
		}
		p.halt(t)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for i, c := range taken {
			clones++
			lost += c.stats.LostBytes
			again := i%2 == 1
			var fs2 *crashfs.FS
			var sfs vfs.FS = vfs.Default
			if again {
				if fs2, err = crashfs.New(c.dir); err != nil {
					t.Fatal(err)
				}
				sfs = fs2
			}
			s2, rep := plOpen(t, c, FlushSync, sfs)
			plCheck(t, c, s2, rep)
			if !again {
				s2.Close()
				continue
			}
			// Messages retention cleaned before the first power loss stay
			// out: their segment may be back, their index file not.
			var prior []plMsg
			for _, m := range c.acked {
				if m.res.CommitLogOffset >= max(c.minAfter, s2.Log().MinOffset()) {
					prior = append(prior, m)
				}
			}
			p2 := plPut(s2, 2, rng.Uint64(), nil, prior)
			p2.waitUntil(t, p2.count()+1+rng.IntN(60))
			c2 := takeClone(t, fs2, s2, p2, c.what+", then again", crashfs.Mode(rng.IntN(2)), rng.Uint64())
			p2.halt(t)
			if err := s2.Close(); err != nil {
				t.Fatal(err)
			}
			lost += c2.stats.LostBytes
			s3, rep := plOpen(t, c2, FlushSync, vfs.Default)
			plCheck(t, c2, s3, rep)
			s3.Close()
		}
	}
	if lost == 0 {
		t.Fatalf("none of %d clones lost a byte: the power losses tested nothing", clones)
	}
	t.Logf("%d clones, %d unsynced bytes lost in them", clones, lost)
}

// plCheck: no damage reported, every acknowledged message not cleaned away
// served three ways, nothing corrupt served.
func plCheck(t *testing.T, c plClone, s *Store, rep commitlog.Recovery) {
	t.Helper()
	what := fmt.Sprintf("%s [flushed before %d; %s; %s]", c.what, c.flushed, rep, c.stats)
	if rep.Damaged() {
		t.Fatalf("%s: recovery reports damage after a power loss in sync mode", what)
	}
	if min := s.Log().MinOffset(); min > c.minAfter {
		t.Fatalf("%s: the recovered log starts at %d, the crashed one at %d", what, min, c.minAfter)
	}
	for _, m := range c.acked {
		if m.res.CommitLogOffset < max(c.minAfter, s.Log().MinOffset()) {
			// Cleaned by retention before the power loss. (Its segment may
			// be back, its unlink not yet durable; its index file may not.)
			continue
		}
		if err := plFind(s, m); err != nil {
			t.Fatalf("%s: acknowledged message %s/%d at queue offset %d (commit log %d) lost: %v", what, m.topic, m.queue, m.res.QueueOffset, m.res.CommitLogOffset, err)
		}
	}
	plServed(t, what, s)
}

// lostNamed captures the store's "messages lost" lines (and passes every
// record on to the test's log).
type lostNamed struct {
	slog.Handler
	mu    *sync.Mutex
	named *[]lostRange
}

type lostRange struct {
	topic    string
	queue    int32
	from, to int64 // queue offsets, inclusive
}

func (h lostNamed) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "store: messages lost" {
		var lr lostRange
		r.Attrs(func(a slog.Attr) bool {
			switch a.Key {
			case "topic":
				lr.topic = a.Value.String()
			case "queue":
				lr.queue = int32(a.Value.Int64())
			case "fromQueueOffset":
				lr.from = a.Value.Int64()
			case "toQueueOffset":
				lr.to = a.Value.Int64()
			}
			return true
		})
		h.mu.Lock()
		*h.named = append(*h.named, lr)
		h.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}

func (h lostNamed) WithAttrs(as []slog.Attr) slog.Handler {
	return lostNamed{h.Handler.WithAttrs(as), h.mu, h.named}
}

func (h lostNamed) WithGroup(name string) slog.Handler {
	return lostNamed{h.Handler.WithGroup(name), h.mu, h.named}
}

// In async-flush mode a power loss costs at most the unsynced window: every
// message whose record lay below the commit log's flushed offset (read just
// before the clone) is served three ways; a message put before the clone
// whose record survived is served three ways too; every lost one lay past
// that offset, and the report accounts for it (the log's new end, or a
// reported loss); every message the store names as lost is lost; nothing
// corrupt is served; recovery reports no damage.
func TestPowerLossAsyncFlushLosesOnlyTheUnsyncedWindow(t *testing.T) {
	rounds := crashfs.Rounds(3)
	var clones, lost int
	for round := 0; round < rounds; round++ {
		seed := rand.Uint64()
		rng := rand.New(rand.NewPCG(seed, 0))
		dir := t.TempDir()
		fsys, err := crashfs.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		o := plOptions(filepath.Join(dir, "store"), FlushAsync, fsys, rng, t)
		s, _, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		p := plPut(s, 3, seed, make(chan struct{}, 1024), nil)
		var taken []plClone
		for c := 0; c < 4; c++ {
			n := 10 + rng.IntN(100)
			target := p.count() + 1 + rng.IntN(n)
			for i := 0; i < n; i++ {
				p.tokens <- struct{}{}
			}
			p.waitUntil(t, target)
			switch rng.IntN(3) {
			case 0:
				if err := s.Log().Flush(); err != nil {
					t.Fatal(err)
				}
			case 1:
				if _, err := s.Clean(); err != nil {
					t.Fatal(err)
				}
			}
			what := fmt.Sprintf("round %d (seed %d) clone %d (recycle %d, checkpoint every %v)", round, seed, c, o.RecycleSegments, o.CheckpointInterval)
			taken = append(taken, takeClone(t, fsys, s, p, what, crashfs.Mode(rng.IntN(2)), rng.Uint64()))
		}
		p.halt(t)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		for _, c := range taken {
			clones++
			var mu sync.Mutex
			var named []lostRange
			o := plOptions(filepath.Join(c.dir, "store"), FlushAsync, vfs.Default, nil, t)
			o.Logger = slog.New(lostNamed{o.Logger.Handler(), &mu, &named})
			s2, rep := plOpenWith(t, c, o)
			what := fmt.Sprintf("%s [flushed before %d; %s; %s]", c.what, c.flushed, rep, c.stats)
			if rep.Damaged() {
				t.Fatalf("%s: recovery reports damage after a power loss", what)
			}
			gone := map[[2]any]bool{} // {topic/queue, queue offset} of lost messages
			for _, m := range c.acked {
				if m.res.CommitLogOffset < max(c.minAfter, s2.Log().MinOffset()) {
					continue // cleaned by retention
				}
				err := plFind(s2, m)
				if err == nil {
					continue
				}
				v, rerr := s2.ReadMessage(m.res.CommitLogOffset)
				if rerr == nil {
					same := plSame(v.Bytes(), m)
					v.Release()
					if same == nil {
						t.Fatalf("%s: message %s/%d at queue offset %d survived in the log (at %d) but is not served: %v", what, m.topic, m.queue, m.res.QueueOffset, m.res.CommitLogOffset, err)
					}
				}
				if m.end() <= c.flushed {
					t.Fatalf("%s: message %s/%d at queue offset %d (commit log [%d, %d)) lost below the flushed offset: %v", what, m.topic, m.queue, m.res.QueueOffset, m.res.CommitLogOffset, m.end(), err)
				}
				accounted := m.res.CommitLogOffset >= rep.End
				for _, l := range rep.Losses {
					accounted = accounted || m.res.CommitLogOffset < l.To && l.From < m.end()
				}
				if !accounted {
					t.Fatalf("%s: message at commit log %d lost, below the end %d and in no reported loss: %v", what, m.res.CommitLogOffset, rep.End, err)
				}
				lost++
				gone[[2]any{m.topic + "/" + strconv.Itoa(int(m.queue)), m.res.QueueOffset}] = true
			}
			for _, m := range c.acked {
				for _, lr := range named {
					if lr.topic == m.topic && lr.queue == m.queue && lr.from <= m.res.QueueOffset && m.res.QueueOffset <= lr.to &&
						!gone[[2]any{m.topic + "/" + strconv.Itoa(int(m.queue)), m.res.QueueOffset}] && plFind(s2, m) == nil {
						t.Fatalf("%s: %s/%d queue offset %d is named lost, and is served", what, m.topic, m.queue, m.res.QueueOffset)
					}
				}
			}
			plServed(t, what, s2)
			s2.Close()
		}
	}
	if lost == 0 {
		t.Fatalf("no message was lost in %d clones: the power losses tested nothing", clones)
	}
	t.Logf("%d clones lost %d unsynced messages", clones, lost)
}
