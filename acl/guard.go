package acl

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/internal/logthrottle"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/protocol"
)

// Defaults of Options.
const (
	DefaultReloadInterval = 2 * time.Second
	DefaultClusterName    = "DefaultCluster"
)

// Options configure a Guard. The zero value of a field means its default.
type Options struct {
	// File is the ACL file (the project's format or RocketMQ 4's
	// plain_acl.yml), watched for changes every ReloadInterval and
	// reloaded without a restart. Empty: no file.
	File string
	// Dir is where the users and ACLs created through the admin codes are
	// kept (StoreFile, KeyFile). Empty: in memory only.
	Dir string
	// ClusterName names the Cluster resource admin codes need rights on.
	// Default DefaultClusterName.
	ClusterName string
	// ReloadInterval is how often File is checked for a change. Default
	// DefaultReloadInterval (2 s).
	ReloadInterval time.Duration
	// ReloadErrorLogInterval: a version of File that does not load is
	// logged once per this interval, with the count of the failed checks
	// in between. Default logthrottle.DefaultInterval (1 min).
	ReloadErrorLogInterval time.Duration
	// MaxSkew bounds a gRPC request's x-mq-date-time. Default
	// auth.DefaultMaxSkew (15 min).
	MaxSkew time.Duration
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
	// Logger receives reloads and denials (at most denyLogBurst lines a
	// second; the rest are counted). Default slog.Default().
	Logger *slog.Logger
	// FS is the file system File is read through and Dir's files are
	// read and written through. Default vfs.Default; tests wrap it.
	FS vfs.FS
	// InitUsers are created at Open as super users (whatever their Type
	// says), each only when no user of its name exists, in the file or in
	// the store: RocketMQ 5.3's initAuthenticationUser and
	// innerClientAuthenticationCredentials. They are kept in the store
	// like users the admin codes create (changed or deleted there later);
	// one that exists is left as it is (a different password is logged,
	// never the password). How a first user comes to exist when the
	// broker starts with access control on and no file.
	InitUsers []User
}

// Stats are a Guard's counters.
type Stats struct {
	Allowed, Denied       uint64 // requests
	Unsigned, UnknownUser uint64 // denials by cause (the rest: bad signature, no permission)
	BadSignature          uint64
	NoPermission          uint64
	Reloads, ReloadErrors uint64
	Users, ACLs           int // in force now (file and admin together)
}

// Guard authenticates and authorizes requests against users and ACLs from
// an ACL file (hot-reloaded) and from the admin codes (persisted). Check
// is called for every request: it reads an immutable snapshot with one
// atomic load and allocates nothing when it allows. Its methods are safe
// for concurrent use.
type Guard struct {
	opts Options
	log  *slog.Logger
	snap atomic.Pointer[snapshot]

	mu       sync.Mutex // serialises reloads and admin changes; guards file and store
	file     *Config
	fileSum  [sha256.Size]byte
	fileStat os.FileInfo
	store    *store

	allowed, denied, unsigned, unknown, badSig, noPerm atomic.Uint64
	reloads, reloadErrs                                atomic.Uint64
	logs                                               logLimiter

	stop chan struct{}
	wg   sync.WaitGroup
}

// snapshot is what Check reads: compiled principals by access key.
type snapshot struct {
	users   map[string]*principal
	white   []IPMatcher
	cluster string
	nUsers  int
	nACLs   int
}

type principal struct {
	user     User
	key      *auth.Key
	custom   *matcher
	defaults *matcher
	fromFile bool
}

// Open loads the ACL file and the stored users and ACLs and starts
// watching the file. A file that does not load is an error here; later,
// a change that does not load is logged and the rules in force stay.
func Open(opts Options) (*Guard, error) {
	if opts.ClusterName == "" {
		opts.ClusterName = DefaultClusterName
	}
	if opts.ReloadInterval <= 0 {
		opts.ReloadInterval = DefaultReloadInterval
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	g := &Guard{opts: opts, log: opts.Logger, stop: make(chan struct{})}
	st, err := openStore(opts.FS, opts.Dir, opts.Logger)
	if err != nil {
		return nil, err
	}
	g.store = st
	g.mu.Lock()
	if opts.File != "" {
		if _, err := g.loadFileLocked(); err != nil {
			g.mu.Unlock()
			return nil, err
		}
	}
	if err := g.initUsersLocked(); err != nil {
		g.mu.Unlock()
		return nil, err
	}
	g.publishLocked()
	g.mu.Unlock()
	s := g.snap.Load()
	if s.nUsers == 0 && len(s.white) == 0 {
		g.log.Warn("acl: access control is on and no user is defined: every request is refused until one is; "+
			"define one in the ACL file, or give the first super user in broker.conf's initAuthenticationUser (docs/security.md)", "file", opts.File)
	}
	if opts.File != "" {
		if fi, err := opts.FS.Stat(opts.File); err == nil && fi.Mode().Perm()&0o077 != 0 {
			g.log.Warn("acl: the ACL file holds secret keys and is readable by others; chmod 600 it", "file", opts.File, "mode", fi.Mode().Perm().String())
		}
		g.wg.Add(1)
		go g.watch()
	}
	return g, nil
}

// initUsersLocked creates Options.InitUsers that do not exist (see there).
func (g *Guard) initUsersLocked() error {
	var created []string
	for _, u := range g.opts.InitUsers {
		u.Type, u.WhiteAddrs = Super, nil
		if err := u.Validate(); err != nil {
			return fmt.Errorf("acl: initial user: %w", err)
		}
		old, where := g.userLocked(u.Name)
		if where != "" {
			if subtle.ConstantTimeCompare([]byte(old.Password), []byte(u.Password)) != 1 {
				g.log.Warn("acl: the initial user exists already with another password; the one in force stays "+
					"(the initial user is created only when absent: change the password with apogee-admin updateUser, or in the ACL file)",
					"user", u.Name, "defined_in", where)
			}
			continue
		}
		g.store.users[u.Name] = u
		created = append(created, u.Name)
	}
	if len(created) == 0 {
		return nil
	}
	if err := g.store.save(); err != nil {
		for _, n := range created {
			delete(g.store.users, n)
		}
		return fmt.Errorf("acl: creating the initial users: %w", err)
	}
	kept := "memory (no data directory)"
	if g.opts.Dir != "" {
		kept = g.store.path(StoreFile)
	}
	g.log.Info("acl: created the initial super users", "users", created, "kept_in", kept)
	return nil
}

// userLocked finds a user by name in the file, then the store; where is
// "" when there is none.
func (g *Guard) userLocked(name string) (User, string) {
	if g.file != nil {
		for _, u := range g.file.Users {
			if u.Name == name {
				return u, "the ACL file"
			}
		}
	}
	if u, ok := g.store.users[name]; ok {
		return u, StoreFile
	}
	return User{}, ""
}

// Close stops watching the file.
func (g *Guard) Close() error {
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	g.wg.Wait()
	return nil
}

// watch reloads the file when it changes. A version of the file that
// does not load is logged once (WARN) and then once per
// ReloadErrorLogInterval with the count of failed checks in between; a
// new version is logged at once, and the first check that loads again
// says how many failures were not logged.
func (g *Guard) watch() {
	defer g.wg.Done()
	t := time.NewTicker(g.opts.ReloadInterval)
	defer t.Stop()
	logs := logthrottle.New(g.opts.ReloadErrorLogInterval, logthrottle.MaxCauses(4))
	failing := "" // the version of the file that failed last
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
			// The version before the read: a file replaced during the
			// check is the next check's.
			v := g.fileVersion()
			_, err := g.Reload()
			if err == nil {
				if failing != "" {
					g.log.Info("acl: the ACL file loads again", "file", g.opts.File, "failed_checks_not_logged", logs.Clear(failing))
					failing = ""
				}
				continue
			}
			var earlier uint64
			if v != failing && failing != "" {
				earlier = logs.Clear(failing)
			}
			failing = v
			logs.Warn(g.log, v, "acl: the ACL file does not load; the rules in force stay: fix the file (write it elsewhere and mv it into place)",
				"file", g.opts.File, "err", err, "failed_checks_of_earlier_versions", earlier)
		}
	}
}

// fileVersion identifies the ACL file's current version (size and time)
// for the throttle of its errors.
func (g *Guard) fileVersion() string {
	fi, err := g.opts.FS.Stat(g.opts.File)
	if err != nil {
		return "missing"
	}
	return fmt.Sprintf("%d|%d", fi.Size(), fi.ModTime().UnixNano())
}

// Reload reads the ACL file if it changed (size, time or content) and puts
// its rules in force; changed reports whether it did.
func (g *Guard) Reload() (changed bool, err error) {
	if g.opts.File == "" {
		return false, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	changed, err = g.loadFileLocked()
	if err != nil {
		g.reloadErrs.Add(1)
		return false, err
	}
	if changed {
		g.publishLocked()
		g.reloads.Add(1)
		s := g.snap.Load()
		g.log.Info("acl: reloaded the ACL file", "file", g.opts.File, "format", g.file.Format, "users", s.nUsers, "acls", s.nACLs)
	}
	return changed, nil
}

// loadFileLocked reads the file when its stat or content changed.
func (g *Guard) loadFileLocked() (bool, error) {
	fi, err := g.opts.FS.Stat(g.opts.File)
	if err != nil {
		return false, fmt.Errorf("acl: %w", err)
	}
	if g.fileStat != nil && fi.Size() == g.fileStat.Size() && fi.ModTime().Equal(g.fileStat.ModTime()) && os.SameFile(fi, g.fileStat) {
		return false, nil
	}
	data, err := vfs.ReadFile(g.opts.FS, g.opts.File)
	if err != nil {
		return false, fmt.Errorf("acl: %w", err)
	}
	if g.file != nil && len(bytes.TrimSpace(data)) == 0 {
		// Most likely caught between the truncation and the write of an
		// edit in place: taking it would drop every user until the next
		// check. The rules in force stay; the next check reads it again.
		return false, fmt.Errorf("acl: %s is empty (being written? write it elsewhere and rename it into place); the rules in force stay", g.opts.File)
	}
	sum := sha256.Sum256(data)
	if g.file != nil && bytes.Equal(sum[:], g.fileSum[:]) {
		g.fileStat = fi
		return false, nil
	}
	c, err := ParseFile(data)
	if err != nil {
		return false, fmt.Errorf("acl: %s: %w", g.opts.File, err)
	}
	g.file, g.fileSum, g.fileStat = c, sum, fi
	return true, nil
}

// publishLocked compiles the file's and the store's rules into a new
// snapshot. A name the file defines shadows the store's (logged).
func (g *Guard) publishLocked() {
	s := &snapshot{users: map[string]*principal{}, cluster: g.opts.ClusterName}
	acls := map[string]*ACL{}
	if g.file != nil {
		s.white = g.file.White
		for i := range g.file.Users {
			u := g.file.Users[i]
			s.users[u.Name] = &principal{user: u, key: auth.NewKey(u.Password), fromFile: true}
		}
		for i := range g.file.ACLs {
			acls[g.file.ACLs[i].User] = &g.file.ACLs[i]
		}
	}
	for name, u := range g.store.users {
		if _, ok := s.users[name]; ok {
			g.log.Warn("acl: a user created through the admin codes has the name of one in the ACL file; the file's is in force", "user", name)
			continue
		}
		s.users[name] = &principal{user: u, key: auth.NewKey(u.Password)}
	}
	for name, a := range g.store.acls {
		if p := s.users[name]; p != nil && !p.fromFile {
			acls[name] = &a
		}
	}
	for name, p := range s.users {
		var custom, def []Entry
		if a := acls[name]; a != nil {
			s.nACLs++
			for _, pol := range a.Policies {
				if pol.Type == Default {
					def = append(def, pol.Entries...)
				} else {
					custom = append(custom, pol.Entries...)
				}
			}
		}
		p.custom, p.defaults = newMatcher(custom), newMatcher(def)
	}
	s.nUsers = len(s.users)
	g.snap.Store(s)
}

// ipOf returns a connection's source address without allocating.
func ipOf(remote net.Addr) netip.Addr {
	switch a := remote.(type) {
	case *net.TCPAddr:
		return a.AddrPort().Addr().Unmap()
	case nil:
		return netip.Addr{}
	}
	ap, err := netip.ParseAddrPort(remote.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// Check decides whether req, received from remote, may be served: ok, or
// the response code (NO_PERMISSION) and remark to answer instead. It
// authenticates the request's signature and checks every permission the
// request code needs (the table in docs/security.md). Requests from a
// global white address pass unchecked. It allocates nothing when it
// allows (HEART_BEAT, LOCK and UNLOCK_BATCH_MQ and
// UPDATE_AND_CREATE_SUBSCRIPTIONGROUP decode their body).
func (g *Guard) Check(remote net.Addr, req *protocol.Command) (ok bool, code int32, remark string) {
	s := g.snap.Load()
	ip := ipOf(remote)
	if len(s.white) > 0 && matchIP(s.white, ip) {
		g.allowed.Add(1)
		return true, 0, ""
	}
	ak, has := auth.AccessKey(req)
	if !has {
		g.unsigned.Add(1)
		return g.refuse(req, ip, "", "the request carries no AccessKey (the client has no credentials)")
	}
	p := s.users[string(ak)]
	if p == nil {
		g.unknown.Add(1)
		return g.refuse(req, ip, string(ak), "user not found")
	}
	if p.user.Disabled {
		g.unknown.Add(1)
		return g.refuse(req, ip, p.user.Name, "user is disabled")
	}
	if len(p.user.WhiteAddrs) > 0 && matchIP(p.user.WhiteAddrs, ip) {
		g.allowed.Add(1)
		return true, 0, ""
	}
	if err := p.key.Verify(req); err != nil {
		g.badSig.Add(1)
		reason := "check signature failed"
		if errors.Is(err, auth.ErrNoSignature) {
			reason = "the request carries no Signature"
		}
		return g.refuse(req, ip, p.user.Name, reason)
	}
	if p.user.Type == Super {
		g.allowed.Add(1)
		return true, 0, ""
	}
	var buf [8]Check
	cs, err := checks(req, s.cluster, buf[:0])
	if err != nil {
		g.noPerm.Add(1)
		return g.refuse(req, ip, p.user.Name, "cannot tell what the request needs: "+err.Error())
	}
	if c, why := p.authorize(cs, ip); why != "" {
		g.noPerm.Add(1)
		return g.refuse(req, ip, p.user.Name, fmt.Sprintf("The User:%s does not have permission to access the resource %s (%s), %s",
			p.user.Name, c.Resource, c.Actions, why))
	}
	g.allowed.Add(1)
	return true, 0, ""
}

// authorize returns the first check the user's policies refuse and why
// ("" when all pass): its Custom entries decide, or when none matches its
// Default entries; nothing matching refuses.
func (p *principal) authorize(cs []Check, ip netip.Addr) (Check, string) {
	for _, c := range cs {
		d, _, ok := p.custom.decide(c.Resource, c.Actions, ip)
		if !ok {
			d, _, ok = p.defaults.decide(c.Resource, c.Actions, ip)
		}
		switch {
		case !ok:
			return c, "no matched acl policies"
		case d == Deny:
			return c, "the acl policy's decision is deny"
		}
	}
	return Check{}, ""
}

// refuse counts, logs (rate-limited, without any secret or signature)
// and answers NO_PERMISSION.
func (g *Guard) refuse(req *protocol.Command, ip netip.Addr, user, reason string) (bool, int32, string) {
	g.denied.Add(1)
	if g.logs.allow() {
		g.log.Warn("acl: request refused", "code", req.Code, "user", user, "remote", ip.String(), "reason", reason,
			"refusals_not_logged_before", g.logs.takeSuppressed())
	}
	if user == "" {
		return false, protocol.RespNoPermission, "No permission: " + reason
	}
	return false, protocol.RespNoPermission, reason
}

// Authenticate checks a signed request's user and signature without
// checking permissions (for a front end that authorizes by itself with
// Authorize). It returns the user name.
func (g *Guard) Authenticate(remote net.Addr, req *protocol.Command) (string, error) {
	s := g.snap.Load()
	ak, has := auth.AccessKey(req)
	if !has {
		return "", auth.ErrNoAccessKey
	}
	p := s.users[string(ak)]
	if p == nil || p.user.Disabled {
		return "", fmt.Errorf("acl: user %q not found or disabled", ak)
	}
	if err := p.key.Verify(req); err != nil {
		return "", err
	}
	return p.user.Name, nil
}

// AuthenticateV2 checks a gRPC request's authorization and x-mq-date-time
// metadata (RocketMQ 5: MQv2-HMAC-SHA1, the clock within MaxSkew) and
// returns the user name. A front end calls it once per request (or once
// per stream) and then Authorize with what the request needs. Errors wrap
// auth.ErrBadAuthorization, auth.ErrClockSkew, auth.ErrSignature or
// ErrUnknownUser, or are ErrNoCredentials when there is no header. It
// counts nothing: a front end reports a refusal with Refused.
func (g *Guard) AuthenticateV2(authorization, dateTime string) (string, error) {
	if authorization == "" {
		return "", ErrNoCredentials
	}
	a, err := auth.ParseV2View(authorization, dateTime)
	if err != nil {
		return "", err
	}
	if err := auth.CheckDateTime(a.DateTime, g.opts.Now(), g.opts.MaxSkew); err != nil {
		return "", err
	}
	p := g.snap.Load().users[a.AccessKey]
	if p == nil || p.user.Disabled {
		return "", fmt.Errorf("%w: %q", ErrUnknownUser, a.AccessKey)
	}
	if err := p.key.VerifyV2(a); err != nil {
		return "", err
	}
	return p.user.Name, nil
}

// ErrUnknownUser is returned for an access key no enabled user has.
var ErrUnknownUser = errors.New("acl: user not found or disabled")

// ErrDenied wraps every refusal of Authorize.
var ErrDenied = errors.New("acl: no permission")

// Authorize checks that an authenticated user may do cs from ip (a super
// user may do anything). Its error wraps ErrDenied and reads as the
// remoting front end's remark. For a second front end (gRPC), which
// builds the checks from its own requests as RocketMQ 5's proxy does.
func (g *Guard) Authorize(user string, ip netip.Addr, cs ...Check) error {
	s := g.snap.Load()
	p := s.users[user]
	if p == nil || p.user.Disabled {
		g.denied.Add(1)
		return fmt.Errorf("%w: %w: %q", ErrDenied, ErrUnknownUser, user)
	}
	if p.user.Type == Super {
		g.allowed.Add(1)
		return nil
	}
	if c, why := p.authorize(cs, ip); why != "" {
		g.denied.Add(1)
		g.noPerm.Add(1)
		return fmt.Errorf("%w: The User:%s does not have permission to access the resource %s (%s), %s", ErrDenied, user, c.Resource, c.Actions, why)
	}
	g.allowed.Add(1)
	return nil
}

// ClusterName is the name of the Cluster resource.
func (g *Guard) ClusterName() string { return g.opts.ClusterName }

// Stats returns the counters.
func (g *Guard) Stats() Stats {
	s := g.snap.Load()
	return Stats{
		Allowed: g.allowed.Load(), Denied: g.denied.Load(),
		Unsigned: g.unsigned.Load(), UnknownUser: g.unknown.Load(), BadSignature: g.badSig.Load(), NoPermission: g.noPerm.Load(),
		Reloads: g.reloads.Load(), ReloadErrors: g.reloadErrs.Load(),
		Users: s.nUsers, ACLs: s.nACLs,
	}
}

// logLimiter lets denyLogBurst log lines through per second and counts
// the rest.
type logLimiter struct {
	sec        atomic.Int64
	n          atomic.Int64
	suppressed atomic.Uint64
}

const denyLogBurst = 10

func (l *logLimiter) allow() bool {
	now := time.Now().Unix()
	if l.sec.Load() != now {
		l.sec.Store(now)
		l.n.Store(0)
	}
	if l.n.Add(1) > denyLogBurst {
		l.suppressed.Add(1)
		return false
	}
	return true
}

func (l *logLimiter) takeSuppressed() uint64 { return l.suppressed.Swap(0) }

// AddRuntimeInfo adds the counters to a broker's runtime information
// (GET_BROKER_RUNTIME_INFO): aclAllowed, aclDenied, aclDeniedUnsigned,
// aclDeniedUnknownUser, aclDeniedBadSignature, aclDeniedNoPermission,
// aclReloads, aclReloadErrors, aclUsers, aclAcls.
func (g *Guard) AddRuntimeInfo(m map[string]string) {
	s := g.Stats()
	for k, v := range map[string]uint64{
		"aclAllowed": s.Allowed, "aclDenied": s.Denied, "aclDeniedUnsigned": s.Unsigned,
		"aclDeniedUnknownUser": s.UnknownUser, "aclDeniedBadSignature": s.BadSignature,
		"aclDeniedNoPermission": s.NoPermission, "aclReloads": s.Reloads, "aclReloadErrors": s.ReloadErrors,
		"aclUsers": uint64(s.Users), "aclAcls": uint64(s.ACLs),
	} {
		m[k] = strconv.FormatUint(v, 10)
	}
}
