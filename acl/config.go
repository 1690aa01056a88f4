package acl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// UserInfo is RocketMQ 5.3's user body (the admin codes' JSON, and a user
// in the project's ACL file).
type UserInfo struct {
	Username   string `json:"username" yaml:"username"`
	Password   string `json:"password,omitempty" yaml:"password"`
	UserType   string `json:"userType,omitempty" yaml:"userType"`
	UserStatus string `json:"userStatus,omitempty" yaml:"userStatus"`
}

// AclInfo is RocketMQ 5.3's ACL body: a subject's policies.
type AclInfo struct {
	Subject  string       `json:"subject" yaml:"subject"`
	Policies []PolicyInfo `json:"policies" yaml:"policies"`
}

// PolicyInfo is one policy of an AclInfo.
type PolicyInfo struct {
	PolicyType string            `json:"policyType,omitempty" yaml:"policyType"`
	Entries    []PolicyEntryInfo `json:"entries" yaml:"entries"`
}

// PolicyEntryInfo is one entry: a resource (the file may give several, in
// Resources, for one entry each), its actions, source addresses and
// decision.
type PolicyEntryInfo struct {
	Resource  string   `json:"resource" yaml:"resource"`
	Resources []string `json:"-" yaml:"resources"`
	Actions   []string `json:"actions" yaml:"actions"`
	SourceIPs []string `json:"sourceIps,omitempty" yaml:"sourceIps"`
	Decision  string   `json:"decision" yaml:"decision"`
}

// Config is a set of users and ACLs, and the addresses exempt from every
// check: what an ACL file holds, in either format.
type Config struct {
	Users  []User
	ACLs   []ACL
	White  []IPMatcher // globalWhiteRemoteAddresses
	Format string      // "apogee" or "plain_acl" (RocketMQ 4)
}

// fileDoc is the project's ACL file: users and ACLs as RocketMQ 5.3's
// admin bodies, and optionally RocketMQ 4's global white addresses.
type fileDoc struct {
	Users []UserInfo `yaml:"users"`
	ACLs  []AclInfo  `yaml:"acls"`
	White []string   `yaml:"globalWhiteRemoteAddresses"`
}

// plainDoc is RocketMQ 4's plain_acl.yml.
type plainDoc struct {
	White    []string       `yaml:"globalWhiteRemoteAddresses"`
	Accounts []plainAccount `yaml:"accounts"`
}

type plainAccount struct {
	AccessKey          string   `yaml:"accessKey"`
	SecretKey          string   `yaml:"secretKey"`
	WhiteRemoteAddress string   `yaml:"whiteRemoteAddress"`
	Admin              bool     `yaml:"admin"`
	DefaultTopicPerm   string   `yaml:"defaultTopicPerm"`
	DefaultGroupPerm   string   `yaml:"defaultGroupPerm"`
	TopicPerms         []string `yaml:"topicPerms"`
	GroupPerms         []string `yaml:"groupPerms"`
}

// ParseFile reads an ACL file: the project's format (top-level users and
// acls) or RocketMQ 4's plain_acl.yml (top-level accounts), told apart by
// their keys. JSON is accepted too (it is YAML). Errors wrap ErrInvalid
// and name what is wrong.
func ParseFile(data []byte) (*Config, error) {
	var top map[string]yaml.Node
	if err := yaml.Unmarshal(data, &top); err != nil {
		return nil, invalid("%v", err)
	}
	if _, plain := top["accounts"]; plain {
		if _, ok := top["users"]; ok {
			return nil, invalid("the file has both accounts (RocketMQ 4's plain_acl.yml) and users (Apogee's format)")
		}
		var p plainDoc
		if err := yaml.Unmarshal(data, &p); err != nil {
			return nil, invalid("%v", err)
		}
		return fromPlain(&p)
	}
	var doc fileDoc
	if len(top) > 0 {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true) // a misspelt key is an error, not an empty file
		if err := dec.Decode(&doc); err != nil {
			return nil, invalid("%v", err)
		}
	}
	c := &Config{Format: "apogee"}
	var err error
	if c.White, err = parseIPList(doc.White); err != nil {
		return nil, fmt.Errorf("globalWhiteRemoteAddresses: %w", err)
	}
	for _, ui := range doc.Users {
		u, err := ui.user()
		if err != nil {
			return nil, err
		}
		c.Users = append(c.Users, u)
	}
	for _, ai := range doc.ACLs {
		a, err := ai.acl("")
		if err != nil {
			return nil, err
		}
		c.ACLs = append(c.ACLs, a)
	}
	return c, c.validate()
}

// validate checks that names are unique and every ACL's user exists.
func (c *Config) validate() error {
	users := map[string]bool{}
	for _, u := range c.Users {
		if users[u.Name] {
			return invalid("user %q is defined twice", u.Name)
		}
		users[u.Name] = true
	}
	acls := map[string]bool{}
	for _, a := range c.ACLs {
		if acls[a.User] {
			return invalid("the ACL of User:%s is defined twice (put its policies in one)", a.User)
		}
		acls[a.User] = true
		if !users[a.User] {
			return invalid("the ACL of User:%s names a user the file does not define", a.User)
		}
	}
	return nil
}

func parseIPList(list []string) ([]IPMatcher, error) {
	var out []IPMatcher
	for _, s := range list {
		for part := range strings.SplitSeq(s, ",") {
			if strings.TrimSpace(part) == "" {
				continue
			}
			ms, err := ParseIPs(part)
			if err != nil {
				return nil, err
			}
			out = append(out, ms...)
		}
	}
	return out, nil
}

// user converts a UserInfo (type and status default to Normal and enable).
func (ui UserInfo) user() (User, error) {
	u := User{Name: ui.Username, Password: ui.Password}
	var err error
	if u.Type, err = ParseUserType(ui.UserType); err != nil {
		return u, err
	}
	switch {
	case ui.UserStatus == "" || strings.EqualFold(ui.UserStatus, "enable"):
	case strings.EqualFold(ui.UserStatus, "disable"):
		u.Disabled = true
	default:
		return u, invalid("user status %q (want enable or disable)", ui.UserStatus)
	}
	return u, u.Validate()
}

// info converts a user back; the password is included only when
// withPassword.
func (u *User) info(withPassword bool) UserInfo {
	ui := UserInfo{Username: u.Name, UserType: u.Type.String(), UserStatus: "enable"}
	if u.Disabled {
		ui.UserStatus = "disable"
	}
	if withPassword {
		ui.Password = u.Password
	}
	return ui
}

// acl converts an AclInfo; subject, when set, overrides the body's (the
// request header names it).
func (ai AclInfo) acl(subject string) (ACL, error) {
	if subject == "" {
		subject = ai.Subject
	}
	var a ACL
	var err error
	if a.User, err = ParseSubject(subject); err != nil {
		return a, err
	}
	for _, pi := range ai.Policies {
		p := Policy{}
		if p.Type, err = ParsePolicyType(pi.PolicyType); err != nil {
			return a, err
		}
		for _, ei := range pi.Entries {
			es, err := ei.entries()
			if err != nil {
				return a, fmt.Errorf("the ACL of %s: %w", a.Subject(), err)
			}
			p.Entries = append(p.Entries, es...)
		}
		a.Policies = append(a.Policies, p)
	}
	return a, a.Validate()
}

func (ei PolicyEntryInfo) entries() ([]Entry, error) {
	var e Entry
	for _, s := range ei.Actions {
		a, err := ParseAction(s)
		if err != nil {
			return nil, err
		}
		e.Actions |= a
	}
	for _, s := range ei.SourceIPs {
		ms, err := ParseIPs(s)
		if err != nil {
			return nil, err
		}
		e.SourceIPs = append(e.SourceIPs, ms...)
	}
	d, err := ParseDecision(ei.Decision)
	if err != nil {
		return nil, err
	}
	e.Decision = d
	names := ei.Resources
	if ei.Resource != "" {
		names = append([]string{ei.Resource}, names...)
	}
	if len(names) == 0 {
		return nil, invalid("an entry has no resource")
	}
	var out []Entry
	for _, n := range names {
		r, err := ParseResource(n)
		if err != nil {
			return nil, err
		}
		e.Resource = r
		out = append(out, e)
	}
	return out, nil
}

// info converts an ACL back to RocketMQ 5.3's body.
func (a *ACL) info() AclInfo {
	ai := AclInfo{Subject: a.Subject()}
	for _, p := range a.Policies {
		pi := PolicyInfo{PolicyType: p.Type.String()}
		for _, e := range p.Entries {
			ei := PolicyEntryInfo{Resource: e.Resource.String(), Actions: e.Actions.Names(), Decision: e.Decision.String()}
			for _, m := range e.SourceIPs {
				ei.SourceIPs = append(ei.SourceIPs, m.String())
			}
			pi.Entries = append(pi.Entries, ei)
		}
		ai.Policies = append(ai.Policies, pi)
	}
	return ai
}

// fromPlain converts RocketMQ 4's plain_acl.yml as RocketMQ 5's
// AuthMigrator does: an account becomes a user (Super when admin), its
// topicPerms and groupPerms Custom entries on literal names, its
// defaultTopicPerm and defaultGroupPerm Default entries on Topic:* and
// Group:*. A permission is DENY, PUB, SUB or PUB|SUB; anything else is
// refused (RocketMQ 4 read it as DENY, the migrator as All). The global
// and per-account white addresses keep RocketMQ 4's meaning: exempt from
// every check, or from the signature and permission checks of that
// account.
func fromPlain(p *plainDoc) (*Config, error) {
	c := &Config{Format: "plain_acl"}
	var err error
	if c.White, err = parseIPList(p.White); err != nil {
		return nil, fmt.Errorf("globalWhiteRemoteAddresses: %w", err)
	}
	for _, acct := range p.Accounts {
		u := User{Name: acct.AccessKey, Password: acct.SecretKey, Type: Normal}
		if acct.Admin {
			u.Type = Super
		}
		if err := u.Validate(); err != nil {
			return nil, fmt.Errorf("account %q: %w", acct.AccessKey, err)
		}
		if acct.WhiteRemoteAddress != "" {
			if u.WhiteAddrs, err = parseIPList([]string{acct.WhiteRemoteAddress}); err != nil {
				return nil, fmt.Errorf("account %q whiteRemoteAddress: %w", acct.AccessKey, err)
			}
		}
		c.Users = append(c.Users, u)
		a := ACL{User: u.Name}
		var custom, def []Entry
		for _, list := range []struct {
			perms []string
			typ   ResourceType
		}{{acct.TopicPerms, TypeTopic}, {acct.GroupPerms, TypeGroup}} {
			for _, tp := range list.perms {
				name, perm, ok := strings.Cut(tp, "=")
				name, perm = strings.TrimSpace(name), strings.TrimSpace(perm)
				if !ok || name == "" {
					return nil, invalid("account %q: permission %q (want name=PERM)", acct.AccessKey, tp)
				}
				act, dec, err := plainPerm(perm)
				if err != nil {
					return nil, fmt.Errorf("account %q, %s: %w", acct.AccessKey, name, err)
				}
				if list.typ == TypeGroup {
					name = GroupName(name)
				}
				custom = append(custom, Entry{Resource: Resource{Type: list.typ, Name: name, Pattern: Literal}, Actions: act, Decision: dec})
			}
		}
		for _, d := range []struct {
			perm string
			typ  ResourceType
		}{{acct.DefaultTopicPerm, TypeTopic}, {acct.DefaultGroupPerm, TypeGroup}} {
			if strings.TrimSpace(d.perm) == "" {
				continue
			}
			act, dec, err := plainPerm(strings.TrimSpace(d.perm))
			if err != nil {
				return nil, fmt.Errorf("account %q default permission: %w", acct.AccessKey, err)
			}
			def = append(def, Entry{Resource: Resource{Type: d.typ, Pattern: AnyName}, Actions: act, Decision: dec})
		}
		if len(custom) > 0 {
			a.Policies = append(a.Policies, Policy{Type: Custom, Entries: custom})
		}
		if len(def) > 0 {
			a.Policies = append(a.Policies, Policy{Type: Default, Entries: def})
		}
		if len(a.Policies) > 0 {
			c.ACLs = append(c.ACLs, a)
		}
	}
	return c, c.validate()
}

func plainPerm(perm string) (Action, Decision, error) {
	switch strings.ToUpper(perm) {
	case "DENY":
		return All, Deny, nil
	case "PUB":
		return Pub, Allow, nil
	case "SUB":
		return Sub, Allow, nil
	case "PUB|SUB", "SUB|PUB":
		return Pub | Sub, Allow, nil
	}
	return 0, 0, invalid("permission %q (want DENY, PUB, SUB or PUB|SUB)", perm)
}

// MarshalFile writes c in the project's format (passwords included: the
// file is the operator's, to keep at mode 0600).
func (c *Config) MarshalFile() ([]byte, error) {
	var doc struct {
		White []string   `yaml:"globalWhiteRemoteAddresses,omitempty"`
		Users []UserInfo `yaml:"users"`
		ACLs  []AclInfo  `yaml:"acls"`
	}
	for _, m := range c.White {
		doc.White = append(doc.White, m.String())
	}
	for i := range c.Users {
		doc.Users = append(doc.Users, c.Users[i].info(true))
	}
	for i := range c.ACLs {
		doc.ACLs = append(doc.ACLs, c.ACLs[i].info())
	}
	return yaml.Marshal(&doc)
}

// decodeJSON reads an admin body.
func decodeJSON(body []byte, v any) error {
	if len(body) == 0 {
		return invalid("the request has no body")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return invalid("body: %v", err)
	}
	return nil
}
