package idempotent

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

func TestRecordGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    record
		hex  string
	}{
		{"begin", record{op: opBegin, dur: 30000, owner: []byte("h/1/ab"), key: []byte("K1")},
			"01" + "01" + "0000000000007530" + "06" + hex.EncodeToString([]byte("h/1/ab")) + "02" + hex.EncodeToString([]byte("K1"))},
		{"release", record{op: opRelease, owner: []byte("o"), key: []byte("")},
			"01" + "04" + "0000000000000000" + "01" + "6f" + "00"},
		{"done, long key", record{op: opDone, dur: 86400000, owner: []byte("o"), key: bytes.Repeat([]byte("k"), 200)},
			"01" + "03" + "0000000005265c00" + "01" + "6f" + "c801" + strings.Repeat("6b", 200)},
	} {
		got := appendRecord(nil, &tc.r)
		if hex.EncodeToString(got) != tc.hex {
			t.Errorf("%s: encoded %x\nwant        %s", tc.name, got, tc.hex)
			continue
		}
		back, err := decodeRecord(got)
		if err != nil || back.op != tc.r.op || back.dur != tc.r.dur || !bytes.Equal(back.owner, tc.r.owner) || !bytes.Equal(back.key, tc.r.key) {
			t.Errorf("%s: decoded %+v, %v", tc.name, back, err)
		}
	}
}

func TestRecordDecodeRejects(t *testing.T) {
	good := appendRecord(nil, &record{op: opRenew, dur: 5, owner: []byte("own"), key: []byte("key")})
	for _, tc := range []struct {
		name string
		b    []byte
	}{
		{"empty", nil},
		{"short", good[:9]},
		{"version", append([]byte{2}, good[1:]...)},
		{"op 0", append([]byte{1, 0}, good[2:]...)},
		{"op 5", append([]byte{1, 5}, good[2:]...)},
		{"negative duration", append([]byte{1, 1, 0x80, 0, 0, 0, 0, 0, 0, 0}, good[10:]...)},
		{"owner overruns", append(append([]byte{}, good[:10]...), 0x7f, 'a')},
		{"owner too long", append(append([]byte{}, good[:10]...), 0x81, 0x08)},
		{"bad varint", append(append([]byte{}, good[:10]...), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)},
		{"key missing", good[:len(good)-4]},
		{"key overruns", good[:len(good)-1]},
		{"trailing", append(append([]byte{}, good...), 0)},
	} {
		if _, err := decodeRecord(tc.b); !errors.Is(err, errBadRecord) {
			t.Errorf("%s: err = %v", tc.name, err)
		}
	}
}

func TestIndexKey(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"order-1", "order-1"},
		{"C0A8000100002A9F0000000000000000", "C0A8000100002A9F0000000000000000"},
		{strings.Repeat("x", 128), strings.Repeat("x", 128)},
		{"a b", "idem-" + "c8687a08aa5d6ed2044328fa6a697ab8e96dc34291e8c2034ae8c38e6fcc6d65"},
		{"\x01", "idem-" + "4bf5122f344554c53bde2ebb8cd2b7e3d1600ad631c385a5d7cce23c7785459a"},
	} {
		if got := indexKey(tc.key); got != tc.want {
			t.Errorf("indexKey(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
	if k := indexKey(strings.Repeat("x", 129)); !strings.HasPrefix(k, "idem-") || len(k) != 5+64 {
		t.Errorf("long key → %q", k)
	}
}

// TestFold checks the fold's transitions: every record is judged at the time the
// broker stored it, and illegal ones are ignored.
func TestFold(t *testing.T) {
	b := func(owner string, ts, lease int64) entry { return entry{op: opBegin, owner: owner, ts: ts, dur: lease} }
	r := func(owner string, ts, lease int64) entry { return entry{op: opRenew, owner: owner, ts: ts, dur: lease} }
	d := func(owner string, ts, ttl int64) entry { return entry{op: opDone, owner: owner, ts: ts, dur: ttl} }
	rel := func(owner string, ts int64) entry { return entry{op: opRelease, owner: owner, ts: ts} }
	for _, tc := range []struct {
		name  string
		es    []entry
		now   int64
		want  State
		owner string
	}{
		{"nothing", nil, 0, StateAbsent, ""},
		{"begun", []entry{b("a", 100, 50)}, 120, StateProcessing, "a"},
		{"lease expired", []entry{b("a", 100, 50)}, 150, StateExpired, "a"},
		{"race: first begin wins", []entry{b("a", 100, 50), b("b", 100, 50)}, 120, StateProcessing, "a"},
		{"loser's done ignored", []entry{b("a", 100, 50), b("b", 101, 50), d("b", 102, 1000)}, 120, StateProcessing, "a"},
		{"loser's release ignored", []entry{b("a", 100, 50), rel("b", 102)}, 120, StateProcessing, "a"},
		{"renewed", []entry{b("a", 100, 50), r("a", 140, 50)}, 180, StateProcessing, "a"},
		{"renew after expiry ignored", []entry{b("a", 100, 50), r("a", 151, 50)}, 180, StateExpired, "a"},
		{"other's renew ignored", []entry{b("a", 100, 50), r("b", 140, 500)}, 160, StateExpired, "a"},
		{"takeover after expiry", []entry{b("a", 100, 50), b("b", 160, 50)}, 170, StateProcessing, "b"},
		{"old holder's done after takeover ignored", []entry{b("a", 100, 50), b("b", 160, 50), d("a", 170, 1000)}, 180, StateProcessing, "b"},
		{"late done without takeover counts", []entry{b("a", 100, 50), d("a", 170, 1000)}, 180, StateDone, "a"},
		{"done", []entry{b("a", 100, 50), d("a", 120, 1000)}, 500, StateDone, "a"},
		{"duplicate begin ignored while done", []entry{b("a", 100, 50), d("a", 120, 1000), b("b", 130, 50)}, 500, StateDone, "a"},
		{"done TTL over", []entry{b("a", 100, 50), d("a", 120, 1000)}, 1120, StateAbsent, "a"},
		{"begin after TTL", []entry{b("a", 100, 50), d("a", 120, 100), b("b", 300, 50)}, 310, StateProcessing, "b"},
		{"released", []entry{b("a", 100, 50), rel("a", 110)}, 120, StateAbsent, ""},
		{"released, begun again", []entry{b("a", 100, 50), rel("a", 110), b("b", 111, 50)}, 120, StateProcessing, "b"},
		{"release of an expired lease by its holder", []entry{b("a", 100, 50), rel("a", 200)}, 210, StateAbsent, ""},
		{"done restarted by its owner", []entry{b("a", 100, 50), d("a", 120, 100), d("a", 200, 100)}, 250, StateDone, "a"},
		{"done by another while done ignored", []entry{b("a", 100, 50), d("a", 120, 100), d("b", 200, 1000)}, 250, StateAbsent, "a"},
	} {
		f := fold(tc.es)
		if got := f.at(tc.now); got != tc.want || f.owner != tc.owner {
			t.Errorf("%s: %v/%q, want %v/%q", tc.name, got, f.owner, tc.want, tc.owner)
		}
	}
}

func TestOrderEntries(t *testing.T) {
	e := func(host string, off, ts int64) entry {
		return entry{host: host, off: off, ts: ts, id: host + string(rune('0'+off))}
	}
	// One broker: by offset, whatever the timestamps; read twice: once.
	got := orderEntries([]entry{e("A", 3, 10), e("A", 1, 12), e("A", 2, 11), e("A", 1, 12)})
	if len(got) != 3 || got[0].off != 1 || got[1].off != 2 || got[2].off != 3 {
		t.Fatalf("one broker: %+v", got)
	}
	// Two brokers: each by offset, merged by timestamp.
	got = orderEntries([]entry{e("B", 7, 15), e("A", 2, 20), e("A", 1, 10), e("B", 9, 30)})
	var ids []string
	for _, x := range got {
		ids = append(ids, x.id)
	}
	if strings.Join(ids, ",") != "A1,B7,A2,B9" {
		t.Fatalf("two brokers: %v", ids)
	}
}
