package controller

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// RaftAuth authenticates Raft peers by a signed preamble, for a group
// whose Raft transport is not mutual TLS: before a connection reaches Raft,
// the accepting node sends a fresh random nonce and the dialling node
// answers with a remoting request (code RaftAuthCode) carrying that nonce
// and its id, signed as a broker signs its requests (RocketMQ's AccessKey
// and Signature, HMAC-SHA1 with the user's secret). The accepting node
// hands the request to Authorize, the same check its remoting requests
// pass (cmd/apogee-controller: the ACL file's users, admin rights on the
// cluster or a Super user), and closes the connection unless it passes.
// A stranger that connects to the Raft port is dropped before Raft reads a
// byte of it, and a recorded preamble is worth nothing on another
// connection (its nonce differs).
//
// What it does not give: the stream after the preamble is neither
// encrypted nor integrity-protected, so someone on the path between two
// controllers could still take a connection over; RaftTLS (mutual) is the
// defence against that, and the two combine (the preamble then runs inside
// TLS). The dialling node does not authenticate the node it dials (the
// Raft address is the operator's --peers); mutual TLS does. Every member of
// the group must use it or none.
type RaftAuth struct {
	// Signer signs this node's preambles (the controller's
	// innerClientAuthenticationCredentials). Required.
	Signer remoting.Signer
	// Authorize decides a peer's preamble, as Options.Authorize decides a
	// request. Required.
	Authorize func(remote net.Addr, req *protocol.Command) (ok bool, code int32, remark string)
}

// RaftAuthCode is the request code of the Raft preamble (Apogee's own; not
// served on the remoting port). Under package acl it needs admin rights on
// the cluster, as every code its table does not list.
const RaftAuthCode int32 = 1901

// raftAuthMagic opens the accepting node's half of the preamble: a peer
// without the preamble (a node started without RaftAuth) reads it as a
// malformed Raft message and drops the connection at once.
const raftAuthMagic = "APOGEE-RAFT-AUTH1"

const (
	raftNonceLen      = 32
	raftAuthTimeout   = 5 * time.Second
	raftAuthMaxFrame  = 4096
	raftAuthLogPeriod = 10 * time.Second
)

// errRaftAuth is a peer's preamble refused or malformed.
var errRaftAuth = errors.New("controller: raft peer not authenticated")

// authStreamLayer runs the preamble on the connections of another stream
// layer (plain TCP or TLS).
type authStreamLayer struct {
	raft.StreamLayer
	auth RaftAuth
	id   string
	log  *slog.Logger

	// Refusals are logged once per raftAuthLogPeriod with a count of those
	// not logged.
	lastLog    atomic.Int64 // unix nanoseconds
	suppressed atomic.Int64
}

func newAuthStreamLayer(inner raft.StreamLayer, a RaftAuth, id string, log *slog.Logger) (*authStreamLayer, error) {
	if a.Signer == nil || a.Authorize == nil {
		return nil, errors.New("controller: RaftAuth needs a Signer and an Authorize")
	}
	return &authStreamLayer{StreamLayer: inner, auth: a, id: id, log: log}, nil
}

// Accept returns a connection that runs the accepting side of the
// preamble before its first Read or Write (bounded by raftAuthTimeout), so
// that a silent peer never holds up Raft's accept loop.
func (s *authStreamLayer) Accept() (net.Conn, error) {
	c, err := s.StreamLayer.Accept()
	if err != nil {
		return nil, err
	}
	return &authServerConn{Conn: c, layer: s}, nil
}

// Dial connects and runs the dialling side of the preamble.
func (s *authStreamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := s.StreamLayer.Dial(addr, timeout)
	if err != nil {
		return nil, err
	}
	if err := s.introduce(c, timeout); err != nil {
		c.Close()
		return nil, fmt.Errorf("controller: raft preamble with %s: %w", addr, err)
	}
	return c, nil
}

// introduce reads the peer's nonce and answers it signed.
func (s *authStreamLayer) introduce(c net.Conn, timeout time.Duration) error {
	if timeout <= 0 || timeout > raftAuthTimeout {
		timeout = raftAuthTimeout
	}
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	var hello [len(raftAuthMagic) + raftNonceLen]byte
	if _, err := io.ReadFull(c, hello[:]); err != nil {
		return fmt.Errorf("reading the nonce: %w", err)
	}
	if string(hello[:len(raftAuthMagic)]) != raftAuthMagic {
		return errors.New("the peer sent no preamble (is RaftAuth on for every member?)")
	}
	var req protocol.Command
	req.InitRequest(RaftAuthCode, 0)
	req.Ext.SetString("nonce", hex.EncodeToString(hello[len(raftAuthMagic):]))
	req.Ext.SetString("id", s.id)
	s.auth.Signer.Sign(&req)
	frame, err := protocol.AppendFrame(nil, &req)
	if err != nil {
		return err
	}
	_, err = c.Write(frame)
	return err
}

// verify runs the accepting side on c: the nonce out, the signed answer
// in, Authorize. A refusal is logged (rate-limited).
func (s *authStreamLayer) verify(c net.Conn) error {
	c.SetDeadline(time.Now().Add(raftAuthTimeout))
	defer c.SetDeadline(time.Time{})
	var hello [len(raftAuthMagic) + raftNonceLen]byte
	copy(hello[:], raftAuthMagic)
	nonce := hello[len(raftAuthMagic):]
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	if _, err := c.Write(hello[:]); err != nil {
		return err
	}
	frame, err := protocol.ReadFrame(c, nil, raftAuthMaxFrame)
	if err != nil {
		return s.refuse(c, "no preamble: "+err.Error())
	}
	var req protocol.Command
	if err := protocol.DecodeFrame(frame, &req); err != nil {
		return s.refuse(c, "a malformed preamble: "+err.Error())
	}
	got, _ := req.Ext.GetString("nonce")
	if req.Code != RaftAuthCode || got != hex.EncodeToString(nonce) {
		return s.refuse(c, "a preamble for another connection")
	}
	if ok, code, remark := s.auth.Authorize(c.RemoteAddr(), &req); !ok {
		return s.refuse(c, fmt.Sprintf("refused (%d): %s", code, remark))
	}
	return nil
}

func (s *authStreamLayer) refuse(c net.Conn, why string) error {
	now := time.Now().UnixNano()
	last := s.lastLog.Load()
	if now-last >= int64(raftAuthLogPeriod) && s.lastLog.CompareAndSwap(last, now) {
		s.log.Warn("controller: a connection to the Raft port was dropped: not an authenticated controller "+
			"(every member needs innerClientAuthenticationCredentials of a user with admin rights in the ACL file)",
			"remote", c.RemoteAddr().String(), "reason", why, "dropped_not_logged_before", s.suppressed.Swap(0))
	} else {
		s.suppressed.Add(1)
	}
	return fmt.Errorf("%w: %s: %s", errRaftAuth, c.RemoteAddr(), why)
}

// authServerConn is an accepted connection whose preamble runs before its
// first Read or Write; a refused one is closed and fails every call.
type authServerConn struct {
	net.Conn
	layer *authStreamLayer
	once  sync.Once
	err   error
}

func (c *authServerConn) check() error {
	c.once.Do(func() {
		if c.err = c.layer.verify(c.Conn); c.err != nil {
			c.Conn.Close()
		}
	})
	return c.err
}

func (c *authServerConn) Read(p []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *authServerConn) Write(p []byte) (int, error) {
	if err := c.check(); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
