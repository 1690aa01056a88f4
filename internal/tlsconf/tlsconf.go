// Package tlsconf is Apogee's TLS: RocketMQ's three server modes
// (tls.server.mode: disabled, permissive, enforcing), certificates and
// client CAs read from files and reloaded when the files change, optional
// client certificates (mutual TLS), and the two ways a listener takes it:
// Server.Handshake for package remoting's Options.Handshake and the HA
// stream's (a plain connection stays a *net.TCPConn, so its vectored
// writes stay writev), and Server.Listener for any other listener
// (metrics, gRPC).
//
// # Modes
//
//   - Disabled: connections are served as they come.
//   - Permissive: one port serves TLS and plain clients, told apart by the
//     first byte the client sends: 0x16 (a TLS handshake record) starts
//     TLS. A RocketMQ remoting frame starts with its length, whose first
//     byte is 0 for any frame under 16 MiB, and an HTTP request or an HA
//     report with a letter or 0, so nothing else starts with 0x16. The byte
//     is peeked (MSG_PEEK), not consumed.
//   - Enforcing: every connection must be TLS; a plain client's connection
//     fails its handshake and is closed.
//
// # Reloading
//
// The certificate and key files, and the client CA file, are checked every
// ReloadInterval (their size, time and identity); a change is loaded and
// used by every handshake after it, while connections already established
// keep their session. A change that does not load (a key that does not
// match its certificate, a file written halfway) is logged and the
// material in force stays; the next check tries again.
//
// # Validity
//
// A certificate chain outside its validity period (expired, or not valid
// yet) is refused, as a verifying client would refuse it: NewServer and
// ClientConfig.Load return a *CertError naming the file and the dates
// (and NewServer logs it at ERROR), and a reload to one keeps the pair in
// force with an ERROR. Every check of the files also looks at the
// certificate in force: within ExpiryWarning (14 days) of its end it is
// logged at WARN, and once past it at ERROR, each at most once a day per
// certificate. A reload that keeps failing is logged once per file
// version and minute (package logthrottle), with the count of the
// failures in between.
//
// # Mutual TLS
//
// With ClientCAFile, a client certificate is requested and, when one is
// sent, verified against those CAs. RequireClientCert refuses clients
// without one (RocketMQ's tls.server.need.client.auth=require; without it,
// "optional").
package tlsconf

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/internal/logthrottle"
)

// Mode is RocketMQ's tls.server.mode.
type Mode uint8

// Modes.
const (
	Disabled Mode = iota
	Permissive
	Enforcing
)

// ParseMode reads "disabled", "permissive" or "enforcing" (any case; ""
// is disabled).
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "disabled":
		return Disabled, nil
	case "permissive":
		return Permissive, nil
	case "enforcing":
		return Enforcing, nil
	}
	return 0, fmt.Errorf("tlsconf: mode %q (want disabled, permissive or enforcing)", s)
}

func (m Mode) String() string {
	switch m {
	case Permissive:
		return "permissive"
	case Enforcing:
		return "enforcing"
	}
	return "disabled"
}

// DefaultReloadInterval is how often the files are checked for a change.
const DefaultReloadInterval = 5 * time.Second

// Config is a server's TLS configuration.
type Config struct {
	Mode Mode
	// CertFile and KeyFile are the server's certificate chain and key (PEM).
	// Required unless Mode is Disabled.
	CertFile, KeyFile string
	// ClientCAFile, when set, asks clients for a certificate and verifies
	// one against these CAs (PEM).
	ClientCAFile string
	// RequireClientCert refuses clients that send no certificate (needs
	// ClientCAFile).
	RequireClientCert bool
	// MinVersion is the lowest TLS version accepted. Default TLS 1.2.
	MinVersion uint16
	// NextProtos are the ALPN protocols offered ("h2" for gRPC). Default none.
	NextProtos []string
	// ReloadInterval: how often the files are checked. Default
	// DefaultReloadInterval; negative disables reloading.
	ReloadInterval time.Duration
	// Logger receives reloads and failed reloads. Default slog.Default().
	Logger *slog.Logger
	// ExpiryWarning: a certificate in force this close to its end is
	// logged at WARN (once a day). Default DefaultExpiryWarning (14
	// days); negative: never.
	ExpiryWarning time.Duration
	// Now is the clock validity is checked against (tests). Default
	// time.Now.
	Now func() time.Time
}

// DefaultExpiryWarning is Config.ExpiryWarning's default.
const DefaultExpiryWarning = 14 * 24 * time.Hour

// Errors a *CertError wraps.
var (
	ErrCertExpired     = errors.New("tlsconf: certificate expired")
	ErrCertNotYetValid = errors.New("tlsconf: certificate not valid yet")
)

// CertError is a certificate outside its validity period. It wraps
// ErrCertExpired or ErrCertNotYetValid.
type CertError struct {
	File                string // the PEM file that holds it
	Subject             string // its subject
	NotBefore, NotAfter time.Time
	Now                 time.Time // when it was checked
	Reason              error     // ErrCertExpired or ErrCertNotYetValid
}

func (e *CertError) Error() string {
	if errors.Is(e.Reason, ErrCertNotYetValid) {
		return fmt.Sprintf("tlsconf: %s: the certificate %q is not valid before %s (valid %s to %s; now %s): fix the clock or the certificate",
			e.File, e.Subject, dateOf(e.NotBefore), dateOf(e.NotBefore), dateOf(e.NotAfter), dateOf(e.Now))
	}
	return fmt.Sprintf("tlsconf: %s: the certificate %q expired at %s (valid %s to %s; now %s): replace it",
		e.File, e.Subject, dateOf(e.NotAfter), dateOf(e.NotBefore), dateOf(e.NotAfter), dateOf(e.Now))
}

func (e *CertError) Unwrap() error { return e.Reason }

// logAttrs are the error's fields as log attributes.
func (e *CertError) logAttrs() []any {
	return []any{"file", e.File, "subject", e.Subject, "not_before", dateOf(e.NotBefore), "not_after", dateOf(e.NotAfter), "now", dateOf(e.Now)}
}

// dateOf is how the package writes a certificate's dates: RFC 3339, UTC.
func dateOf(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// checkValidity checks every certificate of cert's chain (read from file)
// against now; the leaf is returned.
func checkValidity(file string, cert *tls.Certificate, now time.Time) (*x509.Certificate, error) {
	var leaf *x509.Certificate
	for i, der := range cert.Certificate {
		c := cert.Leaf
		if i > 0 || c == nil {
			var err error
			if c, err = x509.ParseCertificate(der); err != nil {
				return nil, fmt.Errorf("tlsconf: %s: certificate %d of the chain: %w", file, i, err)
			}
		}
		if i == 0 {
			leaf = c
		}
		var reason error
		switch {
		case now.Before(c.NotBefore):
			reason = ErrCertNotYetValid
		case now.After(c.NotAfter):
			reason = ErrCertExpired
		default:
			continue
		}
		return leaf, &CertError{File: file, Subject: c.Subject.String(), NotBefore: c.NotBefore, NotAfter: c.NotAfter, Now: now, Reason: reason}
	}
	return leaf, nil
}

// Server is a loaded Config: the TLS configuration every handshake uses,
// reloaded as the files change. Its methods are safe for concurrent use.
type Server struct {
	cfg  Config
	log  *slog.Logger
	cur  atomic.Pointer[material]
	base *tls.Config

	mu    sync.Mutex // serialises reloads
	stamp string     // the files' identity when last loaded

	// Throttles of the watcher's lines: failed reloads (by the files'
	// version), expiry (by certificate, once a day).
	reloadLogs, expiryLogs *logthrottle.Throttle

	reloads, reloadErrs, handshakeErrs, tlsConns, plainConns atomic.Uint64

	stop chan struct{}
	wg   sync.WaitGroup
}

// material is what one load of the files gives.
type material struct {
	cert     *tls.Certificate
	leaf     *x509.Certificate
	clientCA *x509.CertPool
	conf     *tls.Config // per-handshake configuration built from both
}

// NewServer loads the files and starts watching them (Close stops it). A
// Disabled config needs no file.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ReloadInterval == 0 {
		cfg.ReloadInterval = DefaultReloadInterval
	}
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	if cfg.ExpiryWarning == 0 {
		cfg.ExpiryWarning = DefaultExpiryWarning
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}),
		reloadLogs: logthrottle.New(time.Minute, logthrottle.MaxCauses(8)),
		expiryLogs: logthrottle.New(24*time.Hour, logthrottle.MaxCauses(64), logthrottle.Clock(cfg.Now))}
	if cfg.Mode == Disabled {
		return s, nil
	}
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, fmt.Errorf("tlsconf: TLS mode %s needs a certificate and a key file", cfg.Mode)
	}
	if cfg.RequireClientCert && cfg.ClientCAFile == "" {
		return nil, errors.New("tlsconf: requiring client certificates needs a client CA file")
	}
	s.base = &tls.Config{
		MinVersion: cfg.MinVersion,
		NextProtos: cfg.NextProtos,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load().conf, nil
		},
	}
	if _, err := s.Reload(); err != nil {
		var ce *CertError
		if errors.As(err, &ce) {
			s.log.Error("tls: the certificate is not valid now; not starting: replace it (or fix the clock)", ce.logAttrs()...)
		}
		return nil, err
	}
	s.checkExpiry()
	if cfg.ReloadInterval > 0 {
		s.wg.Add(1)
		go s.watch()
	}
	return s, nil
}

// Mode returns the server's mode.
func (s *Server) Mode() Mode { return s.cfg.Mode }

// Close stops watching the files.
func (s *Server) Close() error {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.wg.Wait()
	return nil
}

func (s *Server) watch() {
	defer s.wg.Done()
	t := time.NewTicker(s.cfg.ReloadInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			if _, err := s.Reload(); err != nil {
				s.reloadErrs.Add(1)
				stamp := s.versionOf()
				attrs := []any{"cert", s.cfg.CertFile, "err", err}
				var ce *CertError
				if errors.As(err, &ce) {
					attrs = append(attrs, "not_before", dateOf(ce.NotBefore), "not_after", dateOf(ce.NotAfter))
				}
				s.reloadLogs.Error(s.log, stamp, "tls: the certificate files do not load; the ones in force stay: fix them", attrs...)
			}
			s.checkExpiry()
		}
	}
}

// checkExpiry logs the certificate in force when it is within
// ExpiryWarning of its end (WARN) or past it (ERROR), once a day each.
func (s *Server) checkExpiry() {
	m := s.cur.Load()
	if m == nil || m.leaf == nil || s.cfg.ExpiryWarning < 0 {
		return
	}
	now, leaf := s.cfg.Now(), m.leaf
	key := leaf.SerialNumber.String() + "|" + leaf.Issuer.String()
	attrs := []any{"cert", s.cfg.CertFile, "subject", leaf.Subject.String(), "not_after", dateOf(leaf.NotAfter)}
	switch left := leaf.NotAfter.Sub(now); {
	case left < 0:
		s.expiryLogs.Error(s.log, "expired|"+key, "tls: the certificate in force has expired: clients that verify it refuse the connection; replace the files (they are reloaded without a restart)", attrs...)
	case left <= s.cfg.ExpiryWarning:
		s.expiryLogs.Warn(s.log, "expiring|"+key, "tls: the certificate in force expires soon: replace the files before then (they are reloaded without a restart)",
			append(attrs, "left", left.Round(time.Minute).String())...)
	}
}

// stampOf identifies the files' current versions by size, time and, for
// files that changed within the last two seconds (a time that may not
// have moved), their content.
func (s *Server) stampOf() (string, error) {
	var b strings.Builder
	for _, f := range []string{s.cfg.CertFile, s.cfg.KeyFile, s.cfg.ClientCAFile} {
		if f == "" {
			continue
		}
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s|%d|%d;", f, fi.Size(), fi.ModTime().UnixNano())
		if time.Since(fi.ModTime()) < 2*time.Second {
			data, err := os.ReadFile(f)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&b, "%x;", sha256.Sum256(data))
		}
	}
	return b.String(), nil
}

// versionOf identifies the files' current versions by size and time
// only (the key of a failed reload's log line).
func (s *Server) versionOf() string {
	var b strings.Builder
	for _, f := range []string{s.cfg.CertFile, s.cfg.KeyFile, s.cfg.ClientCAFile} {
		if fi, err := os.Stat(f); err == nil {
			fmt.Fprintf(&b, "%d|%d;", fi.Size(), fi.ModTime().UnixNano())
		} else {
			b.WriteString("missing;")
		}
	}
	return b.String()
}

// Reload loads the files if they changed since the last load; changed
// reports whether new material is in force.
func (s *Server) Reload() (changed bool, err error) {
	if s.cfg.Mode == Disabled {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	stamp, err := s.stampOf()
	if err != nil {
		return false, fmt.Errorf("tlsconf: %w", err)
	}
	if stamp == s.stamp {
		return false, nil
	}
	cert, err := tls.LoadX509KeyPair(s.cfg.CertFile, s.cfg.KeyFile)
	if err != nil {
		return false, fmt.Errorf("tlsconf: %s and %s: %w", s.cfg.CertFile, s.cfg.KeyFile, err)
	}
	leaf, err := checkValidity(s.cfg.CertFile, &cert, s.cfg.Now())
	if err != nil {
		return false, err
	}
	m := &material{cert: &cert, leaf: leaf}
	if s.cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(s.cfg.ClientCAFile)
		if err != nil {
			return false, fmt.Errorf("tlsconf: %w", err)
		}
		m.clientCA = x509.NewCertPool()
		if !m.clientCA.AppendCertsFromPEM(pem) {
			return false, fmt.Errorf("tlsconf: %s holds no PEM certificate", s.cfg.ClientCAFile)
		}
	}
	m.conf = &tls.Config{
		MinVersion:   s.cfg.MinVersion,
		Certificates: []tls.Certificate{cert},
		NextProtos:   s.cfg.NextProtos,
	}
	if m.clientCA != nil {
		m.conf.ClientCAs = m.clientCA
		m.conf.ClientAuth = tls.VerifyClientCertIfGiven
		if s.cfg.RequireClientCert {
			m.conf.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	first := s.cur.Load() == nil
	s.cur.Store(m)
	s.stamp = stamp
	if !first {
		s.reloads.Add(1)
		s.log.Info("tls: reloaded the certificate files", "cert", s.cfg.CertFile, "client_ca", s.cfg.ClientCAFile)
	}
	return true, nil
}

// TLSConfig returns a configuration whose handshakes use the material in
// force at their time (for a server that does its own handshakes, such as
// gRPC's credentials.NewTLS; add "h2" to NextProtos there). Nil when the
// mode is Disabled. Permissive mode needs Listener or Handshake instead:
// a plain TLS configuration only speaks TLS.
func (s *Server) TLSConfig() *tls.Config {
	if s.cfg.Mode == Disabled {
		return nil
	}
	return s.base.Clone()
}

// Stats are a Server's counters.
type Stats struct {
	TLSConns, PlainConns uint64 // connections served, by kind
	HandshakeFailures    uint64
	Reloads, ReloadErrs  uint64
}

// Stats returns the counters.
func (s *Server) Stats() Stats {
	return Stats{TLSConns: s.tlsConns.Load(), PlainConns: s.plainConns.Load(), HandshakeFailures: s.handshakeErrs.Load(),
		Reloads: s.reloads.Load(), ReloadErrs: s.reloadErrs.Load()}
}

// ErrPlainRefused is the handshake error of a plain client on an
// enforcing listener.
var ErrPlainRefused = errors.New("tlsconf: a plain (non-TLS) client on a TLS-only listener")

// tlsRecordHandshake is the first byte of a TLS ClientHello.
const tlsRecordHandshake = 0x16

// Handshake prepares an accepted connection by the mode (package
// remoting's Options.Handshake): in Disabled mode nc itself; in Enforcing
// mode a *tls.Conn whose handshake completed; in Permissive mode either,
// by the first byte the client sends. ctx bounds it (and nc's deadline,
// which the caller sets and clears).
func (s *Server) Handshake(ctx context.Context, nc net.Conn) (net.Conn, error) {
	if s.cfg.Mode == Disabled {
		s.plainConns.Add(1)
		return nc, nil
	}
	if s.cfg.Mode == Permissive {
		first, conn, err := peekByte(nc)
		if err != nil {
			s.handshakeErrs.Add(1)
			return nil, fmt.Errorf("tlsconf: first byte: %w", err)
		}
		if first != tlsRecordHandshake {
			s.plainConns.Add(1)
			return conn, nil
		}
		nc = conn
	}
	tc := tls.Server(nc, s.base)
	if err := tc.HandshakeContext(ctx); err != nil {
		s.handshakeErrs.Add(1)
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) {
			return nil, fmt.Errorf("%w: %v", ErrPlainRefused, err)
		}
		return nil, fmt.Errorf("tlsconf: handshake: %w", err)
	}
	s.tlsConns.Add(1)
	return tc, nil
}

// peekByte returns the first byte nc will read and the connection to read
// it from: nc itself when the byte could be peeked without consuming it
// (a TCP connection), else a wrapper that returns it first.
func peekByte(nc net.Conn) (byte, net.Conn, error) {
	if b, ok, err := peekTCP(nc); ok {
		return b, nc, err
	}
	br := bufio.NewReaderSize(nc, 16)
	b, err := br.Peek(1)
	if err != nil {
		return 0, nil, err
	}
	return b[0], &prefixConn{Conn: nc, r: br}, nil
}

// prefixConn reads what its buffered reader holds before the connection.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Listener wraps ln by the mode: Disabled returns ln; otherwise Accept
// returns connections that do their TLS handshake (or, in Permissive mode,
// look at the first byte) on their first Read or Write, bounded by
// HandshakeTimeout, so that the accept loop never waits for a client.
// For listeners that are not package remoting's or the HA stream's
// (metrics, gRPC).
func (s *Server) Listener(ln net.Listener) net.Listener {
	if s.cfg.Mode == Disabled {
		return ln
	}
	return &listener{Listener: ln, s: s}
}

// HandshakeTimeout bounds the lazy handshake of Listener's connections.
const HandshakeTimeout = 10 * time.Second

type listener struct {
	net.Listener
	s *Server
}

func (l *listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &lazyConn{Conn: nc, s: l.s}, nil
}

// lazyConn runs the server's handshake on its first Read or Write.
type lazyConn struct {
	net.Conn
	s    *Server
	once sync.Once
	conn net.Conn
	err  error
}

func (c *lazyConn) init() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), HandshakeTimeout)
		defer cancel()
		_ = c.Conn.SetDeadline(time.Now().Add(HandshakeTimeout))
		c.conn, c.err = c.s.Handshake(ctx, c.Conn)
		if c.err == nil {
			_ = c.Conn.SetDeadline(time.Time{})
		}
	})
	return c.err
}

func (c *lazyConn) Read(p []byte) (int, error) {
	if err := c.init(); err != nil {
		return 0, err
	}
	return c.conn.Read(p)
}

func (c *lazyConn) Write(p []byte) (int, error) {
	if err := c.init(); err != nil {
		return 0, err
	}
	return c.conn.Write(p)
}

// ConnectionState reports the TLS state of a connection Listener accepted
// (ok false for a plain one or before its handshake).
func ConnectionState(c net.Conn) (tls.ConnectionState, bool) {
	switch t := c.(type) {
	case *tls.Conn:
		return t.ConnectionState(), true
	case *lazyConn:
		if tc, ok := t.conn.(*tls.Conn); ok {
			return tc.ConnectionState(), true
		}
	}
	return tls.ConnectionState{}, false
}

// ClientConfig is what a client needs to reach a TLS server: the CAs to
// trust (CAFile; empty: the system's), a client certificate for mutual
// TLS (CertFile and KeyFile), or no verification at all (Insecure, what
// rocketmq-client-go's WithTls(true) does).
type ClientConfig struct {
	CAFile            string
	CertFile, KeyFile string
	ServerName        string
	Insecure          bool
}

// Load builds the client's tls.Config.
func (c ClientConfig) Load() (*tls.Config, error) {
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName, InsecureSkipVerify: c.Insecure}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tlsconf: %w", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tlsconf: %s holds no PEM certificate", c.CAFile)
		}
	}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tlsconf: client certificate: %w", err)
		}
		if _, err := checkValidity(c.CertFile, &cert, time.Now()); err != nil {
			return nil, err
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}
