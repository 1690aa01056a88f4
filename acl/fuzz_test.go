package acl

import (
	"net/netip"
	"strings"
	"testing"
)

// refDecide is the rule written the slow way: every matching entry is
// ranked by specificity (literal 3+len, prefix 2+len... as a pair), the
// best rank decides, and Deny wins a tie.
func refDecide(entries []Entry, r Resource, actions Action, ip netip.Addr) (Decision, bool) {
	best := -1
	var d Decision
	for _, e := range entries {
		if e.Actions&actions == 0 || !matchIP(e.SourceIPs, ip) {
			continue
		}
		rank := -1
		switch {
		case e.Resource.Type == TypeAny:
			rank = 0
		case e.Resource.Type != r.Type:
		case e.Resource.Pattern == AnyName:
			rank = 1
		case r.Pattern != Literal:
		case e.Resource.Pattern == Prefixed && strings.HasPrefix(r.Name, e.Resource.Name):
			rank = 2 + len(e.Resource.Name)
		case e.Resource.Pattern == Literal && e.Resource.Name == r.Name:
			rank = 1 << 20
		}
		switch {
		case rank < 0:
		case rank > best:
			best, d = rank, e.Decision
		case rank == best && e.Decision == Deny:
			d = Deny
		}
	}
	return d, best >= 0
}

// FuzzDecide compares the indexed matcher with refDecide on policies and
// requests built from the fuzzer's bytes.
func FuzzDecide(f *testing.F) {
	f.Add([]byte("Topic:a*|Pub|A;Topic:ab|Pub|D;*|All|A"), "Topic:abc", byte(Pub), byte(1))
	f.Add([]byte("Topic:*|Sub|D;Topic:x|Sub|A"), "Topic:x", byte(Sub), byte(0))
	f.Add([]byte("Group:g*|Sub|A;Group:g*|Sub|D"), "Group:gg", byte(Sub), byte(2))
	f.Add([]byte("Topic:t|Pub|A@10.0.0.0/8"), "Topic:t", byte(Pub), byte(3))
	ips := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.1.1.1"), {}, netip.MustParseAddr("::1")}
	f.Fuzz(func(t *testing.T, spec []byte, request string, actions, ipSel byte) {
		var entries []Entry
		for item := range strings.SplitSeq(string(spec), ";") {
			parts := strings.Split(item, "|")
			if len(parts) < 3 {
				continue
			}
			res, err := ParseResource(parts[0])
			if err != nil {
				continue
			}
			e := Entry{Resource: res, Decision: Allow}
			for _, a := range strings.Split(parts[1], ",") {
				act, err := ParseAction(a)
				if err == nil {
					e.Actions |= act
				}
			}
			if strings.HasPrefix(parts[2], "D") {
				e.Decision = Deny
			}
			if at := strings.IndexByte(parts[2], '@'); at >= 0 {
				ms, err := ParseIPs(parts[2][at+1:])
				if err != nil {
					continue
				}
				e.SourceIPs = ms
			}
			if e.Actions == 0 {
				continue
			}
			entries = append(entries, e)
		}
		r, err := ParseResource(request)
		if err != nil || r.Type == TypeAny || r.Pattern == Prefixed {
			return
		}
		a := Action(actions) & All
		if a == 0 {
			return
		}
		ip := ips[int(ipSel)%len(ips)]
		d, _, ok := newMatcher(entries).decide(r, a, ip)
		wd, wok := refDecide(entries, r, a, ip)
		if ok != wok || ok && d != wd {
			t.Fatalf("entries %+v, request %v %v %v: matcher %v/%v, reference %v/%v", entries, r, a, ip, d, ok, wd, wok)
		}
	})
}
