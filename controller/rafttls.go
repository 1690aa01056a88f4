package controller

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// RaftTLS is TLS on Raft's transport between controllers (a StreamLayer of
// hashicorp/raft's NetworkTransport, crypto/tls around the listener and the
// dialler).
//
// Server is the listener's configuration: every connection a peer makes
// must complete a TLS handshake with it (a plain one is closed). Give it a
// certificate (or GetCertificate / GetConfigForClient: cmd/apogee-controller
// uses tlsconf.Server.TLSConfig, which follows the certificate files as
// they change) and, for mutual TLS, ClientCAs with ClientAuth
// tls.RequireAndVerifyClientCert: then only a holder of a certificate of
// that CA can join the group's traffic, which is what a controller group
// wants (a peer that speaks Raft can vote and append entries).
//
// Client is the dialler's: RootCAs to verify the peers' certificates with
// (nil: the system's), and a client certificate for mutual TLS. Without a
// ServerName the certificate is verified for the host of the peer's Raft
// address (its --peers entry), so peer certificates need that host among
// their names (an IP address SAN for a numeric address).
type RaftTLS struct {
	Server, Client *tls.Config
}

// raftHandshakeTimeout bounds a Raft peer connection's TLS handshake.
const raftHandshakeTimeout = 10 * time.Second

// tlsStreamLayer is Raft's transport on TLS. Accept returns a connection
// that does its server handshake on its first Read or Write (bounded by
// raftHandshakeTimeout), so that a slow or silent peer never holds up the
// accept loop; Dial returns one whose handshake is done.
type tlsStreamLayer struct {
	net.Listener
	adv            net.Addr
	server, client *tls.Config
}

func newTLSStreamLayer(ln net.Listener, adv net.Addr, t RaftTLS) (*tlsStreamLayer, error) {
	if t.Server == nil || t.Client == nil {
		return nil, errors.New("controller: RaftTLS needs both a Server and a Client configuration")
	}
	return &tlsStreamLayer{Listener: ln, adv: adv, server: t.Server, client: t.Client}, nil
}

func (s *tlsStreamLayer) Accept() (net.Conn, error) {
	c, err := s.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &serverTLSConn{Conn: tls.Server(c, s.server), raw: c}, nil
}

func (s *tlsStreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	cfg := s.client
	if cfg.ServerName == "" && !cfg.InsecureSkipVerify {
		cfg = cfg.Clone()
		if host, _, err := net.SplitHostPort(string(addr)); err == nil {
			cfg.ServerName = host
		}
	}
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: timeout}, Config: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", string(addr))
	if err != nil {
		return nil, fmt.Errorf("controller: raft TLS dial %s: %w", addr, err)
	}
	return c, nil
}

func (s *tlsStreamLayer) Addr() net.Addr { return s.adv }

// serverTLSConn is an accepted peer connection whose handshake runs, with
// a deadline, before its first Read or Write (the deadline is the
// context's: the connection's own deadlines stay Raft's to set).
type serverTLSConn struct {
	*tls.Conn
	raw  net.Conn
	once sync.Once
	err  error
}

func (c *serverTLSConn) handshake() error {
	c.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), raftHandshakeTimeout)
		defer cancel()
		if err := c.Conn.HandshakeContext(ctx); err != nil {
			c.err = fmt.Errorf("controller: raft peer %s: TLS handshake: %w", c.raw.RemoteAddr(), err)
			c.raw.Close()
		}
	})
	return c.err
}

func (c *serverTLSConn) Read(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *serverTLSConn) Write(p []byte) (int, error) {
	if err := c.handshake(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
