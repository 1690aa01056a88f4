package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apogeemq/apogee/internal/opauth"
	"github.com/apogeemq/apogee/protocol"
)

// Users is the access control a dashboard logs its users in with when the
// broker checks its clients' credentials: package acl's *Guard implements
// it, so a login is an ACL user and an action is allowed by that user's
// policies exactly as the remoting request that makes the same change.
type Users interface {
	// Login checks a user name and password (the user's secret key).
	Login(user, password string) error
	// AuthorizeRequest checks that user may make req (a remoting request
	// carrying the header fields of the action) from ip.
	AuthorizeRequest(user string, ip netip.Addr, req *protocol.Command) error
}

// refusal is an error a page answers with 403 (a policy, a missing login).
type refusal struct{ msg string }

func (e *refusal) Error() string { return e.msg }

func refused(format string, args ...any) error { return &refusal{fmt.Sprintf(format, args...)} }

// errLoginNeeded is what an action answers under ACL without a login.
var errLoginNeeded = &refusal{"log in to act: this broker checks its clients' credentials (ACL), and the dashboard acts as the ACL user logged in; without a login it is read-only"}

// ---- Host names (DNS rebinding) ----

// hostCheck decides which names the dashboard answers under. A page on
// another site can make the browser send requests here by resolving its own
// name to this address (DNS rebinding); the browser then sends that name
// as Host. Allowed: IP addresses of this machine (loopback, the address
// the request arrived on, its interfaces' addresses), localhost names, the
// machine's host name, and the names an operator configures (Options.Hosts).
type hostCheck struct {
	names    map[string]bool // lower case, no trailing dot: configured names and IPs, the host name
	suffixes []string        // ".example.com" for "*.example.com"
	any      bool            // "*": every name

	mu        sync.Mutex
	ifaddrs   map[netip.Addr]bool // the interfaces' addresses
	refreshed time.Time           // when ifaddrs was read
	warned    map[string]bool     // names refused and logged
}

// maxWarnedHosts bounds the names refused with a log line each.
const maxWarnedHosts = 64

// ifaddrsRefresh is the least time between two reads of the interfaces'
// addresses on a refused IP (addresses can change: DHCP, a new interface).
const ifaddrsRefresh = 10 * time.Second

func newHostCheck(configured []string) (*hostCheck, error) {
	h := &hostCheck{names: map[string]bool{}, warned: map[string]bool{}}
	for _, n := range configured {
		n = canonicalHost(strings.TrimSpace(n))
		switch {
		case n == "":
			continue
		case n == "*":
			h.any = true
		case strings.HasPrefix(n, "*."):
			h.suffixes = append(h.suffixes, n[1:])
		case strings.ContainsAny(n, "/ *"):
			return nil, fmt.Errorf("dashboard: host %q: want a name, *.domain, an IP address or *", n)
		default:
			if a, err := netip.ParseAddr(n); err == nil {
				n = a.Unmap().String()
			} else if strings.Contains(n, ":") {
				return nil, fmt.Errorf("dashboard: host %q: give the name without a port", n)
			}
			h.names[n] = true
		}
	}
	if hn, err := os.Hostname(); err == nil && hn != "" {
		hn = canonicalHost(hn)
		h.names[hn] = true
		if short, _, ok := strings.Cut(hn, "."); ok {
			h.names[short] = true
		}
	}
	h.ifaddrs = interfaceAddrs()
	h.refreshed = time.Now()
	return h, nil
}

// canonicalHost lower-cases a host name and drops a trailing dot and IPv6
// brackets.
func canonicalHost(s string) string {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	return strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
}

func interfaceAddrs() map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return m
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			m[p.Addr().Unmap().WithZone("")] = true
		}
	}
	return m
}

// hostOf is r's Host header without its port, canonical.
func hostOf(r *http.Request) string {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return canonicalHost(host)
}

// allowed reports whether the dashboard answers r's Host. A request
// without one (HTTP/1.0; no browser sends it) is answered.
func (h *hostCheck) allowed(r *http.Request) bool {
	host := hostOf(r)
	if host == "" || h.any || h.names[host] {
		return true
	}
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap().WithZone("")
		if a.IsLoopback() || a == localAddr(r) || h.names[a.String()] {
			return true
		}
		return h.isInterfaceAddr(a)
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") || host == "localhost.localdomain" ||
		host == "ip6-localhost" || host == "ip6-loopback" {
		return true
	}
	for _, s := range h.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

func (h *hostCheck) isInterfaceAddr(a netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ifaddrs[a] {
		return true
	}
	if time.Since(h.refreshed) < ifaddrsRefresh {
		return false
	}
	h.ifaddrs, h.refreshed = interfaceAddrs(), time.Now()
	return h.ifaddrs[a]
}

// firstRefusal reports whether host is refused for the first time (and
// should be logged), for up to maxWarnedHosts names.
func (h *hostCheck) firstRefusal(host string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.warned[host] || len(h.warned) >= maxWarnedHosts {
		return false
	}
	h.warned[host] = true
	return true
}

// localAddr is the address r arrived on (the listener's own address).
func localAddr(r *http.Request) netip.Addr {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ta, ok := a.(*net.TCPAddr); ok {
			return ta.AddrPort().Addr().Unmap().WithZone("")
		}
	}
	return netip.Addr{}
}

// remoteIP is the address r came from.
func remoteIP(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// refuseHost answers a request for a name the dashboard does not answer
// under, saying how to allow it; the first refusal of each name is logged.
func (d *Dashboard) refuseHost(w http.ResponseWriter, r *http.Request) {
	host := hostOf(r)
	if d.hosts.firstRefusal(host) {
		d.o.Logger.Warn("dashboard: refused a request for a name this listener does not answer under (a page on another site resolving its name here, DNS rebinding, sends such requests); if operators reach the dashboard by this name, allow it",
			"host", host, "remote", r.RemoteAddr, "allow_with", d.o.HostsHint)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusForbidden)
	fmt.Fprintf(w, "403 refused: this dashboard does not answer to the name %q (the request's Host).\n"+
		"A web page on another site that resolves its own name to this address (DNS rebinding) sends such requests.\n"+
		"If you reach the dashboard by this name, allow it: %s.\n", host, strings.ReplaceAll(d.o.HostsHint, "NAME", host))
}

// sameOrigin checks a state-changing request's Origin, or without one its
// Referer: when the browser sends either, it must name this host (with
// its port). A request with neither is no browser's cross-site request.
func sameOrigin(r *http.Request) (bool, string) {
	for _, hdr := range []string{"Origin", "Referer"} {
		v := r.Header.Get(hdr)
		if v == "" {
			continue
		}
		u, err := url.Parse(v)
		if v == "null" || err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return false, fmt.Sprintf("refused: the request came from another site (%s %s, this site %s)", hdr, v, r.Host)
		}
		return true, ""
	}
	return true, ""
}

// ---- Confirmation tokens ----

// A token authenticates, under the process's secret, the action, the
// value of each field the confirmation page showed, the session it was
// shown to (none without a login) and its expiry: "expiry.mac", expiry in
// Unix seconds, mac an HMAC-SHA256 in hex. The fields are
// length-prefixed, so no two forms map to the same input.

func (d *Dashboard) tokenMAC(action, sid string, exp int64, fields []string, v url.Values) string {
	m := hmac.New(sha256.New, d.secret[:])
	fmt.Fprintf(m, "apogee-dashboard-token\x00%d:%s%d:%s%d", len(action), action, len(sid), sid, exp)
	for _, f := range fields {
		val := v.Get(f)
		fmt.Fprintf(m, "\x00%d:%s=%d:%s", len(f), f, len(val), val)
	}
	return hex.EncodeToString(m.Sum(nil))
}

// newToken mints a token for action with the fields' values v, for the
// session sid ("" without a login), valid for TokenTTL.
func (d *Dashboard) newToken(action, sid string, fields []string, v url.Values) string {
	exp := d.o.Now().Add(d.o.TokenTTL).Unix()
	return strconv.FormatInt(exp, 10) + "." + d.tokenMAC(action, sid, exp, fields, v)
}

// Why a token is refused.
var (
	errTokenMissing  = errors.New("refused: the confirmation's token is missing; confirm the action on its confirmation page")
	errTokenExpired  = errors.New("refused: the confirmation has expired; confirm the action again")
	errTokenMismatch = errors.New("refused: the confirmation's token does not match this action, these values or this login (a form changed after its confirmation?); confirm the action again")
)

// checkToken checks that tok was minted for action, the values v of
// fields and the session sid, and has not expired.
func (d *Dashboard) checkToken(action, sid string, fields []string, v url.Values, tok string) error {
	es, mac, ok := strings.Cut(tok, ".")
	if tok == "" || !ok {
		return errTokenMissing
	}
	exp, err := strconv.ParseInt(es, 10, 64)
	if err != nil {
		return errTokenMismatch
	}
	if !hmac.Equal([]byte(d.tokenMAC(action, sid, exp, fields, v)), []byte(mac)) {
		return errTokenMismatch
	}
	if d.o.Now().Unix() > exp {
		return errTokenExpired
	}
	return nil
}

// ---- Sessions ----

// sessionCookie names the login's cookie.
const sessionCookie = "apogee_dashboard_session"

// maxSessions bounds the logins held; a login beyond it ends the one
// closest to expiry.
const maxSessions = 1024

type session struct {
	user    string
	expires time.Time
}

// sessions are the logins, by id (32 random bytes, base64url).
type sessions struct {
	mu sync.Mutex
	m  map[string]session
}

func (s *sessions) add(user string, expires, now time.Time) (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	id := base64.RawURLEncoding.EncodeToString(b[:])
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range s.m {
		if !now.Before(v.expires) {
			delete(s.m, k)
		}
	}
	if len(s.m) >= maxSessions {
		var oldest string
		for k, v := range s.m {
			if oldest == "" || v.expires.Before(s.m[oldest].expires) {
				oldest = k
			}
		}
		delete(s.m, oldest)
	}
	s.m[id] = session{user: user, expires: expires}
	return id, nil
}

func (s *sessions) get(id string, now time.Time) (session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[id]
	if ok && !now.Before(v.expires) {
		delete(s.m, id)
		return session{}, false
	}
	return v, ok
}

func (s *sessions) remove(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, id)
}

// login is who r is logged in as: the session id and the user ("" for
// both without a valid login).
func (d *Dashboard) login(r *http.Request) (sid, user string) {
	if d.o.Users == nil {
		return "", ""
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", ""
	}
	s, ok := d.sessions.get(c.Value, d.o.Now())
	if !ok {
		return "", ""
	}
	return c.Value, s.user
}

func (d *Dashboard) setCookie(w http.ResponseWriter, r *http.Request, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
}

// ---- Failed logins ----

// Failed logins are limited per source address (package opauth's
// Failures, which the broker's basic authentication of /metrics shares
// the rules of): opauth.MaxFailures within opauth.Window, then every login
// from it is refused until the window ends.

// ---- Login and logout pages ----

type loginData struct {
	Token, User string
	Enabled     bool
}

// loginPage renders the login form (GET /login).
func (d *Dashboard) loginPage(r *http.Request) (any, error) {
	if d.o.Users == nil {
		return loginData{}, errors.New("this broker does not check its clients' credentials (no ACL): the dashboard needs no login")
	}
	_, user := d.login(r)
	return loginData{Enabled: true, User: user, Token: d.newToken("login", "", nil, nil)}, nil
}

// doLogin checks a POST /login and starts a session.
func (d *Dashboard) doLogin(w http.ResponseWriter, r *http.Request) {
	v := d.newView(r, "login")
	fail := func(status int, msg string) {
		v.Err = msg
		v.Data = loginData{Enabled: d.o.Users != nil, Token: d.newToken("login", "", nil, nil)}
		d.render(w, status, "login", v)
	}
	if d.o.Users == nil {
		fail(http.StatusNotFound, "this broker does not check its clients' credentials (no ACL): the dashboard needs no login")
		return
	}
	if err := r.ParseForm(); err != nil {
		fail(http.StatusBadRequest, err.Error())
		return
	}
	if ok, why := sameOrigin(r); !ok {
		fail(http.StatusForbidden, why)
		return
	}
	if err := d.checkToken("login", "", nil, nil, r.PostForm.Get("token")); err != nil {
		fail(http.StatusForbidden, err.Error())
		return
	}
	ip, now := remoteIP(r), d.o.Now()
	if b, until := d.failures.Blocked(ip, now); b {
		w.Header().Set("Retry-After", strconv.Itoa(int(until.Sub(now).Seconds())+1))
		fail(http.StatusTooManyRequests, fmt.Sprintf("refused: %d failed logins from %s; try again after %s", opauth.MaxFailures, ip, until.Format("15:04:05")))
		return
	}
	user := r.PostForm.Get("user")
	if err := d.o.Users.Login(user, r.PostForm.Get("password")); err != nil {
		d.failures.Fail(ip, now)
		d.o.Logger.Warn("dashboard: login refused", "user", user, "remote", r.RemoteAddr, "err", err)
		fail(http.StatusForbidden, "wrong user name or password (the ACL user's access key and secret key)")
		return
	}
	d.failures.Clear(ip)
	if old, _ := d.login(r); old != "" {
		d.sessions.remove(old) // a new login, a new session id
	}
	sid, err := d.sessions.add(user, now.Add(d.o.SessionTTL), now)
	if err != nil {
		fail(http.StatusInternalServerError, err.Error())
		return
	}
	d.setCookie(w, r, sid, int(d.o.SessionTTL.Seconds()))
	d.o.Logger.Info("dashboard: login", "user", user, "remote", r.RemoteAddr)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// doLogout ends the session (POST /logout with its token).
func (d *Dashboard) doLogout(w http.ResponseWriter, r *http.Request) {
	v := d.newView(r, "login")
	if err := r.ParseForm(); err != nil {
		v.Err = err.Error()
		d.render(w, http.StatusBadRequest, "login", v)
		return
	}
	if ok, why := sameOrigin(r); !ok {
		v.Err = why
		d.render(w, http.StatusForbidden, "login", v)
		return
	}
	sid, user := d.login(r)
	if sid != "" {
		if err := d.checkToken("logout", sid, nil, nil, r.PostForm.Get("token")); err != nil {
			v.Err = err.Error()
			d.render(w, http.StatusForbidden, "login", v)
			return
		}
		d.sessions.remove(sid)
		d.o.Logger.Info("dashboard: logout", "user", user, "remote", r.RemoteAddr)
	}
	d.setCookie(w, r, "", -1)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}
