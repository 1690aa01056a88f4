package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/store"
)

func fillStore(t *testing.T, dir string) {
	t.Helper()
	s, _, err := store.Open(store.Options{Dir: dir, SegmentSize: 1 << 20, MaxMessageSize: 64 << 10, ConsumeQueueEntries: 1000, IndexSlots: 64, IndexMaxEntries: 1000, ScrubRate: -1})
	if err != nil {
		t.Fatal(err)
	}
	host := netip.MustParseAddrPort("127.0.0.1:1")
	for i := 0; i < 200; i++ {
		if _, err := s.Put(&store.Message{Topic: "T", QueueID: int32(i % 2), BornHost: host, Body: bytes.Repeat([]byte("x"), 300)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestStoreVerifyExitCodes(t *testing.T) {
	dir := t.TempDir()
	fillStore(t, dir)
	args := []string{"store", "verify", "--max-hash-slot-num", "64", "--max-index-num", "1000", "--json", dir}
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 {
		t.Fatalf("sound store: exit %d\n%s%s", code, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var doc struct {
		OK      bool  `json:"ok"`
		Records int64 `json:"records"`
		Queues  int   `json:"queues"`
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &doc); err != nil || !doc.OK || doc.Records != 200 || doc.Queues != 2 {
		t.Fatalf("JSON report %q (%v)", lines[len(lines)-1], err)
	}
	// Damage a record's body: exit 1 and the problem named.
	seg := filepath.Join(dir, "commitlog", "00000000000000000000")
	b, _ := os.ReadFile(seg)
	b[5000] ^= 0xFF
	os.WriteFile(seg, b, 0o644)
	out.Reset()
	if code := run(args, &out, &errb); code != 1 || !strings.Contains(out.String(), "CRC") {
		t.Fatalf("damaged store: exit %d\n%s", code, out.String())
	}
	// A directory in use: exit 2.
	s, _, err := store.Open(store.Options{Dir: t.TempDir(), ScrubRate: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	errb.Reset()
	if code := run([]string{"store", "verify", s.Dir()}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "in use") {
		t.Fatalf("store in use: exit %d: %s", code, errb.String())
	}
	if code := run([]string{"nonsense"}, &out, &errb); code != 2 {
		t.Fatalf("unknown command: exit %d", code)
	}
	_ = context.Background
}

func TestStoreDump(t *testing.T) {
	dir := t.TempDir()
	fillStore(t, dir)
	var out, errb bytes.Buffer
	// A segment, as text: every record, then the count.
	if code := run([]string{"store", "dump", "--segment", "00000000000000000000", "--count", "0", dir}, &out, &errb); code != 0 {
		t.Fatalf("dump segment: exit %d\n%s%s", code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "topic T queue 1 queueOffset 99") || !strings.HasSuffix(out.String(), "200 records, 0 bad\n") {
		t.Fatalf("dump segment:\n%s", out.String())
	}
	// A queue, as JSON lines: queue 1's entries from offset 98, each with
	// its record and tag code.
	out.Reset()
	if code := run([]string{"store", "dump", "--topic", "T", "--queue", "1", "--from", "98", "--json", "--body", "-1", dir}, &out, &errb); code != 0 {
		t.Fatalf("dump queue: exit %d\n%s%s", code, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("dump queue: %d lines\n%s", len(lines), out.String())
	}
	var rec struct {
		Topic       string `json:"topic"`
		QueueID     int32  `json:"queueId"`
		QueueOffset int64  `json:"queueOffset"`
		BodySize    int    `json:"bodySize"`
		Body        string `json:"body"`
		TagCode     *int64 `json:"tagCode"`
	}
	if err := json.Unmarshal([]byte(lines[1]), &rec); err != nil || rec.Topic != "T" || rec.QueueID != 1 || rec.QueueOffset != 99 ||
		rec.BodySize != 300 || len(rec.Body) != 300 || rec.TagCode == nil {
		t.Fatalf("dump queue record %s: %+v %v", lines[1], rec, err)
	}
	// A damaged record: printed as BAD, exit 1.
	seg := filepath.Join(dir, "commitlog", "00000000000000000000")
	b, _ := os.ReadFile(seg)
	b[5000] ^= 0xFF
	os.WriteFile(seg, b, 0o644)
	out.Reset()
	if code := run([]string{"store", "dump", "--segment", "0", "--count", "0", dir}, &out, &errb); code != 1 || !strings.Contains(out.String(), "BAD") {
		t.Fatalf("damaged segment: exit %d\n%s", code, out.String())
	}
	// Usage errors: exit 2.
	if code := run([]string{"store", "dump", dir}, &out, &errb); code != 2 {
		t.Fatalf("dump without --segment or --topic: exit %d", code)
	}
}
