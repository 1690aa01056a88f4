package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// idle are silent connections; closed counts those the server closed.
type idle struct {
	mu     sync.Mutex
	conns  []net.Conn
	closed atomic.Int64
	wg     sync.WaitGroup
}

func (ic *idle) open(t *testing.T, src, addr string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	ic.mu.Lock()
	ic.conns = append(ic.conns, c)
	ic.mu.Unlock()
	ic.wg.Add(1)
	go func() {
		defer ic.wg.Done()
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil && !errors.Is(err, net.ErrClosed) {
			ic.closed.Add(1)
		}
	}()
}

func (ic *idle) close() {
	ic.mu.Lock()
	for _, c := range ic.conns {
		c.Close()
	}
	ic.mu.Unlock()
	ic.wg.Wait()
}

var boundLine = regexp.MustCompile(`rlimit_nofile=256 .*connections_bound=(\d+)`)

// The standalone name server bounds its connections per source and below
// RLIMIT_NOFILE (lowered to 256 on the process): idle connections past
// either bound are closed at once, a client connected before keeps being
// served, and nothing runs out of descriptors.
func TestConnectionLimits(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("prlimit, 127.0.0.x source addresses")
	}
	pp := proctest.New(t, "apogee-namesrv", binPath)
	if err := pp.Launch("--listen", "127.0.0.1:0", "--data-dir", t.TempDir(), "--max-connections-per-source", "10"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Prlimit(pp.PID(), unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 256, Max: 256}, nil); err != nil {
		pp.Kill()
		t.Skipf("prlimit: %v", err)
	}
	pp.AwaitReady()
	addr := pp.Ready.Listen
	good := dial(t, addr)
	var req protocol.Command
	req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
	(&protocol.GetRouteInfoRequest{Topic: []byte("Nowhere")}).Encode(&req.Ext)
	served := func(when string) {
		t.Helper()
		if resp := invoke(t, good, &req); resp.Code != protocol.RespTopicNotExist {
			t.Fatalf("%s: code %d %s", when, resp.Code, resp.Remark)
		}
	}
	served("before")
	m := wait.Value(t, "the bound for RLIMIT_NOFILE 256 logged", func() []string {
		return boundLine.FindStringSubmatch(pp.RunLog())
	}, func(m []string) bool { return m != nil })
	bound, _ := strconv.Atoi(m[1])
	if bound < 60 || bound > 192 {
		t.Fatalf("bound %d for a limit of 256", bound)
	}

	attack := &idle{}
	t.Cleanup(attack.close)
	for range 15 {
		attack.open(t, "127.0.0.2", addr)
	}
	wait.Until(t, "5 of one source's connections closed", func() bool { return attack.closed.Load() >= 5 })
	served("after one source")
	opened := 15
	for s := 10; opened < bound+60; s++ {
		for i := 0; i < 10 && opened < bound+60; i++ {
			attack.open(t, fmt.Sprintf("127.0.0.%d", s), addr)
			opened++
		}
	}
	// bound - 1 (the client's) are kept; 10 of one source's 15.
	want := int64(opened - (bound - 1))
	wait.Until(t, "the connections past the bound closed", func() bool { return attack.closed.Load() >= want })
	served("at the bound")
	if n := attack.closed.Load(); n != want {
		t.Errorf("%d of %d closed, want %d", n, opened, want)
	}
	attack.close()
	if err := pp.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	logs := pp.RunLog()
	if strings.Contains(strings.ToLower(logs), "too many open files") {
		t.Error("the log says too many open files")
	}
	for _, want := range []string{"too many connections from one source", "too many connections for the file descriptors"} {
		if n := strings.Count(logs, want); n != 1 {
			t.Errorf("%d lines with %q, want 1", n, want)
		}
	}
}

// A key given twice in namesrv.properties: the last line wins, with a WARN
// naming both lines.
func TestRepeatedKeyNoted(t *testing.T) {
	path := t.TempDir() + "/namesrv.properties"
	if err := os.WriteFile(path, []byte("listenPort=9877\nlistenPort=9878\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := parseConfig([]string{"-c", path})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(c.listen, ":9878") || len(c.notes) != 1 ||
		fmt.Sprint(c.notes[0].msg, c.notes[0].attrs) != "namesrv.properties: a key given twice; the last line wins (as Java's Properties): remove the other line[key listenPort line 1 value 9877 winning_line 2 winning_value 9878]" {
		t.Fatalf("listen %q, notes %+v", c.listen, c.notes)
	}
}
