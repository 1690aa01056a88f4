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

	reloads, reloadErrs, handshakeErrs, tlsConns, plainConns atomic.Uint64

	stop chan struct{}
	wg   sync.WaitGroup
}

// material is what one load of the files gives.
type material struct {
	cert     *tls.Certificate
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
	s := &Server{cfg: cfg, log: cfg.Logger, stop: make(chan struct{})}
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
		return nil, err
	}
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
				s.log.Error("tls: the certificate files do not load; the ones in force stay", "cert", s.cfg.CertFile, "err", err)
			}
		}
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
	m := &material{cert: &cert}
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
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}
