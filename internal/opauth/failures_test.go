package opauth

import (
	"net/netip"
	"testing"
	"time"
)

// TestFailedLoginsBounded: failed logins are counted per source up to
// MaxSources sources; beyond, new sources share one count, so guessing
// from many addresses is limited too and the map stays bounded; a window
// later a source may try again.
func TestFailedLoginsBounded(t *testing.T) {
	f := NewFailures()
	now := time.Unix(1_000_000, 0)
	one := netip.MustParseAddr("192.0.2.1")
	for range MaxFailures {
		if b, _ := f.Blocked(one, now); b {
			t.Fatal("blocked before its 10th failure")
		}
		f.Fail(one, now)
	}
	if b, until := f.Blocked(one, now); !b || !until.Equal(now.Add(Window)) {
		t.Fatalf("after 10 failures: blocked %v until %v", b, until)
	}
	if b, _ := f.Blocked(one, now.Add(Window)); b {
		t.Fatal("still blocked after the window")
	}
	// Fill the map with other sources, then fail from new ones.
	for i := range MaxSources {
		f.Fail(netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}), now)
	}
	for i := range MaxFailures {
		f.Fail(netip.AddrFrom4([4]byte{172, 16, 0, byte(i)}), now)
	}
	if n := f.sources(); n > MaxSources+1 {
		t.Fatalf("%d sources held, bound %d", n, MaxSources+1)
	}
	if b, _ := f.Blocked(netip.MustParseAddr("172.16.1.1"), now); !b {
		t.Fatal("a new source is not limited by the shared count while the map is full")
	}
}
