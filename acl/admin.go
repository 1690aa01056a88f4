package acl

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/protocol"
)

// IsAdminCode reports whether code is one of RocketMQ 5.3's user and ACL
// management codes (3001-3010), which ServeAdmin answers.
func IsAdminCode(code int32) bool {
	return code >= protocol.ReqAuthCreateUser && code <= protocol.ReqAuthListACL
}

// Answers of the admin codes, as RocketMQ 5.3's AdminBrokerProcessor gives
// them.
const respInvalidParameter int32 = 29 // ResponseCode.INVALID_PARAMETER

// adminError is an admin request's refusal with its response code.
type adminError struct {
	code int32
	msg  string
}

func (e *adminError) Error() string { return e.msg }

func noPermission(format string, args ...any) error {
	return &adminError{protocol.RespNoPermission, fmt.Sprintf(format, args...)}
}

// ServeAdmin answers RocketMQ 5.3's user and ACL codes (3001-3010): the
// response code, its remark and body. The request has passed Check (the
// caller has Update or Get on the cluster, or is a super user); only a
// super user may create, change or delete a super user. Users and ACLs
// the ACL file defines are the file's: changing them here is refused
// (edit the file). Changes are persisted before they are answered and are
// in force for the next request. GET and LIST never return a password.
func (g *Guard) ServeAdmin(req *protocol.Command) (code int32, remark string, body []byte) {
	body, err := g.serveAdmin(req)
	if err != nil {
		var ae *adminError
		switch {
		case errors.As(err, &ae):
			return ae.code, ae.msg, nil
		case errors.Is(err, ErrInvalid):
			return protocol.RespNoPermission, err.Error(), nil
		}
		g.log.Error("acl: admin request failed", "code", req.Code, "err", err)
		return protocol.RespSystemError, err.Error(), nil
	}
	return protocol.RespSuccess, "", body
}

func (g *Guard) serveAdmin(req *protocol.Command) ([]byte, error) {
	ext := &req.Ext
	get := func(k string) string { v, _ := ext.GetString(k); return v }
	callerSuper := g.callerIsSuper(req)
	g.mu.Lock()
	defer g.mu.Unlock()
	switch req.Code {
	case protocol.ReqAuthCreateUser, protocol.ReqAuthUpdateUser:
		name := get("username")
		if name == "" {
			return nil, &adminError{respInvalidParameter, "The username is blank"}
		}
		var ui UserInfo
		if err := decodeJSON(req.Body, &ui); err != nil {
			return nil, err
		}
		ui.Username = name
		if err := g.fileOwnsLocked(name); err != nil {
			return nil, err
		}
		old, exists := g.store.users[name]
		if req.Code == protocol.ReqAuthCreateUser {
			if exists {
				return nil, noPermission("The user is existed")
			}
			u, err := ui.user()
			if err != nil {
				return nil, err
			}
			if u.Type == Super && !callerSuper {
				return nil, &adminError{protocol.RespSystemError, "The super user can only be create by super user"}
			}
			return nil, g.changeLocked(func() { g.store.users[name] = u })
		}
		if !exists {
			return nil, noPermission("The user is not exist")
		}
		u := old
		if old.Type == Super && !callerSuper {
			return nil, noPermission("The super user can only be update by super user")
		}
		if ui.Password != "" {
			u.Password = ui.Password
		}
		if ui.UserType != "" {
			t, err := ParseUserType(ui.UserType)
			if err != nil {
				return nil, err
			}
			if t == Super && !callerSuper {
				return nil, &adminError{protocol.RespSystemError, "The super user can only be update by super user"}
			}
			u.Type = t
		}
		if ui.UserStatus != "" {
			probe := UserInfo{Username: name, Password: "x", UserStatus: ui.UserStatus}
			pu, err := probe.user()
			if err != nil {
				return nil, err
			}
			u.Disabled = pu.Disabled
		}
		return nil, g.changeLocked(func() { g.store.users[name] = u })

	case protocol.ReqAuthDeleteUser:
		name := get("username")
		if err := g.fileOwnsLocked(name); err != nil {
			return nil, err
		}
		u, exists := g.store.users[name]
		if !exists {
			return nil, nil
		}
		if u.Type == Super && !callerSuper {
			return nil, noPermission("The super user can only be update by super user")
		}
		return nil, g.changeLocked(func() {
			delete(g.store.users, name)
			delete(g.store.acls, name)
		})

	case protocol.ReqAuthGetUser:
		name := get("username")
		if name == "" {
			return nil, &adminError{respInvalidParameter, "The username is blank"}
		}
		p := g.snap.Load().users[name]
		if p == nil {
			return nil, nil
		}
		return json.Marshal(p.user.info(false))

	case protocol.ReqAuthListUser:
		filter := get("filter")
		var out []UserInfo
		for _, p := range g.sortedPrincipals() {
			if filter == "" || strings.Contains(p.user.Name, filter) {
				out = append(out, p.user.info(false))
			}
		}
		if len(out) == 0 {
			return nil, nil
		}
		return json.Marshal(out)

	case protocol.ReqAuthCreateACL, protocol.ReqAuthUpdateACL:
		var ai AclInfo
		if err := decodeJSON(req.Body, &ai); err != nil {
			return nil, err
		}
		subject := get("subject")
		if subject == "" {
			subject = ai.Subject
		}
		a, err := ai.acl(subject)
		if err != nil {
			return nil, err
		}
		if err := g.fileOwnsLocked(a.User); err != nil {
			return nil, err
		}
		if _, ok := g.store.users[a.User]; !ok {
			return nil, noPermission("The subject of User:%s is not exist.", a.User)
		}
		merged := ACL{User: a.User}
		if old, ok := g.store.acls[a.User]; ok {
			merged.Policies = slices.Clone(old.Policies)
		}
		merged.merge(a.Policies)
		return nil, g.changeLocked(func() { g.store.acls[a.User] = merged })

	case protocol.ReqAuthDeleteACL:
		user, err := ParseSubject(get("subject"))
		if err != nil {
			return nil, err
		}
		if err := g.fileOwnsLocked(user); err != nil {
			return nil, err
		}
		if _, ok := g.store.users[user]; !ok {
			return nil, noPermission("The subject is not exist.")
		}
		old, ok := g.store.acls[user]
		if !ok {
			return nil, noPermission("The acl is not exist.")
		}
		res := get("resource")
		if res == "" {
			return nil, g.changeLocked(func() { delete(g.store.acls, user) })
		}
		r, err := ParseResource(res)
		if err != nil {
			return nil, err
		}
		t, err := ParsePolicyType(get("policyType"))
		if err != nil {
			return nil, err
		}
		a := ACL{User: user, Policies: slices.Clone(old.Policies)}
		left := a.remove(t, r)
		return nil, g.changeLocked(func() {
			if left {
				g.store.acls[user] = a
			} else {
				delete(g.store.acls, user)
			}
		})

	case protocol.ReqAuthGetACL:
		user, err := ParseSubject(get("subject"))
		if err != nil {
			return nil, err
		}
		a, ok := g.aclLocked(user)
		if !ok {
			if g.snap.Load().users[user] == nil {
				return nil, noPermission("The subject is not exist.")
			}
			return nil, nil
		}
		return json.Marshal(a.info())

	case protocol.ReqAuthListACL:
		sf, rf := get("subjectFilter"), get("resourceFilter")
		var out []AclInfo
		for _, p := range g.sortedPrincipals() {
			a, ok := g.aclLocked(p.user.Name)
			if !ok || sf != "" && !strings.Contains(a.Subject(), sf) {
				continue
			}
			if rf != "" {
				keep := false
				for _, pol := range a.Policies {
					for _, e := range pol.Entries {
						keep = keep || strings.Contains(e.Resource.String(), rf)
					}
				}
				if !keep {
					continue
				}
			}
			out = append(out, a.info())
		}
		if len(out) == 0 {
			return nil, nil
		}
		return json.Marshal(out)
	}
	return nil, &adminError{protocol.RespRequestCodeNotSupported, fmt.Sprintf("request code %d is not an ACL admin code", req.Code)}
}

// callerIsSuper reports whether the request's signer is a super user. With
// every request checked before it gets here, an unsigned caller is one
// from a global white address (RocketMQ treats a request without an
// AccessKey as a super user's: authentication is off for it).
func (g *Guard) callerIsSuper(req *protocol.Command) bool {
	ak, ok := auth.AccessKey(req)
	if !ok {
		return true
	}
	p := g.snap.Load().users[string(ak)]
	return p != nil && p.user.Type == Super
}

// fileOwnsLocked refuses changes to a name the ACL file defines.
func (g *Guard) fileOwnsLocked(name string) error {
	if g.file == nil {
		return nil
	}
	for _, u := range g.file.Users {
		if u.Name == name {
			return noPermission("User:%s is defined in the ACL file %s; change it there", name, g.opts.File)
		}
	}
	return nil
}

// aclLocked returns the ACL in force for a user (the file's or the
// store's).
func (g *Guard) aclLocked(user string) (ACL, bool) {
	if g.file != nil {
		for _, a := range g.file.ACLs {
			if a.User == user {
				return a, true
			}
		}
		for _, u := range g.file.Users {
			if u.Name == user {
				return ACL{}, false
			}
		}
	}
	a, ok := g.store.acls[user]
	return a, ok
}

func (g *Guard) sortedPrincipals() []*principal {
	s := g.snap.Load()
	out := make([]*principal, 0, len(s.users))
	for _, p := range s.users {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *principal) int { return strings.Compare(a.user.Name, b.user.Name) })
	return out
}

// changeLocked applies a change to the store, persists it (undoing it if
// that fails) and publishes the new rules.
func (g *Guard) changeLocked(apply func()) error {
	users, acls := cloneMap(g.store.users), cloneMap(g.store.acls)
	apply()
	if err := g.store.save(); err != nil {
		g.store.users, g.store.acls = users, acls
		return err
	}
	g.publishLocked()
	return nil
}

func cloneMap[V any](m map[string]V) map[string]V {
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
