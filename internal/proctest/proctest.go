// Package proctest runs the processes a test starts (apogee-broker,
// apogee-namesrv, apogee-controller) the one way the repository's tests do:
// every listener on a port the process chose itself, read from its
// --ready-file (package readyfile) instead of guessed or derived; its
// standard error in a file under the test's temporary directory, printed
// when the test fails (package testlog); starts and stops that wait for
// what they need (package wait), never for a fixed time.
//
// # Invariants
//
//   - Run returns once the process has written its ready file (one naming
//     its pid: a file an earlier process left is not its), so every
//     listener it has is open and Ready names them; a process that exits
//     first fails the test at once with its log.
//   - Each run gets a ready file of its own, so a restart never reads the
//     previous run's addresses by mistake.
//   - Every run's standard error goes to one file (NAME.log), each run
//     under a header line naming its arguments; standard output goes to
//     one file per run (its first line is the command's start-up line).
//   - A process still running when the test ends is killed, and the log is
//     printed if the test failed, before the temporary directory goes.
//   - Stop's wait for the exit is bounded by wait.DefaultTimeout only: a
//     loaded machine slows a graceful stop down, and the bound is there to
//     end a hung test, not to time the stop.
package proctest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/readyfile"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
)

// Proc is one process a test runs, and its restarts (each a run). Its
// methods are for the test's goroutine.
type Proc struct {
	t       testing.TB
	name    string
	bin     string
	dir     string
	logPath string

	// Env, when set before a run, is the process's environment (as
	// exec.Cmd.Env); otherwise the test's.
	Env []string
	// Ready is what the current (or last) run's ready file says.
	Ready readyfile.File

	run        int
	args       []string
	cmd        *exec.Cmd
	stdoutPath string
	logStart   int64 // the log's size when this run started
	done       chan struct{}
	err        error // the run's exit status, set before done closes
}

// New prepares a process named name (used in its file names and in
// failures) running bin; Run starts it. The process is killed when the
// test ends if it still runs then.
func New(t testing.TB, name, bin string) *Proc {
	t.Helper()
	p := &Proc{t: t, name: name, bin: bin, dir: t.TempDir()}
	p.logPath = filepath.Join(p.dir, name+".log")
	t.Cleanup(func() {
		if p.Running() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			testlog.Print(t, p.logPath)
		}
	})
	return p
}

// Start is New and Run.
func Start(t testing.TB, name, bin string, args ...string) *Proc {
	t.Helper()
	p := New(t, name, bin)
	p.Run(args...)
	return p
}

// Run starts a run of the process with args and --ready-file, and waits
// for the ready file. It fails the test if the process exits first.
func (p *Proc) Run(args ...string) {
	p.t.Helper()
	if err := p.Launch(args...); err != nil {
		p.t.Fatal(err)
	}
	p.AwaitReady()
}

// Launch starts a run without waiting for it to be ready (AwaitReady
// does), for a test that watches the start itself.
func (p *Proc) Launch(args ...string) error {
	p.t.Helper()
	if p.Running() {
		return fmt.Errorf("proctest: %s is running already", p.name)
	}
	p.run++
	p.args = slices.Clone(args)
	ready := p.readyPath()
	p.stdoutPath = filepath.Join(p.dir, fmt.Sprintf("%s.run%d.stdout", p.name, p.run))
	stdout, err := os.Create(p.stdoutPath)
	if err != nil {
		return fmt.Errorf("proctest: %w", err)
	}
	defer stdout.Close()
	log, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("proctest: %w", err)
	}
	defer log.Close()
	fmt.Fprintf(log, "--- %s run %d: %s %s\n", p.name, p.run, filepath.Base(p.bin), strings.Join(args, " "))
	if st, err := log.Stat(); err == nil {
		p.logStart = st.Size()
	}
	cmd := exec.Command(p.bin, append(slices.Clone(args), "--ready-file", ready)...)
	cmd.Stdout = stdout
	cmd.Stderr = log
	cmd.Env = p.Env
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("proctest: start %s: %w", p.name, err)
	}
	p.cmd = cmd
	p.Ready = readyfile.File{}
	done := make(chan struct{})
	p.done = done
	go func() {
		p.err = cmd.Wait()
		close(done)
	}()
	return nil
}

// ReadyPath is the current (or last) run's --ready-file; before the first
// run, the one the first run will be given.
func (p *Proc) ReadyPath() string { return p.readyPath() }

func (p *Proc) readyPath() string {
	return filepath.Join(p.dir, fmt.Sprintf("%s.run%d.ready.json", p.name, max(p.run, 1)))
}

// AwaitReady waits for the current run's ready file and sets Ready. It
// fails the test, with the run's log, if the process exits first.
func (p *Proc) AwaitReady() {
	p.t.Helper()
	path := p.readyPath()
	wait.For(p.t, p.name+"'s ready file", func() error {
		select {
		case <-p.done:
			p.t.Fatalf("%s exited before it was ready: %v\n%s", p.name, p.err, p.RunLog())
		default:
		}
		f, err := readyfile.Read(path)
		if err != nil {
			return err
		}
		if f.PID != p.cmd.Process.Pid {
			// A file an earlier process left: this one removes it first.
			return fmt.Errorf("%s is of pid %d, not of this run's %d", path, f.PID, p.cmd.Process.Pid)
		}
		p.Ready = f
		return nil
	})
}

// Running reports whether the current run has not exited.
func (p *Proc) Running() bool {
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Done is closed when the current run exits.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is the current run's exit status once Done is closed (nil: 0).
func (p *Proc) Err() error {
	<-p.done
	return p.err
}

// Args are the current run's arguments (without --ready-file).
func (p *Proc) Args() []string { return slices.Clone(p.args) }

// PID is the current run's process id.
func (p *Proc) PID() int { return p.cmd.Process.Pid }

// Signal sends sig to the current run.
func (p *Proc) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Stop sends sig to the current run and waits for it to exit; it returns
// the exit status (nil: 0). A process still running wait.DefaultTimeout
// later is killed and the test fails.
func (p *Proc) Stop(sig os.Signal) error {
	p.t.Helper()
	if !p.Running() {
		return p.err
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(wait.DefaultTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Errorf("%s did not exit within %v of %v; killed", p.name, wait.DefaultTimeout, sig)
	}
	return p.err
}

// StopClean stops the run with SIGTERM and fails the test unless it exits
// with status 0.
func (p *Proc) StopClean() {
	p.t.Helper()
	if err := p.Stop(syscall.SIGTERM); err != nil {
		p.t.Errorf("%s exit after SIGTERM: %v", p.name, err)
	}
}

// Kill sends SIGKILL and waits for the run to go.
func (p *Proc) Kill() {
	p.t.Helper()
	_ = p.Stop(syscall.SIGKILL)
}

// ExitCode is the current run's exit code once it exited (-1 if a signal
// ended it).
func (p *Proc) ExitCode() int {
	<-p.done
	var ee *exec.ExitError
	if p.err == nil {
		return 0
	}
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// Line is the current run's first line of standard output (the command's
// start-up line); "" if it printed none yet.
func (p *Proc) Line() string {
	f, err := os.Open(p.stdoutPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	r := bufio.NewReader(f)
	line, err := r.ReadString('\n')
	if err != nil {
		return "" // no complete line yet
	}
	return strings.TrimSuffix(line, "\n")
}

// Stdout is everything the current run wrote to standard output so far.
func (p *Proc) Stdout() string {
	b, _ := os.ReadFile(p.stdoutPath)
	return string(b)
}

// RunLog is what the current run has written to standard error so far.
func (p *Proc) RunLog() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(proctest: %v)", err)
	}
	if p.logStart <= int64(len(b)) {
		b = b[p.logStart:]
	}
	return string(b)
}

// Log is every run's standard error so far, each run under its header.
func (p *Proc) Log() string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(proctest: %v)", err)
	}
	return string(b)
}

// LogPath is the file every run's standard error goes to.
func (p *Proc) LogPath() string { return p.logPath }

// AwaitLog waits until the current run's standard error contains want and
// returns it.
func (p *Proc) AwaitLog(want string) string {
	p.t.Helper()
	var logs string
	wait.For(p.t, fmt.Sprintf("%s to log %q", p.name, want), func() error {
		if logs = p.RunLog(); strings.Contains(logs, want) {
			return nil
		}
		return errors.New("not logged yet")
	})
	return logs
}
