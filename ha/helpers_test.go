package ha

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

var born = netip.MustParseAddrPort("10.0.0.1:5000")

// storeOptions: small files, no background cleanup (the test machine's
// disk is fuller than the default usage ratio, which would delete segments).
func storeOptions(dir string) store.Options {
	return store.Options{
		Dir:                 dir,
		SegmentSize:         1 << 20,
		ConsumeQueueEntries: 1024,
		IndexSlots:          4096,
		IndexMaxEntries:     100_000,
		MaxMessageSize:      64 << 10,
		CleanInterval:       -1,
		DiskUsageRatio:      0.99,
		ScrubRate:           -1,
	}
}

func openStore(t testing.TB, o store.Options) *store.Store {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testlog.New(t, "store")
	}
	s, _, err := store.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func replicaOptions(dir string) store.Options {
	o := storeOptions(dir)
	o.Replica = true
	return o
}

// logBuffer collects a logger's output for checks on its lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// logger writes to l (for a test that reads what was logged) and to t's log
// (printed if t fails), tagged name.
func (l *logBuffer) logger(t testing.TB, name string) *slog.Logger {
	h := slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug})
	return slog.New(slog.NewMultiHandler(h, testlog.New(t, name).Handler()))
}

// startMaster serves st on a port of 127.0.0.1.
func startMaster(t testing.TB, st *store.Store, o MasterOptions) (*Master, string) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testlog.New(t, "master")
	}
	m, err := NewMaster(st, o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go m.Serve(ln)
	return m, ln.Addr().String()
}

func startSlave(t testing.TB, st *store.Store, addr string, o SlaveOptions) *Slave {
	t.Helper()
	o.MasterAddr = addr
	if o.Logger == nil {
		o.Logger = testlog.New(t, "slave")
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = 20 * time.Millisecond
		o.MaxRetryInterval = 200 * time.Millisecond
	}
	s, err := NewSlave(st, o)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	return s
}

// caughtUp waits until replica's log ends where master's does and both have
// dispatched everything.
func caughtUp(t testing.TB, master, replica *store.Store) {
	t.Helper()
	wait.For(t, "the replica to catch up", func() error {
		w := master.WrittenOffset()
		if rw, rd, md := replica.WrittenOffset(), replica.DispatchedOffset(), master.DispatchedOffset(); rw != w || rd != w || md != w {
			return fmt.Errorf("master written %d, dispatched %d; replica written %d, dispatched %d", w, md, rw, rd)
		}
		return nil
	})
}

// sameLog compares the two logs byte for byte over [from, to).
func sameLog(t testing.TB, a, b *store.Store, from, to int64) {
	t.Helper()
	for off := from; off < to; {
		va, err := a.ReadLog(off, 1<<20)
		if err != nil {
			t.Fatalf("master at %d: %v", off, err)
		}
		n := min(int64(len(va.Bytes())), to-off)
		vb, err := b.ReadLog(off, int(n))
		if err != nil {
			t.Fatalf("replica at %d: %v", off, err)
		}
		if int64(len(vb.Bytes())) != n || !bytes.Equal(va.Bytes()[:n], vb.Bytes()) {
			t.Fatalf("logs differ in [%d, %d)", off, off+n)
		}
		va.Release()
		vb.Release()
		off += n
	}
}

// sameQueues checks that every consume queue of a has the same bounds and
// entries in b, and returns the number of entries compared. With
// skipEmpty, queues a holds no entry of are not compared: a replica that
// started over never saw the records retention removed, so it does not know
// how far such a queue had gone.
func sameQueues(t testing.TB, a, b *store.Store, skipEmpty bool) int {
	t.Helper()
	n, queues := 0, 0
	a.Queues(func(topic string, id int32, min, max int64) bool {
		if skipEmpty && min == max {
			return true
		}
		queues++
		if bmin, bmax := b.MinOffset(topic, id), b.MaxOffset(topic, id); bmin != min || bmax != max {
			t.Fatalf("%s/%d: master [%d, %d), replica [%d, %d)", topic, id, min, max, bmin, bmax)
		}
		ea, err := a.ReadEntries(topic, id, min, make([]store.QueueEntry, 0, max-min))
		if err != nil {
			t.Fatal(err)
		}
		eb, err := b.ReadEntries(topic, id, min, make([]store.QueueEntry, 0, max-min))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ea, eb) {
			t.Fatalf("%s/%d: the entries differ", topic, id)
		}
		n += len(ea)
		return true
	})
	m := 0
	b.Queues(func(topic string, id int32, min, max int64) bool {
		if max > min {
			m++
		}
		return true
	})
	if m > queues {
		t.Fatalf("the replica has %d non-empty queues, the master %d", m, queues)
	}
	return n
}

// sameMessages pulls every queue of a from its min offset on both stores and
// compares the records.
func sameMessages(t testing.TB, a, b *store.Store) {
	t.Helper()
	a.Queues(func(topic string, id int32, min, max int64) bool {
		for off := min; off < max; {
			var ra, rb store.GetResult
			if err := a.Get(topic, id, off, 64, 1<<20, nil, &ra); err != nil {
				t.Fatal(err)
			}
			if err := b.Get(topic, id, off, 64, 1<<20, nil, &rb); err != nil {
				t.Fatal(err)
			}
			if len(ra.Messages) != len(rb.Messages) || ra.NextOffset != rb.NextOffset {
				t.Fatalf("%s/%d at %d: master %d messages (next %d), replica %d (next %d)", topic, id, off,
					len(ra.Messages), ra.NextOffset, len(rb.Messages), rb.NextOffset)
			}
			for i := range ra.Messages {
				if !bytes.Equal(ra.Messages[i].Bytes(), rb.Messages[i].Bytes()) {
					t.Fatalf("%s/%d: message %d differs", topic, id, off+int64(i))
				}
			}
			if ra.NextOffset <= off {
				t.Fatalf("%s/%d: no progress at %d", topic, id, off)
			}
			off = ra.NextOffset
			ra.Release()
			rb.Release()
		}
		return true
	})
}

// put stores n messages over the given number of topics (4 queues each)
// from producers goroutines, without waiting for durability, and returns
// the end of the last one.
func put(t testing.TB, st *store.Store, n, topics, producers int, tag string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for i := p; i < n; i += producers {
				body := fmt.Sprintf("%s-%d-%s", tag, i, strings.Repeat("x", 50+i%200))
				props := message.AppendProperty(nil, message.PropKeys, fmt.Sprintf("%s-key-%d", tag, i))
				_, err := st.Put(&store.Message{
					Topic: fmt.Sprintf("topic-%d", i%topics), QueueID: int32(i/topics) % 4,
					BornHost: born, BornTimestamp: time.Now().UnixMilli(),
					Body: []byte(body), Properties: props, NoWait: true,
				})
				if err != nil {
					errs <- err
					return
				}
			}
		}(p)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// proxy forwards TCP connections to target and can stall them: while
// paused nothing is forwarded either way, and the connections stay open.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, u)
		go p.pipe(u, c)
	}
}

func (p *proxy) pipe(from, to net.Conn) {
	defer p.wg.Done()
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.paused && !p.closed {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *proxy) pause(on bool) {
	p.mu.Lock()
	p.paused = on
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	p.cond.Broadcast()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
