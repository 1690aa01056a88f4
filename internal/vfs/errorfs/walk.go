package errorfs

import (
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
// run performs the workload through fsys in dir (a fresh empty directory),
// checks everything that must hold after the failure, and returns; it runs
// in a subtest of its own named after the point (such as "once/msync#3").
// Walk first runs it with nothing armed, counting the operations of each
// kind; then, for every mode and every kind the workload used, it arms
// n = 1, 2, ... until n is past that count and a run ended without reaching
// the point (background goroutines make the count vary a little from run to
// run). It returns the number of runs in which the armed point was reached.
func Walk(t *testing.T, inner vfs.FS, modes []Mode, run func(t *testing.T, fsys *FS, dir string)) int {
	t.Helper()
	var dry [NumOps]int64
	t.Run("dry", func(t *testing.T) {
		fsys := New(inner)
		run(t, fsys, t.TempDir())
		dry = fsys.Counts()
	})
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
				reached := false
				t.Run(p.String(), func(t *testing.T) {
					fsys := New(inner)
					fsys.Arm(p)
					run(t, fsys, t.TempDir())
					reached = fsys.Fired() != nil
				})
				if t.Failed() {
					return fired
				}
				if reached {
					fired++
				} else if n <= dry[op] {
					missed = append(missed, p.String())
				} else {
					break
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
