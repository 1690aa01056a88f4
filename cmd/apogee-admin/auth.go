package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/protocol"
)

// RocketMQ 5.3's user and ACL commands (mqadmin's createUser ... listAcl,
// in tools' command/auth), through the broker's codes 3001-3010. Each
// goes to the broker at -b, or to every master of cluster -c. The caller
// needs admin rights on a broker with access control on: give
// --access-key and --secret-key (or $APOGEE_ADMIN_ACCESS_KEY and
// $APOGEE_ADMIN_SECRET_KEY) of a user allowed Update (Get, to read) on
// the cluster, or a super user (needed to create a super user).

func init() {
	target := func(fs *pflag.FlagSet, verb string) {
		fs.StringP("brokerAddr", "b", "", verb+" on this broker")
		fs.StringP("clusterName", "c", "", verb+" on every master of this cluster")
	}
	register(&command{name: "createUser", summary: "create a user (RocketMQ 5.3 ACL)",
		flags: func(fs *pflag.FlagSet) {
			target(fs, "create")
			fs.StringP("username", "u", "", "the user's name (its access key)")
			fs.StringP("password", "p", "", "the user's password (its secret key)")
			fs.StringP("userType", "t", "", "Normal (default) or Super")
		}, run: func(x *cmdCtx) error { return changeUser(x, protocol.ReqAuthCreateUser, "create") }})
	register(&command{name: "updateUser", summary: "change a user's password, type or status",
		flags: func(fs *pflag.FlagSet) {
			target(fs, "update")
			fs.StringP("username", "u", "", "the user's name")
			fs.StringP("password", "p", "", "a new password")
			fs.StringP("userType", "t", "", "Normal or Super")
			fs.StringP("userStatus", "s", "", "enable or disable")
		}, run: func(x *cmdCtx) error { return changeUser(x, protocol.ReqAuthUpdateUser, "update") }})
	register(&command{name: "deleteUser", summary: "delete a user and its ACL",
		flags: func(fs *pflag.FlagSet) {
			target(fs, "delete")
			fs.StringP("username", "u", "", "the user's name")
		}, run: deleteUser})
	register(&command{name: "getUser", summary: "a user (never its password)",
		flags: func(fs *pflag.FlagSet) {
			target(fs, "get")
			fs.StringP("username", "u", "", "the user's name")
		}, run: getUser})
	register(&command{name: "listUser", summary: "the users (never their passwords)",
		flags: func(fs *pflag.FlagSet) {
			target(fs, "list")
			fs.StringP("filter", "f", "", "only users whose name contains this")
		}, run: listUser})
	aclFlags := func(fs *pflag.FlagSet, verb string) {
		target(fs, verb)
		fs.StringP("subject", "s", "", "the subject, User:name")
		fs.StringP("resources", "r", "", "resources, comma-separated: Topic:name, Topic:prefix*, Group:..., Cluster:..., *")
		fs.StringP("actions", "a", "", "actions, comma-separated: Pub, Sub, Create, Update, Delete, Get, List, All")
		fs.StringP("sourceIp", "i", "", "source addresses or CIDR ranges, comma-separated (default: any)")
		fs.StringP("decision", "d", "", "Allow or Deny")
	}
	register(&command{name: "createAcl", summary: "give a user's ACL entries (RocketMQ 5.3 ACL)",
		flags: func(fs *pflag.FlagSet) { aclFlags(fs, "create") },
		run:   func(x *cmdCtx) error { return changeACL(x, protocol.ReqAuthCreateACL, "create") }})
	register(&command{name: "updateAcl", summary: "change a user's ACL entries",
		flags: func(fs *pflag.FlagSet) { aclFlags(fs, "update") },
		run:   func(x *cmdCtx) error { return changeACL(x, protocol.ReqAuthUpdateACL, "update") }})
	register(&command{name: "deleteAcl", summary: "delete a user's ACL, or its entries of some resources",
		flags: func(fs *pflag.FlagSet) {
			target(fs, "delete")
			fs.StringP("subject", "s", "", "the subject, User:name")
			fs.StringP("resources", "r", "", "only the entries of these resources, comma-separated (default: the whole ACL)")
		}, run: deleteACL})
	register(&command{name: "getAcl", summary: "a user's ACL",
		flags: func(fs *pflag.FlagSet) {
			target(fs, "get")
			fs.StringP("subject", "s", "", "the subject, User:name")
		}, run: getACL})
	register(&command{name: "listAcl", summary: "the ACLs",
		flags: func(fs *pflag.FlagSet) {
			target(fs, "list")
			fs.StringP("subject", "s", "", "only subjects containing this")
			fs.StringP("resource", "r", "", "only ACLs with a resource containing this")
		}, run: listACL})
}

// list splits a comma-separated flag value, trimming each item.
func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// authBrokers are the brokers of -b or -c (one of them is required).
func (x *cmdCtx) authBrokers() ([]broker, error) { return x.brokers(false) }

func changeUser(x *cmdCtx, code int32, verb string) error {
	if err := x.need("username"); err != nil {
		return err
	}
	if code == protocol.ReqAuthCreateUser {
		if err := x.need("password"); err != nil {
			return err
		}
	} else if x.str("password") == "" && x.str("userType") == "" && x.str("userStatus") == "" {
		return fmt.Errorf("%w: give --password, --userType or --userStatus", errUsage)
	}
	bs, err := x.authBrokers()
	if err != nil {
		return err
	}
	name := x.str("username")
	body, err := json.Marshal(acl.UserInfo{Username: name, Password: x.str("password"), UserType: x.str("userType"), UserStatus: x.str("userStatus")})
	if err != nil {
		return err
	}
	return authToEach(x, bs, code, "username", name, body, verb+" user to %s success.")
}

func deleteUser(x *cmdCtx) error {
	if err := x.need("username"); err != nil {
		return err
	}
	bs, err := x.authBrokers()
	if err != nil {
		return err
	}
	name := x.str("username")
	return authToEach(x, bs, protocol.ReqAuthDeleteUser, "username", name, nil, "delete user from %s success.")
}

// userRows are a table's rows of users (RocketMQ prints the password
// column; the broker never returns one).
func (x *cmdCtx) printUsers(users []acl.UserInfo) {
	rows := make([][]string, 0, len(users))
	for _, u := range users {
		rows = append(rows, []string{u.Username, u.UserType, u.UserStatus})
	}
	x.table([]string{"UserName", "UserType", "UserStatus"}, rows)
}

// brokerUsers is one broker's users in --json.
type brokerUsers struct {
	Broker string         `json:"brokerAddr"`
	Users  []acl.UserInfo `json:"users"`
}

func getUser(x *cmdCtx) error {
	if err := x.need("username"); err != nil {
		return err
	}
	bs, err := x.authBrokers()
	if err != nil {
		return err
	}
	name := x.str("username")
	var out []brokerUsers
	for _, b := range bs {
		body, err := x.admin.AuthRequest(x.ctx, b.Addr, protocol.ReqAuthGetUser, map[string]string{"username": name}, nil)
		if err != nil {
			return err
		}
		if len(body) == 0 {
			return fmt.Errorf("user %s not found on %s", name, b.Addr)
		}
		var u acl.UserInfo
		if err := json.Unmarshal(body, &u); err != nil {
			return fmt.Errorf("the user's body from %s: %w", b.Addr, err)
		}
		x.printUsers([]acl.UserInfo{u})
		x.say("get user from %s success.", b.Addr)
		out = append(out, brokerUsers{b.Addr, []acl.UserInfo{u}})
	}
	x.doc = map[string]any{"brokers": out}
	return nil
}

func listUser(x *cmdCtx) error {
	bs, err := x.authBrokers()
	if err != nil {
		return err
	}
	var out []brokerUsers
	for _, b := range bs {
		body, err := x.admin.AuthRequest(x.ctx, b.Addr, protocol.ReqAuthListUser, map[string]string{"filter": x.str("filter")}, nil)
		if err != nil {
			return err
		}
		users := []acl.UserInfo{}
		if len(body) > 0 {
			if err := json.Unmarshal(body, &users); err != nil {
				return fmt.Errorf("the users' body from %s: %w", b.Addr, err)
			}
		}
		if len(users) == 0 {
			x.say("there is no user found on %s.", b.Addr)
		} else {
			x.printUsers(users)
			x.say("list users from %s success.", b.Addr)
		}
		out = append(out, brokerUsers{b.Addr, users})
	}
	x.doc = map[string]any{"brokers": out}
	return nil
}

func changeACL(x *cmdCtx, code int32, verb string) error {
	if err := x.need("subject", "resources", "actions", "decision"); err != nil {
		return err
	}
	subject := x.str("subject")
	// One Custom policy with an entry per resource: what mqadmin sends.
	var entries []acl.PolicyEntryInfo
	for _, r := range list(x.str("resources")) {
		entries = append(entries, acl.PolicyEntryInfo{Resource: r, Actions: list(x.str("actions")),
			SourceIPs: list(x.str("sourceIp")), Decision: x.str("decision")})
	}
	if len(entries) == 0 {
		return fmt.Errorf("%w: --resources names no resource", errUsage)
	}
	body, err := json.Marshal(acl.AclInfo{Subject: subject, Policies: []acl.PolicyInfo{{PolicyType: "Custom", Entries: entries}}})
	if err != nil {
		return err
	}
	bs, err := x.authBrokers()
	if err != nil {
		return err
	}
	return authToEach(x, bs, code, "subject", subject, body, verb+" acl to %s success.")
}

func deleteACL(x *cmdCtx) error {
	if err := x.need("subject"); err != nil {
		return err
	}
	bs, err := x.authBrokers()
	if err != nil {
		return err
	}
	subject := x.str("subject")
	resources := list(x.str("resources"))
	for _, b := range bs {
		if len(resources) == 0 {
			if _, err := x.admin.AuthRequest(x.ctx, b.Addr, protocol.ReqAuthDeleteACL, map[string]string{"subject": subject}, nil); err != nil {
				return err
			}
		}
		for _, r := range resources {
			if _, err := x.admin.AuthRequest(x.ctx, b.Addr, protocol.ReqAuthDeleteACL,
				map[string]string{"subject": subject, "resource": r}, nil); err != nil {
				return err
			}
		}
		x.say("delete acl from %s success.", b.Addr)
	}
	x.doc = map[string]any{"subject": subject, "resources": resources, "brokers": bs}
	return nil
}

// printACLs prints mqadmin's ACL table: a line per entry.
func (x *cmdCtx) printACLs(acls []acl.AclInfo) {
	var rows [][]string
	for _, a := range acls {
		if len(a.Policies) == 0 {
			rows = append(rows, []string{a.Subject, "", "", "", "", ""})
		}
		for _, p := range a.Policies {
			for _, e := range p.Entries {
				rows = append(rows, []string{a.Subject, p.PolicyType, e.Resource, strings.Join(e.Actions, ","),
					strings.Join(e.SourceIPs, ","), e.Decision})
			}
		}
	}
	x.table([]string{"Subject", "PolicyType", "Resource", "Actions", "SourceIp", "Decision"}, rows)
}

// brokerACLs is one broker's ACLs in --json.
type brokerACLs struct {
	Broker string        `json:"brokerAddr"`
	ACLs   []acl.AclInfo `json:"acls"`
}

func getACL(x *cmdCtx) error {
	if err := x.need("subject"); err != nil {
		return err
	}
	bs, err := x.authBrokers()
	if err != nil {
		return err
	}
	subject := x.str("subject")
	var out []brokerACLs
	for _, b := range bs {
		body, err := x.admin.AuthRequest(x.ctx, b.Addr, protocol.ReqAuthGetACL, map[string]string{"subject": subject}, nil)
		if err != nil {
			return err
		}
		acls := []acl.AclInfo{}
		if len(body) > 0 {
			var a acl.AclInfo
			if err := json.Unmarshal(body, &a); err != nil {
				return fmt.Errorf("the ACL's body from %s: %w", b.Addr, err)
			}
			acls = append(acls, a)
		}
		if len(acls) == 0 {
			x.say("there is no acl of %s on %s.", subject, b.Addr)
		} else {
			x.printACLs(acls)
			x.say("get acl from %s success.", b.Addr)
		}
		out = append(out, brokerACLs{b.Addr, acls})
	}
	x.doc = map[string]any{"brokers": out}
	return nil
}

func listACL(x *cmdCtx) error {
	bs, err := x.authBrokers()
	if err != nil {
		return err
	}
	var out []brokerACLs
	for _, b := range bs {
		body, err := x.admin.AuthRequest(x.ctx, b.Addr, protocol.ReqAuthListACL,
			map[string]string{"subjectFilter": x.str("subject"), "resourceFilter": x.str("resource")}, nil)
		if err != nil {
			return err
		}
		acls := []acl.AclInfo{}
		if len(body) > 0 {
			if err := json.Unmarshal(body, &acls); err != nil {
				return fmt.Errorf("the ACLs' body from %s: %w", b.Addr, err)
			}
		}
		if len(acls) == 0 {
			x.say("there is no acl found on %s.", b.Addr)
		} else {
			x.printACLs(acls)
			x.say("list acls from %s success.", b.Addr)
		}
		out = append(out, brokerACLs{b.Addr, acls})
	}
	x.doc = map[string]any{"brokers": out}
	return nil
}

// authToEach sends one user or ACL change (code, the header key=value and
// body) to every broker of bs in turn, stopping at the first refusal, says
// done (a format with the broker's address) for each, and leaves the
// --json document naming the key and the brokers.
func authToEach(x *cmdCtx, bs []broker, code int32, key, value string, body []byte, done string) error {
	for _, b := range bs {
		if _, err := x.admin.AuthRequest(x.ctx, b.Addr, code, map[string]string{key: value}, body); err != nil {
			return err
		}
		x.say(done, b.Addr)
	}
	x.doc = map[string]any{key: value, "brokers": bs}
	return nil
}
