package store

import (
	"context"
	"crypto/sha256"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dirDigest hashes every file under dir (names and contents).
func dirDigest(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "lock" {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h.Write([]byte(path))
		h.Write(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(h.Sum(nil))
}

func TestVerifySoundStore(t *testing.T) {
	dir := t.TempDir()
	fillScrub(t, dir, 600)
	r, err := Verify(context.Background(), scrubOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	if !r.OK() || !r.CleanShutdown || !r.Log.Verified || r.Queues != 4 || r.Scrub.Records != 600 {
		t.Fatalf("report %+v", r)
	}
}

func TestVerifyFindsDamageAndChangesNothing(t *testing.T) {
	dir := t.TempDir()
	res := fillScrub(t, dir, 1000)
	// A body flipped in an old segment, a queue file cut, an index file cut.
	bad := res[10]
	patchAt(t, segmentPath(dir, bad.CommitLogOffset, 128<<10), bad.CommitLogOffset%(128<<10)+150, func(b []byte) { b[0] ^= 0x01 })
	if err := os.Truncate(queueFile(dir, 3), 1000); err != nil {
		t.Fatal(err)
	}
	idx, _ := filepath.Glob(filepath.Join(dir, "index", "*"))
	if len(idx) == 0 {
		t.Fatal("no index file")
	}
	if err := os.Truncate(idx[0], 100); err != nil {
		t.Fatal(err)
	}
	before := dirDigest(t, dir)
	r, err := Verify(context.Background(), scrubOptions(dir))
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(r.Problems, "\n")
	for _, want := range []string{"body CRC mismatch", "consume queue T/3", "index:"} {
		if !strings.Contains(all, want) {
			t.Errorf("problems lack %q:\n%s", want, all)
		}
	}
	if r.OK() || len(r.DamagedQueues) != 1 || len(r.Index) != 1 {
		t.Fatalf("report: %d damaged queues, index %q", len(r.DamagedQueues), r.Index)
	}
	if dirDigest(t, dir) != before {
		t.Fatal("Verify changed the directory")
	}
	// A restart repairs what Verify reported; Verify then finds nothing.
	s := openStore(t, scrubOptions(dir))
	if _, err := s.Scrub(context.Background()); err != nil {
		t.Fatal(err)
	}
	s.Close()
	r, err = Verify(context.Background(), scrubOptions(dir))
	if err != nil || !r.OK() {
		t.Fatalf("after a restart and a scrub: %v\n%s", err, strings.Join(r.Problems, "\n"))
	}
}

func TestVerifyRefusesAnOpenStore(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, scrubOptions(dir))
	defer s.Close()
	if _, err := Verify(context.Background(), scrubOptions(dir)); !errors.Is(err, ErrLocked) {
		t.Fatalf("Verify of an open store: %v, want ErrLocked", err)
	}
}
