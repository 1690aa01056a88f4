package acl

import (
	"errors"
	"net/netip"
)

// What a front end other than remoting's (gRPC) needs besides
// AuthenticateV2 and Authorize: the global white addresses, and the
// counting and logging of its refusals as Check does them.

// AllowWhite reports whether ip is one of the global white addresses (a
// RocketMQ 4 plain_acl.yml's globalWhiteRemoteAddresses), whose requests
// pass unchecked, and counts it as allowed when it is. It allocates
// nothing.
func (g *Guard) AllowWhite(ip netip.Addr) bool {
	s := g.snap.Load()
	if len(s.white) == 0 || !matchIP(s.white, ip) {
		return false
	}
	g.allowed.Add(1)
	return true
}

// Refused logs a refusal a front end answers (at most denyLogBurst lines a
// second with Check's, the rest counted): the front end's operation, the
// user ("" when none was authenticated), the source address and err's
// text, which never holds a secret or a signature (AuthenticateV2's and
// Authorize's errors do not). An authentication failure (any error but
// one wrapping ErrDenied, which Authorize counted) is counted here, by
// its cause: no authorization header as unsigned, an unknown user, and
// the rest (malformed header, clock skew, signature) as a bad signature.
func (g *Guard) Refused(op, user string, ip netip.Addr, err error) {
	if !errors.Is(err, ErrDenied) {
		g.denied.Add(1)
		switch {
		case errors.Is(err, ErrNoCredentials):
			g.unsigned.Add(1)
		case errors.Is(err, ErrUnknownUser):
			g.unknown.Add(1)
		default:
			g.badSig.Add(1)
		}
	}
	if g.logs.allow() {
		g.log.Warn("acl: request refused", "op", op, "user", user, "remote", ip.String(), "reason", err.Error(),
			"refusals_not_logged_before", g.logs.takeSuppressed())
	}
}

// ErrNoCredentials is AuthenticateV2's error for a request that carries no
// authorization header at all (a client without credentials).
var ErrNoCredentials = errors.New("acl: the request carries no authorization header (the client has no credentials)")
