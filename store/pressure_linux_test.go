package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/internal/vfs/errorfs"
	"github.com/apogeemq/apogee/internal/wait"
	"golang.org/x/sys/unix"
)

// Disk pressure must be visible: one WARN line per change of state, never one
// per message, and counters in Stats. TestDiskFullRefusalsAreLoggedOncePerChange
// runs the store on a small tmpfs and fills it (a real ENOSPC; skipped where
// mounting is not permitted); the others report a full disk through the
// file-system seam, and run anywhere.

func smallDisk(t *testing.T, size string) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	return mnt
}

// fillDisk writes a ballast file until the file system is full and returns
// its path.
func fillDisk(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ballast")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, unix.ENOSPC) {
				t.Fatal(err)
			}
			return path
		}
	}
}

func TestDiskFullRefusalsAreLoggedOncePerChange(t *testing.T) {
	mnt := smallDisk(t, "2m")
	var logs logBuffer
	o := testOptions(filepath.Join(mnt, "store"))
	o.SegmentSize = 256 << 10
	o.MaxMessageSize = 8 << 10
	o.Logger = logs.logger(t)
	s := openStore(t, o)
	defer s.Close()
	ballast := fillDisk(t, mnt)
	refused := 0
	for i := 0; i < 200 && refused < 50; i++ {
		_, err := s.Put(msg("T", 0, strings.Repeat("x", 4000)))
		if errors.Is(err, commitlog.ErrDiskFull) {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if refused < 50 {
		t.Fatalf("only %d puts refused on a full disk", refused)
	}
	if n := strings.Count(logs.String(), "refusing writes"); n != 1 {
		t.Fatalf("%d 'refusing writes' lines for %d refusals, want 1:\n%s", n, refused, logs.String())
	}
	if st := s.Stats(); !st.DiskFull || st.DiskFullRefusals != int64(refused) {
		t.Fatalf("stats: full %v, %d refusals; want true, %d", st.DiskFull, st.DiskFullRefusals, refused)
	}
	if err := os.Remove(ballast); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		if _, err := s.Put(msg("T", 0, "after")); err != nil {
			t.Fatalf("put after space returned: %v", err)
		}
	}
	if n := strings.Count(logs.String(), "accepting writes again"); n != 1 || s.Stats().DiskFull {
		t.Fatalf("%d 'accepting writes again' lines, want 1:\n%s", n, logs.String())
	}
}

func TestPressureDeletionIsLogged(t *testing.T) {
	var logs logBuffer
	fsys := errorfs.New(vfs.Default)
	fsys.SetDiskUsage(func(string) (float64, error) { return 0.9, nil })
	o := testOptions(t.TempDir())
	o.FS = fsys
	o.SegmentSize = 256 << 10
	o.DiskUsageRatio = 0.3
	o.Logger = logs.logger(t)
	s := openStore(t, o)
	defer s.Close()
	var puts int64
	for s.log.WrittenOffset() < 4*o.SegmentSize {
		if _, err := s.Put(msg("T", 0, strings.Repeat("x", 4000))); err != nil {
			t.Fatal(err)
		}
		puts++
	}
	// Only dispatched and synced segments may go.
	waitVisible(t, s, "T", 0, puts)
	if err := s.Log().Flush(); err != nil {
		t.Fatal(err)
	}
	n, err := s.Clean()
	if err != nil || n == 0 {
		t.Fatalf("Clean deleted %d segments (%v), want some for disk pressure", n, err)
	}
	if got := strings.Count(logs.String(), "deleted before its retention time"); got != n {
		t.Fatalf("%d pressure-deletion lines for %d segments:\n%s", got, n, logs.String())
	}
	if !strings.Contains(logs.String(), "from=0 to=262144") {
		t.Fatalf("the first deleted range is not named:\n%s", logs.String())
	}
	if st := s.Stats(); st.PressureDeletes != int64(n) {
		t.Fatalf("%d pressure deletes counted, want %d", st.PressureDeletes, n)
	}
}

func TestIndexUnavailableIsLoggedOncePerChange(t *testing.T) {
	var logs logBuffer
	fsys := errorfs.New(vfs.Default)
	var full atomic.Bool // no space for a new index file
	fsys.FailWhen(func(op errorfs.Op, path string) unix.Errno {
		if full.Load() && op == errorfs.OpAllocate && strings.Contains(path, string(filepath.Separator)+"index"+string(filepath.Separator)) {
			return unix.ENOSPC
		}
		return 0
	})
	o := testOptions(t.TempDir())
	o.FS = fsys
	o.SegmentSize = 256 << 10
	o.IndexSlots, o.IndexMaxEntries = 64, 8 // a new index file every 7 keys
	o.Logger = logs.logger(t)
	s := openStore(t, o)
	defer s.Close()
	if _, err := s.Put(msg("T", 0, "first", "KEYS", "k0")); err != nil {
		t.Fatal(err)
	}
	waitVisible(t, s, "T", 0, 1)
	full.Store(true)
	for i := 1; i <= 40; i++ {
		if _, err := s.Put(msg("T", 0, "m", "KEYS", "k")); err != nil {
			t.Fatal(err)
		}
	}
	waitVisible(t, s, "T", 0, 41)
	if n := strings.Count(logs.String(), "the index is unavailable"); n != 1 {
		t.Fatalf("%d 'index is unavailable' lines, want 1:\n%s", n, logs.String())
	}
	if st := s.Stats(); st.Unindexed == 0 {
		t.Fatal("no record counted as unindexed")
	}
	full.Store(false)
	// Puts go on; one of them finds the index writable again.
	wait.For(t, "the index back", func() error {
		if strings.Contains(logs.String(), "the index is back") {
			return nil
		}
		if _, err := s.Put(msg("T", 0, "m", "KEYS", "later")); err != nil {
			t.Fatal(err)
		}
		return errors.New("no 'index is back' line yet")
	})
	if n := strings.Count(logs.String(), "the index is back"); n != 1 {
		t.Fatalf("%d 'index is back' lines:\n%s", n, logs.String())
	}
}
