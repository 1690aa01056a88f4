// Package opauth guards the operator's HTTP endpoints when access control
// is on: the broker's Prometheus text (/metrics on --metrics-listen) and
// the pprof listener of apogee-broker, apogee-namesrv and
// apogee-controller. It also holds the limit on failed logins per source
// that the dashboard's login form shares (Failures).
//
// Authentication is HTTP basic authentication with an ACL user: the user
// name is the access key, the password the secret key (what Prometheus's
// scrape configuration sends with basic_auth). What the user may do is a
// second check the caller gives (Options.Permit): Get on the Cluster
// resource for /metrics, a Super user for pprof. The package imports
// nothing of the module: package acl's *Guard is its Users.
//
// # Invariants
//
//   - Without credentials a request is answered 401 with
//     `WWW-Authenticate: Basic realm="apogee"` and reaches nothing behind
//     the guard; a global white address of the ACL (Users.AllowWhite)
//     needs no credentials, as on the remoting port.
//   - A source whose logins failed MaxFailures times within Window is
//     answered 429 (with Retry-After) before its password is checked,
//     until the window ends; the sources counted are bounded (MaxSources,
//     beyond which new sources share one count).
//   - A wrong password is 401, a right one without the permission 403;
//     both are reported to Users.Refused, which counts and logs them
//     (rate-limited, never with the password).
//   - pprof is refused on an address that is not loopback unless the
//     operator allows it (CheckPprofAddr); allowed, it logs a WARN at
//     start saying who can reach it.
package opauth

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strconv"
	"time"
)

// Realm is the realm of the basic-authentication challenge.
const Realm = "apogee"

// challenge is the WWW-Authenticate header of a 401.
const challenge = `Basic realm="` + Realm + `"`

// Users is the access control the endpoints log users in with; package
// acl's *Guard implements it.
type Users interface {
	// Login checks a user name and password (the user's secret key).
	Login(user, password string) error
	// AllowWhite reports whether ip is a global white address, whose
	// requests pass without credentials.
	AllowWhite(ip netip.Addr) bool
	// Refused counts and logs a refusal (op names the endpoint, user is
	// who logged in or tried to).
	Refused(op, user string, ip netip.Addr, err error)
}

// Options configure Require.
type Options struct {
	// Users log users in (required).
	Users Users
	// Permit checks that an authenticated user may use the endpoint from
	// ip; its error is answered 403 with its text. Nil permits every
	// authenticated user.
	Permit func(user string, ip netip.Addr) error
	// Op names the endpoint in refusals ("metrics", "pprof").
	Op string
	// Failures counts failed logins per source (nil: the handler's own).
	Failures *Failures
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Require returns next behind basic authentication as o says.
func Require(next http.Handler, o Options) http.Handler {
	if o.Failures == nil {
		o.Failures = NewFailures()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &guarded{next: next, o: o}
}

type guarded struct {
	next http.Handler
	o    Options
}

func (g *guarded) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ip := RemoteIP(r)
	if g.o.Users.AllowWhite(ip) {
		g.next.ServeHTTP(w, r)
		return
	}
	user, password, ok := r.BasicAuth()
	if !ok {
		// The first request of a browser or a scraper without
		// credentials: a challenge, not a failed login.
		unauthorized(w, "authentication required: access control is on; send HTTP basic authentication with an ACL user (its access key and secret key)")
		return
	}
	now := g.o.Now()
	if blocked, until := g.o.Failures.Blocked(ip, now); blocked {
		w.Header().Set("Retry-After", strconv.Itoa(int(until.Sub(now).Seconds())+1))
		http.Error(w, fmt.Sprintf("refused: %d failed logins from %s; try again after %s", MaxFailures, ip, until.UTC().Format(time.TimeOnly)), http.StatusTooManyRequests)
		return
	}
	if err := g.o.Users.Login(user, password); err != nil {
		g.o.Failures.Fail(ip, now)
		g.o.Users.Refused(g.o.Op, user, ip, err)
		unauthorized(w, "wrong user name or password (an ACL user's access key and secret key)")
		return
	}
	g.o.Failures.Clear(ip)
	if g.o.Permit != nil {
		if err := g.o.Permit(user, ip); err != nil {
			g.o.Users.Refused(g.o.Op, user, ip, err)
			http.Error(w, err.Error(), http.StatusForbidden)
			return
		}
	}
	g.next.ServeHTTP(w, r)
}

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", challenge)
	http.Error(w, msg, http.StatusUnauthorized)
}

// RemoteIP is the source address of r (the zero Addr when unreadable).
func RemoteIP(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// IsLoopback reports whether a listener's address is a loopback one (an
// unspecified address, 0.0.0.0 or ::, is not).
func IsLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// ---- pprof ----

// PprofAllowRemoteFlag is the flag of the three commands that allows pprof
// on an address that is not loopback.
const PprofAllowRemoteFlag = "--pprof-allow-remote"

// ErrPprofNotLoopback is CheckPprofAddr's error for an address that is not
// loopback without the operator's override.
var ErrPprofNotLoopback = errors.New("pprof refused on an address that is not loopback")

// CheckPprofAddr checks the bound pprof listener's address: loopback, or
// allowed by the operator (PprofAllowRemoteFlag).
func CheckPprofAddr(a net.Addr, allowRemote bool) error {
	if IsLoopback(a) || allowRemote {
		return nil
	}
	return fmt.Errorf("--pprof %s: %w: profiles show the process's memory (messages, credentials) and a CPU profile or trace stalls it; "+
		"bind it to loopback (--pprof 127.0.0.1:PORT) and reach it through an SSH tunnel, or pass %s to serve it there anyway",
		a, ErrPprofNotLoopback, PprofAllowRemoteFlag)
}

// PprofHandler is net/http/pprof's endpoints under /debug/pprof/ on a mux
// of their own (the process's DefaultServeMux is not served).
func PprofHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Supers are Users who can tell a Super user (package acl's *Guard).
type Supers interface {
	Users
	// RequireSuper checks that user is an enabled Super user.
	RequireSuper(user string) error
}

// ServePprof serves pprof on ln, the bound --pprof listener, until ln is
// closed. An address that is not loopback is refused (CheckPprofAddr's
// error, nothing served) unless allowRemote, and logs a WARN when
// allowed. With users (access control on; a nil interface when off, never
// a nil *acl.Guard) every request needs basic authentication with a Super
// user.
func ServePprof(ln net.Listener, allowRemote bool, users Supers, logger *slog.Logger) error {
	if err := CheckPprofAddr(ln.Addr(), allowRemote); err != nil {
		return err
	}
	h := PprofHandler()
	if users != nil {
		h = Require(h, Options{Users: users, Op: "pprof",
			Permit: func(user string, _ netip.Addr) error { return users.RequireSuper(user) }})
	}
	if !IsLoopback(ln.Addr()) {
		if users == nil {
			logger.Warn("pprof: served on an address that is not loopback WITHOUT authentication ("+PprofAllowRemoteFlag+"): anyone who reaches it reads the process's memory and can stall it; "+
				"bind --pprof to 127.0.0.1, or turn access control on (--acl-file) so that it needs a Super user",
				"addr", ln.Addr().String())
		} else {
			logger.Warn("pprof: served on an address that is not loopback ("+PprofAllowRemoteFlag+"); it needs a Super ACL user, whose secret key travels in clear text: "+
				"bind --pprof to 127.0.0.1 and reach it through an SSH tunnel",
				"addr", ln.Addr().String())
		}
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	go srv.Serve(ln) // returns when ln is closed
	return nil
}
