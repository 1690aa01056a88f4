package benchmark

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/store"
)

// The child broker.
//
// With Config.ChildBroker the embedded broker runs in a child process: this
// binary re-executed with childEnv set, which ServeChildBroker (called first
// thing by apogee-bench's main, and by the package's TestMain) turns into a
// broker serving on a loopback port until its standard input closes. The
// generator and the broker then have a process each, as when a user starts
// apogee-broker, and each one's CPU time comes from the kernel (see cpu.go):
// Go cannot say which goroutines of one process spent the CPU, so
// "the process minus the generator's share" would be a guess.

const childEnv = "APOGEE_BENCH_CHILD_BROKER" // data dir,flush,queues

// ServeChildBroker runs the child broker and exits the process when this
// process was started as one (childEnv set); otherwise it returns at once.
// Programs that run Config.ChildBroker workloads call it first in main.
func ServeChildBroker() {
	spec, ok := os.LookupEnv(childEnv)
	if !ok {
		return
	}
	if err := serveChild(spec, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "apogee-bench child broker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveChild serves a broker as spec says ("dir,flush,queues"), writes
// "listening ADDR" to out, and shuts the broker down when in ends.
func serveChild(spec string, in io.Reader, out io.Writer) error {
	// The directory may hold commas; the flush mode and the count do not.
	rest, queuesStr, ok1 := cutLast(spec, ",")
	dir, flush, ok2 := cutLast(rest, ",")
	if !ok1 || !ok2 {
		return fmt.Errorf("%s=%q: want dir,flush,queues", childEnv, spec)
	}
	f := []string{dir, flush, queuesStr}
	mode, err := store.ParseFlushMode(f[1])
	if err != nil {
		return err
	}
	queues, err := strconv.Atoi(f[2])
	if err != nil {
		return fmt.Errorf("%s: queues: %w", childEnv, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	b, err := broker.New(broker.Options{Core: core.Options{DataDir: f[0], Store: store.Options{FlushMode: mode}, AdvertiseAddr: l.Addr().String(), DefaultTopicQueues: queues, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}})
	if err != nil {
		l.Close()
		return fmt.Errorf("broker: %w", err)
	}
	served := make(chan error, 1)
	go func() { served <- b.Serve(l) }()
	if _, err := fmt.Fprintf(out, "listening %s\n", l.Addr()); err != nil {
		return err
	}
	closed := make(chan struct{})
	go func() {
		io.Copy(io.Discard, in)
		close(closed)
	}()
	select {
	case <-closed:
	case err := <-served:
		return fmt.Errorf("broker stopped: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = b.Shutdown(ctx)
	<-served
	return err
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// childBroker is a running child broker.
type childBroker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addr  string
}

// startChildBroker starts the child broker for c with data in dir.
func startChildBroker(c Config, dir string) (*childBroker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("benchmark: child broker: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d", childEnv, dir, c.Flush, c.Queues))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("benchmark: child broker: %w", err)
	}
	ch := &childBroker{cmd: cmd, stdin: stdin}
	line := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(stdout)
		s.Scan()
		line <- s.Text()
		io.Copy(io.Discard, stdout)
	}()
	select {
	case l := <-line:
		addr, ok := strings.CutPrefix(l, "listening ")
		if !ok {
			ch.stop()
			return nil, fmt.Errorf("benchmark: child broker said %q, not where it listens (does this program call benchmark.ServeChildBroker?)", l)
		}
		ch.addr = addr
	case <-time.After(30 * time.Second):
		ch.stop()
		return nil, errors.New("benchmark: child broker did not start in 30 s")
	}
	return ch, nil
}

// stop closes the child's standard input, which shuts it down, and waits.
func (c *childBroker) stop() error {
	c.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		c.cmd.Process.Kill()
		return fmt.Errorf("benchmark: child broker %d did not stop in 20 s: killed", c.cmd.Process.Pid)
	}
}

// startChild starts t's broker in a child process (Config.ChildBroker).
func (t *brokerTarget) startChild() error {
	t.dir = t.cfg.DataDir
	if t.dir == "" {
		d, err := os.MkdirTemp("", "apogee-bench-broker-")
		if err != nil {
			return err
		}
		t.dir, t.removeDir = d, true
	}
	ch, err := startChildBroker(t.cfg, t.dir)
	if err != nil {
		return err
	}
	t.child, t.addr = ch, ch.addr
	fmt.Fprintf(t.cfg.Out, "child broker (pid %d) on %s (data %s, flush %s)\n", ch.cmd.Process.Pid, t.addr, t.dir, t.cfg.Flush)
	return nil
}

func (t *brokerTarget) brokerPID() int {
	if t.child == nil {
		return 0
	}
	return t.child.cmd.Process.Pid
}
