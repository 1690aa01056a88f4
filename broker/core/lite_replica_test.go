package core

import (
	"fmt"
	"testing"
)

// followLite runs a slave's lite-offset sync as the front end does (a
// page of at most limit at a time) and returns how many pages it took and
// the offsets applied.
func followLite(tb testing.TB, master, slave *Core, epoch *int64, since *uint64, limit int) (pages, applied int) {
	tb.Helper()
	for {
		p := master.Replication().LiteConsumerOffsets(*epoch, *since, limit)
		pages++
		if len(p.Offsets) > limit {
			tb.Fatalf("a page of %d offsets, limit %d", len(p.Offsets), limit)
		}
		if p.Epoch != *epoch {
			*epoch, *since = p.Epoch, 0
		}
		for i := 1; i < len(p.Offsets); i++ {
			if p.Offsets[i].Seq <= p.Offsets[i-1].Seq {
				tb.Fatalf("page not in change order: %+v", p.Offsets)
			}
		}
		n, err := slave.Replication().SyncLiteConsumerOffsets(p.Offsets)
		if err != nil {
			tb.Fatal(err)
		}
		applied += n
		if len(p.Offsets) > 0 {
			*since = p.Offsets[len(p.Offsets)-1].Seq
		}
		if !p.More || len(p.Offsets) == 0 {
			return pages, applied
		}
	}
}

// TestSlaveFollowsLiteOffsets: lite consumer offsets (the store's lite
// index, not the offset table) reach a slave in bounded pages of what
// changed since its last sync, the master's value replacing the slave's;
// a master ignores them; a promoted slave keeps and serves them under its
// own epoch.
func TestSlaveFollowsLiteOffsets(t *testing.T) {
	master := newTestCore(t, nil)
	slave := newSlaveCore(t, nil)
	ms, ss := master.Store(), slave.Store()
	type key struct{ group, lite string }
	want := map[key]int64{}
	for g := range 2 {
		for l := range 25 {
			k := key{fmt.Sprintf("g%d", g), fmt.Sprintf("session-%d", l)}
			want[k] = int64(g*100 + l)
			if err := ms.CommitLiteOffset(k.group, "chat", k.lite, want[k]); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A value the slave holds that the master changes: the master's wins.
	if err := ss.CommitLiteOffset("g0", "chat", "session-0", 77); err != nil {
		t.Fatal(err)
	}

	var epoch int64
	var since uint64
	pages, applied := followLite(t, master, slave, &epoch, &since, 7)
	if pages != 8 || applied != 50 {
		t.Fatalf("first sync: %d pages, %d applied; want 8 pages (50 offsets by 7), 50 applied", pages, applied)
	}
	for k, off := range want {
		if got, ok := ss.LiteOffset(k.group, "chat", k.lite); !ok || got != off {
			t.Fatalf("slave's offset of %v = %d, %v; want %d", k, got, ok, off)
		}
	}

	// Nothing changed: one empty page.
	if p := master.Replication().LiteConsumerOffsets(epoch, since, 7); len(p.Offsets) != 0 || p.More {
		t.Fatalf("sync without changes: %d offsets, more %v", len(p.Offsets), p.More)
	}

	// Three changes (one of them twice, one back to the same value: not a
	// change): only they travel.
	for _, c := range []struct {
		k   key
		off int64
	}{{key{"g1", "session-3"}, 500}, {key{"g0", "session-9"}, 600}, {key{"g1", "session-3"}, 501}, {key{"g0", "session-1"}, 1}, {key{"g0", "session-24"}, 700}} {
		if err := ms.CommitLiteOffset(c.k.group, "chat", c.k.lite, c.off); err != nil {
			t.Fatal(err)
		}
		want[c.k] = c.off
	}
	p := master.Replication().LiteConsumerOffsets(epoch, since, 7)
	if len(p.Offsets) != 3 || p.More {
		t.Fatalf("after 3 changes: %+v", p)
	}
	if _, applied = followLite(t, master, slave, &epoch, &since, 7); applied != 3 {
		t.Fatalf("applied %d after 3 changes", applied)
	}
	for k, off := range want {
		if got, _ := ss.LiteOffset(k.group, "chat", k.lite); got != off {
			t.Fatalf("slave's offset of %v = %d; want %d", k, got, off)
		}
	}

	// A master does not follow.
	if n, err := master.Replication().SyncLiteConsumerOffsets(p.Offsets[:1]); n != 0 || err != nil {
		t.Fatalf("a master applied %d (%v)", n, err)
	}

	// Promoted, the slave keeps them and serves them from 0 under its own
	// epoch to a follower that knew the old master's.
	if err := slave.Replication().SetRole(RoleAsyncMaster); err != nil {
		t.Fatal(err)
	}
	for k, off := range want {
		if got, ok := ss.LiteOffset(k.group, "chat", k.lite); !ok || got != off {
			t.Fatalf("promoted slave's offset of %v = %d, %v; want %d", k, got, ok, off)
		}
	}
	follower := newSlaveCore(t, nil)
	pages, applied = followLite(t, slave, follower, &epoch, &since, LiteOffsetPageMax)
	if pages != 1 || applied != 50 || epoch != ss.LiteOffsetEpoch() {
		t.Fatalf("following the promoted slave: %d pages, %d applied, epoch %d (its %d)", pages, applied, epoch, ss.LiteOffsetEpoch())
	}
}
