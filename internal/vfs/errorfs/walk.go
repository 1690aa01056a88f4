package errorfs

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/vfs"
)

// Walk runs a workload once per file operation it makes, failing that one
// operation each time.
//
// run performs the workload through fsys in dir (a fresh empty directory,
// in memory (/dev/shm) where the machine has it: the walk tests how the
// code handles failures, not the disk, and an fsync there costs nothing),
// checks everything that must hold after the failure, and returns; it runs
// in a subtest of its own named after the point (such as "once/msync#3").
// Walk first runs it with nothing armed, counting the operations of each
// kind; then, for every mode and every kind the workload used, it arms
// n = 1, 2, ... until n is past that count and a run ended without reaching
// the point (background goroutines make the count vary a little from run to
// run). It returns the number of runs in which the armed point was reached.
func Walk(t *testing.T, inner vfs.FS, modes []Mode, run func(t *testing.T, fsys *FS, dir string)) int {
	t.Helper()
	base := scratch(t)
	newDir := func(t *testing.T) string {
		d, err := os.MkdirTemp(base, "run-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	// The dry run is not a subtest, so that -run can pick single points.
	fsys := New(inner)
	run(t, fsys, newDir(t))
	dry := fsys.Counts()
	if t.Failed() {
		return 0
	}
	fired := 0
	var missed []string
	for _, mode := range modes {
		for op := Op(0); op < NumOps; op++ {
			if dry[op] == 0 {
				continue
			}
			limit := 2*dry[op] + 16 // a workload that keeps retrying is cut off here
			for n := int64(1); n <= limit; n++ {
				p := Point{Op: op, N: n, Mode: mode}
				reached, ran := false, false
				t.Run(p.String(), func(t *testing.T) {
					ran = true
					fsys := New(inner)
					fsys.Arm(p)
					fsys.Trace()
					defer func() {
						if t.Failed() {
							t.Logf("operations up to the failure and after it:\n%s", traceAround(fsys.Traced(), p, 40))
						}
					}()
					run(t, fsys, newDir(t))
					reached = fsys.Fired() != nil
				})
				if t.Failed() {
					return fired
				}
				switch {
				case !ran: // not selected by -run
				case reached:
					fired++
				case n <= dry[op]:
					missed = append(missed, p.String())
				default:
					n = limit // past the dry run's count and not reached: the kind is done
				}
			}
		}
	}
	if len(missed) > 0 {
		t.Logf("points the dry run reached but their run did not (timing): %s", strings.Join(missed, " "))
	}
	t.Logf("failed %d operations one at a time (dry run counts: %s)", fired, formatCounts(dry))
	return fired
}

// scratch returns a directory for the runs: under /dev/shm when it is a
// writable memory file system, under t.TempDir() otherwise.
func scratch(t *testing.T) string {
	if d, err := os.MkdirTemp("/dev/shm", "errorfs-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	return t.TempDir()
}

// traceAround returns the traced operations from ctx before the point's
// to ctx after it.
func traceAround(trace []string, p Point, ctx int) string {
	at := len(trace)
	prefix := p.Op.String() + "#" + strconv.FormatInt(p.N, 10) + " "
	for i, op := range trace {
		if strings.HasPrefix(op, prefix) {
			at = i
			break
		}
	}
	from, to := max(0, at-ctx), min(len(trace), at+ctx)
	var b strings.Builder
	for i := from; i < to; i++ {
		mark := "  "
		if i == at {
			mark = "=>"
		}
		b.WriteString(mark + " " + trace[i] + "\n")
	}
	return b.String()
}

func formatCounts(c [NumOps]int64) string {
	var b strings.Builder
	for op := Op(0); op < NumOps; op++ {
		if c[op] > 0 {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(op.String())
			b.WriteByte('=')
			b.WriteString(strconv.FormatInt(c[op], 10))
		}
	}
	return b.String()
}

// CheckGoroutines fails t unless the number of goroutines settles at or
// below n within five seconds (what the code under test started must have
// ended once it was closed), printing every goroutine's stack if not.
func CheckGoroutines(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("%d goroutines left, want at most %d:\n%s", runtime.NumGoroutine(), n, buf)
		}
		time.Sleep(time.Millisecond)
	}
}
