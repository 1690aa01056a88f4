package acl

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// ErrInvalid marks a user, policy or file that does not validate.
var ErrInvalid = errors.New("acl: invalid")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// Action is a set of RocketMQ 5 actions (a bit each). All, in a policy,
// grants every action.
type Action uint16

// RocketMQ 5's actions (org.apache.rocketmq.common.action.Action).
const (
	Pub Action = 1 << iota
	Sub
	Create
	Update
	Delete
	Get
	List

	All = Pub | Sub | Create | Update | Delete | Get | List
)

var actionNames = []struct {
	a    Action
	name string
}{{Pub, "Pub"}, {Sub, "Sub"}, {Create, "Create"}, {Update, "Update"}, {Delete, "Delete"}, {Get, "Get"}, {List, "List"}}

// ParseAction reads one action name, case-insensitively ("All" is every
// action; "Any" is refused: it only describes requests in RocketMQ).
func ParseAction(s string) (Action, error) {
	if strings.EqualFold(s, "All") {
		return All, nil
	}
	for _, n := range actionNames {
		if strings.EqualFold(s, n.name) {
			return n.a, nil
		}
	}
	return 0, invalid("action %q (want Pub, Sub, Create, Update, Delete, Get, List or All)", s)
}

// Names returns the action names in the set ("All" for every one).
func (a Action) Names() []string {
	if a == All {
		return []string{"All"}
	}
	var out []string
	for _, n := range actionNames {
		if a&n.a != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

func (a Action) String() string { return strings.Join(a.Names(), "|") }

// ResourceType is what a resource names.
type ResourceType uint8

// Resource types (RocketMQ 5's ResourceType, less Namespace).
const (
	TypeAny ResourceType = iota + 1 // "*": every resource of every type
	TypeCluster
	TypeTopic
	TypeGroup
)

var typeNames = map[ResourceType]string{TypeAny: "*", TypeCluster: "Cluster", TypeTopic: "Topic", TypeGroup: "Group"}

func (t ResourceType) String() string { return typeNames[t] }

// Pattern is how a policy's resource name matches.
type Pattern uint8

// Patterns: Literal ("Topic:orders"), Prefixed ("Topic:orders*"), Any
// ("Topic:*").
const (
	Literal Pattern = iota + 1
	Prefixed
	AnyName
)

// Resource is a resource in a policy (with its pattern) or in a request
// (Literal, or AnyName for a request about every resource of a type, such
// as listing all topics).
type Resource struct {
	Type    ResourceType
	Name    string
	Pattern Pattern
}

// ParseResource reads RocketMQ 5's resource key: "*", "Type:*",
// "Type:prefix*" or "Type:name", the type being Cluster, Topic or Group
// (case-insensitive).
func ParseResource(s string) (Resource, error) {
	if s == "*" {
		return Resource{Type: TypeAny, Pattern: AnyName}, nil
	}
	typ, name, ok := strings.Cut(s, ":")
	if !ok {
		return Resource{}, invalid("resource %q (want Type:name, Type:prefix*, Type:* or *)", s)
	}
	var t ResourceType
	for k, v := range typeNames {
		if k != TypeAny && strings.EqualFold(v, typ) {
			t = k
		}
	}
	if t == 0 {
		return Resource{}, invalid("resource type %q (want Cluster, Topic or Group)", typ)
	}
	switch {
	case name == "*":
		return Resource{Type: t, Pattern: AnyName}, nil
	case name == "":
		return Resource{}, invalid("resource %q has no name", s)
	case strings.HasSuffix(name, "*"):
		name = strings.TrimSuffix(name, "*")
		if t == TypeGroup {
			name = GroupName(name)
		}
		return Resource{Type: t, Name: name, Pattern: Prefixed}, nil
	}
	if t == TypeGroup {
		name = GroupName(name)
	}
	return Resource{Type: t, Name: name, Pattern: Literal}, nil
}

// String is the resource key ParseResource reads.
func (r Resource) String() string {
	switch {
	case r.Type == TypeAny:
		return "*"
	case r.Pattern == AnyName:
		return r.Type.String() + ":*"
	case r.Pattern == Prefixed:
		return r.Type.String() + ":" + r.Name + "*"
	}
	return r.Type.String() + ":" + r.Name
}

// GroupName is the consumer group a name stands for: RocketMQ's retry and
// dead-letter topics (%RETRY%group, %DLQ%group) are their group's.
func GroupName(name string) string {
	if g, ok := strings.CutPrefix(name, "%RETRY%"); ok {
		return g
	}
	if g, ok := strings.CutPrefix(name, "%DLQ%"); ok {
		return g
	}
	return name
}

// IsRetryTopic reports whether a topic is a group's retry topic.
func IsRetryTopic(topic string) bool { return strings.HasPrefix(topic, "%RETRY%") }

// Decision is a policy entry's effect.
type Decision uint8

// Decisions.
const (
	Allow Decision = iota + 1
	Deny
)

func (d Decision) String() string {
	if d == Deny {
		return "Deny"
	}
	return "Allow"
}

// ParseDecision reads "Allow" or "Deny" (case-insensitive).
func ParseDecision(s string) (Decision, error) {
	switch {
	case strings.EqualFold(s, "Allow"):
		return Allow, nil
	case strings.EqualFold(s, "Deny"):
		return Deny, nil
	}
	return 0, invalid("decision %q (want Allow or Deny)", s)
}

// PolicyType tells a user's own policies (Custom) from the defaults that
// apply when none of them matches (Default: what RocketMQ 4's
// defaultTopicPerm and defaultGroupPerm become).
type PolicyType uint8

// Policy types.
const (
	Custom PolicyType = iota + 1
	Default
)

func (p PolicyType) String() string {
	if p == Default {
		return "Default"
	}
	return "Custom"
}

// ParsePolicyType reads "Custom" or "Default" ("" is Custom).
func ParsePolicyType(s string) (PolicyType, error) {
	switch {
	case s == "" || strings.EqualFold(s, "Custom"):
		return Custom, nil
	case strings.EqualFold(s, "Default"):
		return Default, nil
	}
	return 0, invalid("policy type %q (want Custom or Default)", s)
}

// Entry is one policy entry: a resource pattern, the actions it covers,
// the source addresses it applies to (none: every address) and its
// decision.
type Entry struct {
	Resource  Resource
	Actions   Action
	SourceIPs []IPMatcher
	Decision  Decision
}

// Policy is a user's entries of one type.
type Policy struct {
	Type    PolicyType
	Entries []Entry
}

// UserType tells super users (every request allowed once authenticated;
// RocketMQ 4's admin accounts) from normal ones.
type UserType uint8

// User types.
const (
	Normal UserType = iota + 1
	Super
)

func (t UserType) String() string {
	if t == Super {
		return "Super"
	}
	return "Normal"
}

// ParseUserType reads "Super" or "Normal" ("" is Normal).
func ParseUserType(s string) (UserType, error) {
	switch {
	case s == "" || strings.EqualFold(s, "Normal"):
		return Normal, nil
	case strings.EqualFold(s, "Super"):
		return Super, nil
	}
	return 0, invalid("user type %q (want Super or Normal)", s)
}

// User is an account: its access key (Name, RocketMQ 5's username), its
// secret key (Password), its type and whether it is enabled.
type User struct {
	Name     string
	Password string
	Type     UserType
	Disabled bool
	// WhiteAddrs are RocketMQ 4's per-account whiteRemoteAddress: requests
	// naming this user from one of these addresses are accepted without a
	// signature or a permission check (only an imported plain_acl.yml sets
	// them).
	WhiteAddrs []IPMatcher
}

// Validate checks a user's fields.
func (u *User) Validate() error {
	if u.Name == "" {
		return invalid("a user has no username")
	}
	if strings.ContainsAny(u.Name, ":\x00") {
		return invalid("username %q contains ':' or NUL", u.Name)
	}
	if u.Password == "" {
		return invalid("user %q has no password (secret key)", u.Name)
	}
	return nil
}

// ACL is the policies of one subject (a user).
type ACL struct {
	User     string
	Policies []Policy
}

// Subject is the ACL's subject key, "User:name".
func (a *ACL) Subject() string { return "User:" + a.User }

// ParseSubject reads "User:name" (or a bare name).
func ParseSubject(s string) (string, error) {
	if name, ok := strings.CutPrefix(s, "User:"); ok {
		s = name
	}
	if s == "" || strings.Contains(s, ":") {
		return "", invalid("subject %q (want User:name)", s)
	}
	return s, nil
}

// Validate checks an ACL's policies.
func (a *ACL) Validate() error {
	if a.User == "" {
		return invalid("an ACL has no subject")
	}
	if len(a.Policies) == 0 {
		return invalid("the ACL of %s has no policy", a.Subject())
	}
	for _, p := range a.Policies {
		if len(p.Entries) == 0 {
			return invalid("a %s policy of %s has no entry", p.Type, a.Subject())
		}
		for _, e := range p.Entries {
			if e.Actions == 0 {
				return invalid("an entry of %s on %s has no action", a.Subject(), e.Resource)
			}
			if e.Decision == 0 {
				return invalid("an entry of %s on %s has no decision", a.Subject(), e.Resource)
			}
		}
	}
	return nil
}

// merge updates a with other's policies the way RocketMQ 5 does
// (Acl.updatePolicy): an entry on the same resource of the same policy
// type is replaced, others are added.
func (a *ACL) merge(other []Policy) {
	for _, np := range other {
		i := slices.IndexFunc(a.Policies, func(p Policy) bool { return p.Type == np.Type })
		if i < 0 {
			a.Policies = append(a.Policies, Policy{Type: np.Type, Entries: slices.Clone(np.Entries)})
			continue
		}
		p := &a.Policies[i]
		p.Entries = slices.Clone(p.Entries)
		for _, ne := range np.Entries {
			if j := slices.IndexFunc(p.Entries, func(e Entry) bool { return e.Resource == ne.Resource }); j >= 0 {
				p.Entries[j] = ne
			} else {
				p.Entries = append(p.Entries, ne)
			}
		}
	}
}

// remove deletes the entry on r from the policy of type t; it reports
// whether the ACL has any entry left.
func (a *ACL) remove(t PolicyType, r Resource) bool {
	var out []Policy
	for _, p := range a.Policies {
		if p.Type == t {
			p.Entries = slices.DeleteFunc(slices.Clone(p.Entries), func(e Entry) bool { return e.Resource == r })
		}
		if len(p.Entries) > 0 {
			out = append(out, p)
		}
	}
	a.Policies = out
	return len(out) > 0
}

// IPMatcher matches source addresses: a CIDR prefix (an exact address is
// a full-length prefix), or one of RocketMQ 4's IPv4 patterns.
type IPMatcher struct {
	text   string
	prefix netip.Prefix
	octets [4]octetRange // for a RocketMQ 4 pattern (prefix invalid)
}

type octetRange struct{ lo, hi uint8 }

// Match reports whether addr is one the matcher accepts.
func (m IPMatcher) Match(addr netip.Addr) bool {
	addr = addr.Unmap()
	if m.prefix.IsValid() {
		return m.prefix.Contains(addr)
	}
	if !addr.Is4() {
		return false
	}
	b := addr.As4()
	for i, r := range m.octets {
		if b[i] < r.lo || b[i] > r.hi {
			return false
		}
	}
	return true
}

func (m IPMatcher) String() string { return m.text }

// ParseIPs reads source addresses: each an IP address, a CIDR prefix, "*"
// (every address), or a RocketMQ 4 IPv4 pattern whose octets are numbers,
// "*" or ranges "a-b" ("10.1.*.*", "192.168.0.1-100"). A RocketMQ 4
// list pattern ("192.168.0.{1,2}") expands to one matcher per element.
func ParseIPs(s string) ([]IPMatcher, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, invalid("empty source address")
	}
	if s == "*" {
		return []IPMatcher{{text: s, prefix: netip.MustParsePrefix("0.0.0.0/0")}, {text: s, prefix: netip.MustParsePrefix("::/0")}}, nil
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		return []IPMatcher{{text: s, prefix: p.Masked()}}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return []IPMatcher{{text: s, prefix: netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())}}, nil
	}
	// RocketMQ 4: "a.b.c.{x,y,z}" lists alternatives of the last octet.
	if i := strings.IndexByte(s, '{'); i >= 0 && strings.HasSuffix(s, "}") {
		var out []IPMatcher
		for alt := range strings.SplitSeq(s[i+1:len(s)-1], ",") {
			ms, err := ParseIPs(s[:i] + strings.TrimSpace(alt))
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
		return out, nil
	}
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return nil, invalid("source address %q", s)
	}
	m := IPMatcher{text: s}
	for i := range m.octets {
		p := "*"
		if i < len(parts) {
			p = parts[i]
		}
		r, err := parseOctet(p)
		if err != nil {
			return nil, invalid("source address %q: %v", s, err)
		}
		m.octets[i] = r
	}
	// A trailing "*" may stand for the octets after it ("10.1.*").
	if len(parts) < 4 && parts[len(parts)-1] != "*" {
		return nil, invalid("source address %q has fewer than four octets", s)
	}
	return []IPMatcher{m}, nil
}

func parseOctet(p string) (octetRange, error) {
	if p == "*" {
		return octetRange{0, 255}, nil
	}
	lo, hi, isRange := strings.Cut(p, "-")
	a, err := octet(lo)
	if err != nil {
		return octetRange{}, err
	}
	if !isRange {
		return octetRange{a, a}, nil
	}
	b, err := octet(hi)
	if err != nil || b < a {
		return octetRange{}, fmt.Errorf("range %q", p)
	}
	return octetRange{a, b}, nil
}

func octet(s string) (uint8, error) {
	if s == "" || len(s) > 3 {
		return 0, fmt.Errorf("octet %q", s)
	}
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("octet %q", s)
		}
		n = n*10 + int(c-'0')
	}
	if n > 255 {
		return 0, fmt.Errorf("octet %q", s)
	}
	return uint8(n), nil
}
