package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/internal/wait"
)

// TestTruncationKeepsARangeFileCleanedUp: a replica's truncation keeps the
// bytes it cut in one file under commitlog/truncated/, says so in a WARN
// naming the file and the size kept, and the store's cleanup task removes
// the file once it is older than TruncatedRetention; a truncation cutting
// more than TruncatedMaxBytes keeps nothing and its WARN says so.
func TestTruncationKeepsARangeFileCleanedUp(t *testing.T) {
	var logs logBuffer
	ro := testOptions(t.TempDir())
	ro.Replica = true
	ro.Logger = logs.logger(t)
	src := openStore(t, testOptions(t.TempDir()))
	defer src.Close()
	res := putMessages(t, src, 0, 300)
	replica := openStore(t, ro)
	copyLogTo(t, src, replica, src.WrittenOffset())
	waitDispatched(t, replica)
	before := logBytes(t, replica)

	off := res[200].CommitLogOffset
	tr, err := replica.TruncateReplica(off)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Aside == "" || tr.KeptBytes <= tr.Bytes {
		t.Fatalf("truncation %+v", tr)
	}
	c, cut, err := commitlog.ReadTruncated(nil, tr.Aside)
	if err != nil || c.Start != off || string(cut) != string(before[off:]) {
		t.Fatalf("kept %+v, %d bytes, %v", c, len(cut), err)
	}
	if l := logs.String(); !strings.Contains(l, "keptIn="+tr.Aside) || !strings.Contains(l, fmt.Sprintf("keptBytes=%d", tr.KeptBytes)) {
		t.Fatalf("the WARN does not name the file and its size:\n%s", l)
	}
	// Reopened with a retention of 1 ms, the cleanup task removes it.
	replica.Close()
	ro.TruncatedRetention = time.Millisecond
	ro.CleanInterval = 20 * time.Millisecond
	replica = openStore(t, ro)
	wait.For(t, "the cleanup removes the expired file", func() error {
		if _, err := os.Stat(tr.Aside); !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s still there (%v)", tr.Aside, err)
		}
		if !strings.Contains(logs.String(), "path="+tr.Aside) {
			return fmt.Errorf("the removal is not logged")
		}
		return nil
	})
	replica.Close()

	// A limit below the cut: nothing kept, and the WARN says so.
	ro.TruncatedMaxBytes = 1000
	ro.CleanInterval = -1
	replica = openStore(t, ro)
	defer replica.Close()
	tr, err = replica.TruncateReplica(res[100].CommitLogOffset)
	if err != nil || tr.Aside != "" || tr.KeptBytes != 0 {
		t.Fatalf("%+v, %v", tr, err)
	}
	if !strings.Contains(logs.String(), "the bytes cut are not kept") {
		t.Fatalf("no WARN for a truncation keeping nothing:\n%s", logs.String())
	}
	if m, _ := filepath.Glob(filepath.Join(ro.Dir, "commitlog", commitlog.TruncatedDir, "*")); len(m) != 0 {
		t.Fatalf("kept %v", m)
	}
}
