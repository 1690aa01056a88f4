package litequeue

import (
	"fmt"
	"testing"
)

// TestOffsetsSince: changes come in change order, a page at a time, each
// offset once at its latest value; an unchanged commit takes no number; a
// deleted lite topic's offsets are gone; a reopened index (a new run) has
// another epoch and numbers its journaled offsets again.
func TestOffsetsSince(t *testing.T) {
	dir := t.TempDir()
	x, _ := openT(t, dir)
	for i := range 10 {
		if err := x.CommitOffset("g", "p", fmt.Sprintf("l%d", i), int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	var all []LiteOffset
	var since uint64
	pages := 0
	for {
		page, more := x.OffsetsSince(since, 3, nil)
		pages++
		all = append(all, page...)
		if len(page) > 0 {
			since = page[len(page)-1].Seq
		}
		if !more {
			break
		}
	}
	if pages != 4 || len(all) != 10 {
		t.Fatalf("%d pages, %d offsets; want 4, 10", pages, len(all))
	}
	for i, o := range all {
		if o.Lite != fmt.Sprintf("l%d", i) || o.Offset != int64(i) || (i > 0 && o.Seq <= all[i-1].Seq) {
			t.Fatalf("offset %d: %+v", i, o)
		}
	}
	if page, more := x.OffsetsSince(since, 3, nil); len(page) != 0 || more {
		t.Fatalf("nothing changed: %+v, more %v", page, more)
	}
	// l1 twice, l2 to the same value (no change), l3 once.
	for _, c := range []struct {
		lite string
		off  int64
	}{{"l1", 10}, {"l2", 2}, {"l3", 30}, {"l1", 11}} {
		if err := x.CommitOffset("g", "p", c.lite, c.off); err != nil {
			t.Fatal(err)
		}
	}
	page, _ := x.OffsetsSince(since, 100, nil)
	if len(page) != 2 || page[0].Lite != "l3" || page[1].Lite != "l1" || page[1].Offset != 11 {
		t.Fatalf("after changes: %+v", page)
	}
	if _, err := x.Delete("p", "l3"); err != nil {
		t.Fatal(err)
	}
	if page, _ := x.OffsetsSince(since, 100, nil); len(page) != 1 || page[0].Lite != "l1" {
		t.Fatalf("after deleting l3: %+v", page)
	}
	epoch := x.OffsetEpoch()
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	y, _ := openT(t, dir)
	defer y.Close()
	if y.OffsetEpoch() == epoch {
		t.Fatal("a reopened index kept its epoch")
	}
	if page, more := y.OffsetsSince(0, 100, nil); len(page) != 9 || more {
		t.Fatalf("reopened: %d offsets, more %v; want the 9 journaled", len(page), more)
	}
}
