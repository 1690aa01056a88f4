package message

import (
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestOffsetMsgID(t *testing.T) {
	tests := []struct {
		host netip.AddrPort
		off  int64
		want string
	}{
		{storeV4, 0, "7F00000100002A9F0000000000000000"}, // the reference example
		{netip.MustParseAddrPort("192.168.0.10:10911"), 0x0102030405060708, "C0A8000A00002A9F0102030405060708"},
		{mapped4, 1, "0A000001000004D20000000000000001"},
		{zeroHost, 5, "00000000000000000000000000000005"},
		{hostV6, 0x10, "20010DB8000000000000000000000001000004D20000000000000010"},
	}
	for _, tc := range tests {
		got := OffsetMsgID(tc.host, tc.off)
		if got != tc.want {
			t.Errorf("OffsetMsgID(%v, %d) = %s, want %s", tc.host, tc.off, got, tc.want)
		}
		if b := AppendOffsetMsgID([]byte("x"), tc.host, tc.off); string(b) != "x"+tc.want {
			t.Errorf("AppendOffsetMsgID = %s", b)
		}
		for _, s := range []string{got, strings.ToLower(got)} {
			host, off, err := ParseOffsetMsgID(s)
			if err != nil {
				t.Fatalf("Parse(%s): %v", s, err)
			}
			wantHost := tc.host
			if !wantHost.IsValid() {
				wantHost = netip.AddrPortFrom(netip.IPv4Unspecified(), 0)
			}
			wantHost = netip.AddrPortFrom(wantHost.Addr().Unmap(), wantHost.Port())
			if host != wantHost || off != tc.off {
				t.Errorf("Parse(%s) = %v %d, want %v %d", s, host, off, wantHost, tc.off)
			}
		}
	}
}

func TestParseOffsetMsgIDErrors(t *testing.T) {
	for _, s := range []string{
		"",
		"7F00000100002A9F000000000000000",   // 31
		"7F00000100002A9F00000000000000000", // 33
		"7F00000100002A9F000000000000000G",  // not hex
		"7F00000100012A9F0000000000000000",  // port 0x12A9F > 65535
		"C00002026012000000009465f9980001 ", // a UNIQ_KEY plus junk
	} {
		if _, _, err := ParseOffsetMsgID(s); !errors.Is(err, ErrBadMsgID) {
			t.Errorf("Parse(%q) err = %v", s, err)
		}
	}
}

func TestUniqIDLayout(t *testing.T) {
	g := NewUniqIDGenerator(netip.MustParseAddr("192.0.2.1"), 0x12345)
	loc := time.FixedZone("X", 3600)
	now := time.Date(2026, 1, 2, 0, 0, 0, 5, loc) // 1 day + 0 ms after the month start
	g.now = func() time.Time { return now }
	id := g.Next()
	if len(id) != 32 {
		t.Fatalf("len %d: %s", len(id), id)
	}
	// IP, pid truncated to int16, then 8 hex digits of random class-loader hash.
	if !strings.HasPrefix(id, "C00002012345") {
		t.Errorf("prefix: %s", id)
	}
	if want := "05265C00" + "0001"; id[20:] != want { // 86400000 ms, counter 1
		t.Errorf("suffix %s, want %s", id[20:], want)
	}
	if strings.ToUpper(id) != id {
		t.Errorf("not upper case: %s", id)
	}
	g6 := NewUniqIDGenerator(netip.MustParseAddr("2001:db8::1"), 1)
	if id := g6.Next(); len(id) != 56 || !strings.HasPrefix(id, "20010DB80000000000000000000000010001") {
		t.Errorf("ipv6 id %s", id)
	}
	if id := NewUniqIDGenerator(netip.Addr{}, 1).Next(); !strings.HasPrefix(id, "000000000001") || len(id) != 32 {
		t.Errorf("invalid ip id %s", id)
	}
}

func TestUniqIDCounterAndMonth(t *testing.T) {
	g := NewUniqIDGenerator(netip.MustParseAddr("10.0.0.1"), 1)
	now := time.Date(2026, 1, 31, 23, 59, 59, 999e6, time.UTC)
	g.now = func() time.Time { return now }
	g.counter = 0xFFFE
	a := g.Next()
	b := g.Next()
	if a[28:] != "FFFF" || b[28:] != "0000" {
		t.Errorf("counter did not wrap: %s %s", a, b)
	}
	if a[20:28] != "9FA523FF" { // 31 days in ms - 1 = 2678399999
		t.Errorf("end of month elapsed %s", a[20:28])
	}
	now = time.Date(2026, 2, 1, 0, 0, 0, 7e6, time.UTC)
	if c := g.Next(); c[20:28] != "00000007" {
		t.Errorf("month rollover: %s", c)
	}
	now = time.Date(2026, 1, 15, 0, 0, 0, 0, time.UTC) // clock stepped back a month
	if c := g.Next(); c[20:28] != "48190800" {         // 14 days in ms
		t.Errorf("clock step back: %s", c)
	}
}

func TestUniqIDConcurrentUnique(t *testing.T) {
	g := NewUniqIDGenerator(netip.MustParseAddr("10.0.0.1"), 1)
	fixed := time.Now()
	g.now = func() time.Time { return fixed }
	const workers, per = 4, 5000
	ids := make([][]string, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range per {
				ids[w] = append(ids[w], g.Next())
			}
		}()
	}
	wg.Wait()
	seen := make(map[string]bool, workers*per)
	for _, l := range ids {
		for _, id := range l {
			if seen[id] {
				t.Fatalf("duplicate id %s", id)
			}
			seen[id] = true
		}
	}
}
