package proctest

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/apogeemq/apogee/internal/readyfile"
)

// The test binary doubles as the child process: with childEnv set it is a
// tiny server that behaves as the commands do (a start line, a listener on
// :0, the ready file, a clean exit on SIGTERM), or one that exits at once.
const childEnv = "PROCTEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "serve":
		os.Exit(child())
	case "fail":
		fmt.Fprintln(os.Stderr, "child: listen 127.0.0.1:1: bind: address already in use")
		os.Exit(1)
	}
}

func child() int {
	ready := ""
	for i, a := range os.Args {
		if a == "--ready-file" && i+1 < len(os.Args) {
			ready = os.Args[i+1]
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer ln.Close()
	fmt.Printf("child listening on %s\n", ln.Addr())
	fmt.Fprintf(os.Stderr, "level=INFO msg=ready args=%q\n", strings.Join(os.Args[1:], " "))
	if err := readyfile.Write(ready, readyfile.File{Command: "child", PID: os.Getpid(), Listen: ln.Addr().String()}); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	<-sig
	readyfile.Remove(ready)
	fmt.Fprintln(os.Stderr, `level=INFO msg="stopped cleanly"`)
	return 0
}

func self(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func TestRunReadyRestartAndStop(t *testing.T) {
	p := New(t, "child", self(t))
	p.Env = append(os.Environ(), childEnv+"=serve")
	p.Run("--first")
	first := p.Ready
	if first.Command != "child" || first.PID != p.PID() || !strings.HasPrefix(first.Listen, "127.0.0.1:") {
		t.Fatalf("Ready %+v (pid %d)", first, p.PID())
	}
	if want := "child listening on " + first.Listen; p.Line() != want {
		t.Fatalf("Line %q, want %q", p.Line(), want)
	}
	if c, err := net.Dial("tcp", first.Listen); err != nil {
		t.Fatalf("the ready file's address does not answer: %v", err)
	} else {
		c.Close()
	}
	if err := p.Stop(syscall.SIGTERM); err != nil || p.ExitCode() != 0 {
		t.Fatalf("Stop: %v, exit code %d", err, p.ExitCode())
	}
	if !strings.Contains(p.RunLog(), "stopped cleanly") {
		t.Fatalf("run log:\n%s", p.RunLog())
	}

	p.Run("--second")
	if p.Ready.PID == first.PID || p.Ready.PID != p.PID() {
		t.Fatalf("the second run read the first's ready file: %+v", p.Ready)
	}
	if rl := p.RunLog(); strings.Contains(rl, "--first") || !strings.Contains(rl, "--second") {
		t.Fatalf("the second run's log holds the first's:\n%s", rl)
	}
	if l := p.Log(); !strings.Contains(l, "--- child run 1: ") || !strings.Contains(l, "--- child run 2: ") {
		t.Fatalf("the whole log lacks a run's header:\n%s", l)
	}
	p.AwaitLog("msg=ready")
	p.Kill()
	if p.Running() || p.ExitCode() != -1 {
		t.Fatalf("after Kill: running %v, exit code %d", p.Running(), p.ExitCode())
	}
}

// fatalT records a Fatalf and ends the goroutine, as testing.T does.
type fatalT struct {
	testing.TB
	msg string
}

func (f *fatalT) Helper() {}
func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestExitBeforeReadyFailsWithTheLog(t *testing.T) {
	ft := &fatalT{TB: t}
	p := New(t, "failing", self(t))
	p.t = ft
	p.Env = append(os.Environ(), childEnv+"=fail")
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Run()
	}()
	<-done
	if !strings.Contains(ft.msg, "failing exited before it was ready") || !strings.Contains(ft.msg, "address already in use") {
		t.Fatalf("failure %q", ft.msg)
	}
	if p.ExitCode() != 1 {
		t.Fatalf("exit code %d, want 1", p.ExitCode())
	}
}
