package acl

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
)

// matcher holds one policy type's entries of a user, indexed for
// decisions: literal names in a map, prefixes longest first, then the
// Type:* entries and the "*" ones.
type matcher struct {
	types   [TypeGroup + 1]typeEntries
	anyType []Entry // resource "*"
}

type typeEntries struct {
	literal  map[string][]Entry
	prefixed []Entry // longest prefix first
	any      []Entry
}

func newMatcher(entries []Entry) *matcher {
	m := new(matcher)
	for _, e := range entries {
		if e.Resource.Type == TypeAny {
			m.anyType = append(m.anyType, e)
			continue
		}
		t := &m.types[e.Resource.Type]
		switch e.Resource.Pattern {
		case Literal:
			if t.literal == nil {
				t.literal = map[string][]Entry{}
			}
			t.literal[e.Resource.Name] = append(t.literal[e.Resource.Name], e)
		case Prefixed:
			t.prefixed = append(t.prefixed, e)
		default:
			t.any = append(t.any, e)
		}
	}
	for i := range m.types {
		slices.SortStableFunc(m.types[i].prefixed, func(a, b Entry) int { return cmp.Compare(len(b.Resource.Name), len(a.Resource.Name)) })
	}
	return m
}

// decide finds the most specific entries that match the request's
// resource, one of its actions and its source address, and returns their
// decision (Deny when any of them denies) and the entry that decided; ok
// is false when no entry matches. Specificity, most first: a literal
// name, the longest matching prefix, Type:*, then "*". Among entries of
// equal specificity a Deny wins (RocketMQ 5's AclAuthorizationHandler).
func (m *matcher) decide(r Resource, actions Action, ip netip.Addr) (d Decision, by *Entry, ok bool) {
	if r.Type == TypeAny || int(r.Type) >= len(m.types) {
		return 0, nil, false
	}
	t := &m.types[r.Type]
	level := func(es []Entry, prefix bool) bool {
		for i := range es {
			e := &es[i]
			if prefix && !strings.HasPrefix(r.Name, e.Resource.Name) || e.Actions&actions == 0 || !matchIP(e.SourceIPs, ip) {
				continue
			}
			if !ok || e.Decision == Deny && d != Deny {
				d, by, ok = e.Decision, e, true
			}
		}
		return ok
	}
	if r.Pattern == Literal {
		if level(t.literal[r.Name], false) {
			return
		}
		for i := 0; i < len(t.prefixed); {
			// One length at a time: entries of equal length are equally specific.
			j := i + 1
			for j < len(t.prefixed) && len(t.prefixed[j].Resource.Name) == len(t.prefixed[i].Resource.Name) {
				j++
			}
			if level(t.prefixed[i:j], true) {
				return
			}
			i = j
		}
	}
	if level(t.any, false) || level(m.anyType, false) {
		return
	}
	return 0, nil, false
}

func matchIP(ms []IPMatcher, ip netip.Addr) bool {
	if len(ms) == 0 {
		return true
	}
	if !ip.IsValid() {
		return false
	}
	for _, m := range ms {
		if m.Match(ip) {
			return true
		}
	}
	return false
}
