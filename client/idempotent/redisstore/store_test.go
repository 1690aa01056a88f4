package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/client/idempotent"
	"github.com/apogeemq/apogee/client/idempotent/redisstore"
	"github.com/apogeemq/apogee/client/idempotent/storetest"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/redis/go-redis/v9"
)

// redisSocket is the Unix socket of the redis-server TestMain started.
var redisSocket string

// TestMain starts a redis-server on a Unix socket for the package's tests and
// kills it afterwards. Without the binary the tests fail: CI installs it
// (Debian: apt-get install -y redis-server).
func TestMain(m *testing.M) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: redisstore tests need redis-server on PATH (Debian/Ubuntu: apt-get install -y redis-server): %v\n", err)
		os.Exit(1)
	}
	stop, socket, err := startRedis(bin)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: starting %s: %v\n", bin, err)
		os.Exit(1)
	}
	redisSocket = socket
	code := m.Run()
	stop()
	os.Exit(code)
}

// startRedis starts redis-server without persistence, listening on a Unix
// socket in a directory of its own (no TCP port: none to choose, none taken
// by another job), and waits until it answers PING. stop kills the server,
// waits for it and removes the directory.
func startRedis(bin string) (stop func(), socket string, err error) {
	dir, err := os.MkdirTemp("", "redisstore-test-")
	if err != nil {
		return nil, "", err
	}
	socket = filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", socket, "--save", "", "--appendonly", "no", "--dir", dir)
	out := &logBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited); os.RemoveAll(dir) }()
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: socket})
	defer rdb.Close()
	err = wait.Poll(wait.DefaultTimeout, func() error {
		select {
		case <-exited:
			return nil // reported below
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return rdb.Ping(ctx).Err()
	})
	select {
	case <-exited:
		return nil, "", fmt.Errorf("redis-server exited: %s", out.String())
	default:
	}
	if err != nil {
		cmd.Process.Kill()
		<-exited
		return nil, "", fmt.Errorf("redis-server did not answer: %w; its output: %s", err, out.String())
	}
	return func() { cmd.Process.Kill(); <-exited }, socket, nil
}

// logBuffer collects the server's output, for the error when it fails to start.
type logBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}

var prefixes atomic.Int64

// newStore returns a Store on the test server under a prefix of its own.
func newStore(t testing.TB) (*redisstore.Store, *redis.Client, string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: redisSocket})
	t.Cleanup(func() { rdb.Close() })
	prefix := fmt.Sprintf("test:%d:", prefixes.Add(1))
	return redisstore.New(rdb, prefix), rdb, prefix
}

func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Config{Lease: 400 * time.Millisecond, Slack: 150 * time.Millisecond, Racers: 16},
		func(t *testing.T) idempotent.Store { s, _, _ := newStore(t); return s })
}

// TestValues pins what is kept in Redis: the value names the state and owner,
// the expiry is the lease or TTL.
func TestValues(t *testing.T) {
	s, rdb, prefix := newStore(t)
	ctx := context.Background()
	if st, err := s.TryBegin(ctx, "k", "me", 5*time.Second); err != nil || st != idempotent.StateAbsent {
		t.Fatalf("TryBegin: %v %v", st, err)
	}
	check := func(want string, maxTTL time.Duration) {
		t.Helper()
		v, err := rdb.Get(ctx, prefix+"k").Result()
		if err != nil || v != want {
			t.Fatalf("value %q (%v), want %q", v, err, want)
		}
		if ttl := rdb.PTTL(ctx, prefix+"k").Val(); ttl <= 0 || ttl > maxTTL {
			t.Fatalf("PTTL %v, want (0, %v]", ttl, maxTTL)
		}
	}
	check("Pme", 5*time.Second)
	if err := s.Renew(ctx, "k", "me", time.Minute); err != nil {
		t.Fatal(err)
	}
	check("Pme", time.Minute)
	if err := s.Done(ctx, "k", "me", time.Hour); err != nil {
		t.Fatal(err)
	}
	check("Dme", time.Hour)
	if err := s.Release(ctx, "k", "me"); !errors.Is(err, idempotent.ErrNotOwner) {
		t.Fatalf("Release of a done key: %v", err)
	}
	// Another prefix is another store.
	other := redisstore.New(rdb, prefix+"other:")
	if st, err := other.TryBegin(ctx, "k", "you", time.Second); err != nil || st != idempotent.StateAbsent {
		t.Fatalf("other prefix: %v %v", st, err)
	}
}

func TestStoreDown(t *testing.T) {
	// A socket nobody listens on: dials are refused.
	rdb := redis.NewClient(&redis.Options{Network: "unix", Addr: filepath.Join(t.TempDir(), "none.sock"), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer rdb.Close()
	s := redisstore.New(rdb, "x:")
	ctx := context.Background()
	if _, err := s.TryBegin(ctx, "k", "o", time.Second); err == nil {
		t.Fatal("TryBegin against no server succeeded")
	}
	for name, err := range map[string]error{
		"Renew": s.Renew(ctx, "k", "o", time.Second), "Done": s.Done(ctx, "k", "o", time.Second), "Release": s.Release(ctx, "k", "o"),
	} {
		if err == nil || errors.Is(err, idempotent.ErrNotOwner) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func msg(id string) []*client.MessageExt {
	return []*client.MessageExt{{MsgID: id, Message: client.Message{Body: []byte(id)}}}
}

// TestGuard runs two Guards (two processes) over one Redis: duplicates run
// once, a failure releases the key, and a dead holder's key is taken over after
// its lease.
func TestGuard(t *testing.T) {
	s, _, _ := newStore(t)
	runs := map[string]int{}
	var mu sync.Mutex
	fail := map[string]bool{"F": true}
	listener := func(_ context.Context, msgs []*client.MessageExt) client.ConsumeResult {
		mu.Lock()
		defer mu.Unlock()
		id := msgs[0].MsgID
		runs[id]++
		if fail[id] {
			delete(fail, id)
			return client.ConsumeRetryLater
		}
		return client.ConsumeSuccess
	}
	var ls []client.ConcurrentListener
	for range 2 {
		g, err := idempotent.New(s, idempotent.Logger(testlog.New(t, "guard")), idempotent.Lease(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, g.Concurrent(listener))
	}
	ctx := context.Background()
	for i := range 4 {
		if res := ls[i%2](ctx, msg("A")); res != client.ConsumeSuccess {
			t.Fatalf("A delivery %d: %v", i, res)
		}
	}
	if ls[0](ctx, msg("F")) != client.ConsumeRetryLater || ls[1](ctx, msg("F")) != client.ConsumeSuccess {
		t.Fatal("F: failure did not release the key")
	}
	const lease = time.Second
	held := time.Now() // the dead holder's lease lasts at least until a lease after this
	if _, err := s.TryBegin(ctx, "C", "dead", lease); err != nil {
		t.Fatal(err)
	}
	if ls[0](ctx, msg("C")) != client.ConsumeRetryLater && time.Since(held) < lease {
		t.Fatal("C ran while held")
	}
	wait.For(t, "C taken over after the lease", func() error {
		if res := ls[1](ctx, msg("C")); res != client.ConsumeSuccess {
			return fmt.Errorf("the listener answered %v", res)
		}
		return nil
	})
	if since := time.Since(held); since < lease {
		t.Fatalf("C taken over %v after it was taken, before its lease (%v) ended", since, lease)
	}
	if runs["A"] != 1 || runs["F"] != 2 || runs["C"] != 1 {
		t.Fatalf("runs %v", runs)
	}
}

// BenchmarkGuard measures a guarded listener call on a new key (SET NX PX,
// then the done script) and on a duplicate (SET NX, GET) over loopback.
func BenchmarkGuard(b *testing.B) {
	s, _, _ := newStore(b)
	g, err := idempotent.New(s, idempotent.Logger(slog.New(slog.DiscardHandler)))
	if err != nil {
		b.Fatal(err)
	}
	l := g.Concurrent(func(context.Context, []*client.MessageExt) client.ConsumeResult { return client.ConsumeSuccess })
	ctx := context.Background()
	batches := make([][]*client.MessageExt, 1<<16)
	for i := range batches {
		batches[i] = msg(fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i))
	}
	b.Run("new-key", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if i >= len(batches) {
				b.Fatal("out of keys")
			}
			l(ctx, batches[i])
		}
	})
	b.Run("duplicate", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l(ctx, batches[0])
		}
	})
}
