package acl

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/apogeemq/apogee/protocol"
)

// TestLoginAndAuthorizeRequest: a login needs an enabled user and its
// secret key; an action is decided by the permissions of the request code
// that makes it, as Check decides a signed request of that code.
func TestLoginAndAuthorizeRequest(t *testing.T) {
	g := openGuard(t, writeFile(t, t.TempDir(), "acl.yml", projectFile))
	for _, tc := range []struct {
		user, password string
		want           error
	}{
		{"admin", "admin-secret", nil},
		{"alice", "alice-secret", nil},
		{"alice", "admin-secret", ErrBadPassword},
		{"alice", "", ErrBadPassword},
		{"bob", "bob-secret", ErrUnknownUser}, // disabled
		{"nobody", "x", ErrUnknownUser},
	} {
		if err := g.Login(tc.user, tc.password); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("Login(%s, %s): %v, want %v", tc.user, tc.password, err, tc.want)
		}
	}
	ip := netip.MustParseAddr("127.0.0.1")
	create := func(topic string) *protocol.Command { return req(protocol.ReqUpdateAndCreateTopic, "topic", topic) }
	for _, tc := range []struct {
		user string
		req  *protocol.Command
		ok   bool
	}{
		{"admin", create("anything"), true},
		{"alice", create("orders-new"), true}, // All on orders-*
		{"alice", create("orders"), false},    // Pub and Sub only
		{"alice", req(protocol.ReqInvokeBrokerToResetOffset, "group", "billing", "topic", "orders"), false},
		{"alice", req(protocol.ReqConsumeMessageDirectly, "consumerGroup", "billing", "clientId", "c", "msgId", "m"), false}, // the cluster's Update
		{"bob", create("orders-new"), false},
	} {
		err := g.AuthorizeRequest(tc.user, ip, tc.req)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrDenied)) {
			t.Errorf("%s %s: %v, want ok=%v", tc.user, protocol.RequestCodeName(tc.req.Code), err, tc.ok)
		}
		// The remoting port decides the same signed request the same way.
		pw := map[string]string{"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}[tc.user]
		if ok, _, _ := g.Check(local, signed(tc.req, tc.user, pw)); ok != tc.ok {
			t.Errorf("%s %s through Check: %v, want %v", tc.user, protocol.RequestCodeName(tc.req.Code), ok, tc.ok)
		}
	}
}
