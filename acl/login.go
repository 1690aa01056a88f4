package acl

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/netip"

	"github.com/apogeemq/apogee/protocol"
)

// What the broker's dashboard and the operator's HTTP endpoints (/metrics,
// pprof: package opauth) need: a login with a user's name and password
// (its secret key), the check of an action by the request code that makes
// the same change on the remoting port, and the check of a Super user.

// ErrBadPassword is Login's error for a known, enabled user whose password
// does not match.
var ErrBadPassword = errors.New("acl: wrong password")

// Login checks that user is an enabled user whose secret key is password.
// Its error wraps ErrUnknownUser or ErrBadPassword; a caller shows neither
// apart to whoever logs in. The comparison takes the same time whatever
// the password (and for an unknown user). Nothing is counted or logged
// here: the caller logs the failures it refuses.
func (g *Guard) Login(user, password string) error {
	p := g.snap.Load().users[user]
	want := ""
	if p != nil {
		want = p.user.Password
	}
	// Digests of equal length: the comparison tells nothing of the
	// password's length either.
	w, g2 := sha256.Sum256([]byte(want)), sha256.Sum256([]byte(password))
	match := subtle.ConstantTimeCompare(w[:], g2[:]) == 1
	switch {
	case p == nil || p.user.Disabled:
		return fmt.Errorf("%w: %q", ErrUnknownUser, user)
	case !match || want == "":
		return fmt.Errorf("%w for user %q", ErrBadPassword, user)
	}
	return nil
}

// AuthorizeRequest checks that the authenticated user may make req from
// ip: the permissions req's code needs with its header fields and body
// (the table of codes.go, as Check decides them once a request's
// signature is verified), so another front end that makes the change req
// stands for is held to the remoting port's rules. Its error wraps
// ErrDenied and reads as the remoting front end's remark.
func (g *Guard) AuthorizeRequest(user string, ip netip.Addr, req *protocol.Command) error {
	var buf [8]Check
	cs, err := checks(req, g.snap.Load().cluster, buf[:0])
	if err != nil {
		g.denied.Add(1)
		g.noPerm.Add(1)
		return fmt.Errorf("%w: cannot tell what the request needs: %w", ErrDenied, err)
	}
	return g.Authorize(user, ip, cs...)
}

// RequireSuper checks that user is an enabled Super user: what an operator
// endpoint that shows the process's memory (pprof) needs. Its error wraps
// ErrDenied; it counts as Authorize does.
func (g *Guard) RequireSuper(user string) error {
	p := g.snap.Load().users[user]
	switch {
	case p == nil || p.user.Disabled:
		g.denied.Add(1)
		return fmt.Errorf("%w: %w: %q", ErrDenied, ErrUnknownUser, user)
	case p.user.Type != Super:
		g.denied.Add(1)
		g.noPerm.Add(1)
		return fmt.Errorf("%w: the User:%s is not a Super user (pprof shows the process's memory: only Super users may read it)", ErrDenied, user)
	}
	g.allowed.Add(1)
	return nil
}
