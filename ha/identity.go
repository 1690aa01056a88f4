package ha

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"
)

// The identity handshake (docs/replication.md, "The identity handshake"):
// the first messages on every connection an Apogee slave makes, before the
// owner's handshake (MasterOptions.Handshake) and the stream.
//
//	slave → master  hello:     magic "AHI1" (4), cluster (1+n), broker name (1+n), broker id (8)
//	master → slave  challenge: status (1), cluster (1+n), broker name (1+n), nonce (16)
//	slave → master  proof:     access key (1+n), signature (1+n)
//	master → slave  verdict:   status (1)
//
// Strings are a length byte and that many bytes. A challenge or verdict
// whose status is not 0 is the master's last message: it closes the
// connection. The proof is the slave's credentials: its signature (by
// SlaveOptions.Sign) of the content identityContent returns, which holds
// the master's nonce, so that a recorded proof is worth nothing on
// another connection. Both are empty when the slave has no credentials.
const (
	identityMagic = "AHI1"
	nonceSize     = 16
	// maxField bounds a string of the handshake (a length byte).
	maxField = 255
)

// Refusal is why a master refused a slave in the identity handshake: the
// status of its challenge or verdict.
type Refusal uint8

// The refusals.
const (
	// RefusedCluster: the slave names another cluster than the master's.
	RefusedCluster Refusal = 1
	// RefusedBrokerName: the slave names another broker group (broker
	// name) than the master's.
	RefusedBrokerName Refusal = 2
	// RefusedNoCredentials: the master requires authentication
	// (MasterOptions.Verify) and the slave presented neither credentials
	// nor a verified client certificate.
	RefusedNoCredentials Refusal = 3
	// RefusedCredentials: the slave's credentials did not verify (an
	// unknown or disabled user, a bad signature, or a user without the
	// right to replicate).
	RefusedCredentials Refusal = 4
)

func (r Refusal) String() string {
	switch r {
	case RefusedCluster:
		return "another cluster"
	case RefusedBrokerName:
		return "another broker group (broker name)"
	case RefusedNoCredentials:
		return "no credentials"
	case RefusedCredentials:
		return "credentials refused"
	}
	return fmt.Sprintf("refusal %d", uint8(r))
}

// RefusedError ends a slave's session that its master refused in the
// identity handshake (errors.As).
type RefusedError struct {
	Reason Refusal
	// MasterCluster and MasterBrokerName are the names the master gave
	// (empty in a verdict: the challenge gave them).
	MasterCluster, MasterBrokerName string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("ha: the master (cluster %q, broker name %q) refused this slave: %s", e.MasterCluster, e.MasterBrokerName, e.Reason)
}

// hello is a slave's first message.
type hello struct {
	cluster, brokerName string
	brokerID            int64
}

func appendField(b []byte, s string) []byte {
	if len(s) > maxField {
		s = s[:maxField]
	}
	return append(append(b, byte(len(s))), s...)
}

func readField(r io.Reader) (string, error) {
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	b := make([]byte, n[0])
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return string(b), nil
}

func (h hello) encode() []byte {
	b := append([]byte(nil), identityMagic...)
	b = appendField(b, h.cluster)
	b = appendField(b, h.brokerName)
	return binary.BigEndian.AppendUint64(b, uint64(h.brokerID))
}

// readHello reads a hello whose magic was peeked already.
func readHello(r io.Reader) (hello, error) {
	var h hello
	var m [len(identityMagic)]byte
	if _, err := io.ReadFull(r, m[:]); err != nil {
		return h, err
	}
	var err error
	if h.cluster, err = readField(r); err != nil {
		return h, err
	}
	if h.brokerName, err = readField(r); err != nil {
		return h, err
	}
	var id [8]byte
	if _, err := io.ReadFull(r, id[:]); err != nil {
		return h, err
	}
	h.brokerID = int64(binary.BigEndian.Uint64(id[:]))
	return h, nil
}

// identityContent is what a slave signs: the hello's fields and the
// master's nonce.
func identityContent(h hello, nonce []byte) []byte {
	b := h.encode()
	return append(b, nonce...)
}

// verifiedClientCert reports whether c is a TLS connection whose peer
// presented a client certificate that verified against the server's
// client CAs (mutual TLS).
func verifiedClientCert(c net.Conn) bool {
	tc, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	return ok && len(tc.ConnectionState().VerifiedChains) > 0
}

// errNoHello: a connection that did not start with the identity
// handshake (RocketMQ's slaves, and Apogee's before it).
var errNoHello = errors.New("ha: the slave sent no identity handshake")

// identify runs the master's side of the identity handshake on a new
// connection (readLoop, before the owner's handshake). It returns false
// when the slave is refused: the refusal is logged and the connection is
// to be closed. A connection that does not start with the handshake's
// magic is a slave that predates it: it is taken as it is (its first bytes
// stay in br) unless authentication is required.
func (c *masterConn) identify(br *bufio.Reader) bool {
	o := c.m.opts
	log := o.Logger
	c.c.SetDeadline(time.Now().Add(HandshakeTimeout))
	defer c.c.SetDeadline(time.Time{})
	cert := verifiedClientCert(c.c)
	magic, err := br.Peek(len(identityMagic))
	if err != nil {
		c.handshakeFailed(err)
		return false
	}
	if string(magic) != identityMagic {
		switch {
		case o.Verify != nil && !cert:
			if c.m.refusals.allow("nohello", c.host()) {
				log.Warn("ha: refusing a peer on the HA port: access control is on and it sent no identity handshake "+
					"(neither credentials nor a verified client certificate): a slave needs Apogee's identity handshake "+
					"with innerClientAuthenticationCredentials, or mutual TLS", "peer", c.name)
			}
			return false
		case o.Cluster != "" || o.BrokerName != "":
			if c.m.refusals.allow("legacy", c.host()) {
				log.Warn("ha: a slave that does not name its cluster and broker group (RocketMQ's own, or an Apogee before the identity handshake): "+
					"it is served unchecked; upgrade it so that a slave of another group is refused", "slave", c.name)
			}
		}
		return true
	}
	h, err := readHello(br)
	if err != nil {
		c.handshakeFailed(err)
		return false
	}
	peer := fmt.Sprintf("%s/%d (cluster %s)", h.brokerName, h.brokerID, h.cluster)
	var refusal Refusal
	switch {
	case o.Cluster != "" && h.cluster != o.Cluster:
		refusal = RefusedCluster
	case o.BrokerName != "" && h.brokerName != o.BrokerName:
		refusal = RefusedBrokerName
	}
	var nonce [nonceSize]byte
	rand.Read(nonce[:])
	b := []byte{byte(refusal)}
	b = appendField(b, o.Cluster)
	b = appendField(b, o.BrokerName)
	b = append(b, nonce[:]...)
	if _, err := c.c.Write(b); err != nil {
		c.handshakeFailed(err)
		return false
	}
	if refusal != 0 {
		cause := "group:" + refusal.String()
		if c.m.refusals.allow(cause, c.host()) {
			log.Error("ha: refusing a slave of another broker group: it copies nothing from this master; "+
				"point it at its own group's master (its brokerName and brokerClusterName, its name servers or haMasterAddress), or fix its names",
				"slave", c.name, "slaveCluster", h.cluster, "slaveBrokerName", h.brokerName, "slaveBrokerId", h.brokerID,
				"masterCluster", o.Cluster, "masterBrokerName", o.BrokerName, "refusalsNotLoggedBefore", c.m.refusals.suppressed(cause, c.host()))
		}
		return false
	}
	ak, err := readField(br)
	if err != nil {
		c.handshakeFailed(err)
		return false
	}
	sig, err := readField(br)
	if err != nil {
		c.handshakeFailed(err)
		return false
	}
	user := ""
	switch {
	case o.Verify == nil:
	case cert:
		user = "(client certificate)"
	case ak == "":
		refusal = RefusedNoCredentials
	default:
		if user, err = o.Verify(c.raw.RemoteAddr(), ak, identityContent(h, nonce[:]), []byte(sig)); err != nil {
			refusal = RefusedCredentials
		}
	}
	if _, werr := c.c.Write([]byte{byte(refusal)}); werr != nil && refusal == 0 {
		c.handshakeFailed(werr)
		return false
	}
	if refusal != 0 {
		if c.m.refusals.allow("auth", c.host()) {
			log.Warn("ha: refusing a slave: access control is on and it is not authenticated; give it innerClientAuthenticationCredentials "+
				"of a super user (or of one allowed every action on the cluster), or mutual TLS with a client certificate",
				"slave", c.name, "peer", peer, "reason", refusal.String(), "accessKey", ak, "err", err,
				"refusalsNotLoggedBefore", c.m.refusals.suppressed("auth", c.host()))
		}
		return false
	}
	c.peer = peer
	if user != "" {
		c.peer += " as " + user
	}
	return true
}

// handshakeFailed logs a connection that ended or failed during the
// identity handshake.
func (c *masterConn) handshakeFailed(err error) {
	select {
	case <-c.done:
		return
	default:
	}
	if !c.m.refusals.allow("handshake", c.host()) {
		return
	}
	lvl := slog.LevelWarn
	if errors.Is(err, io.EOF) {
		lvl = slog.LevelInfo // a connection closed before it said anything (a port check)
	}
	c.m.opts.Logger.Log(context.Background(), lvl, "ha: a peer on the HA port failed the identity handshake; closing its connection", "peer", c.name, "err", err)
}

// host is the peer's address without its port (the refusal log's key).
func (c *masterConn) host() string {
	if h, _, err := net.SplitHostPort(c.raw.RemoteAddr().String()); err == nil {
		return h
	}
	return c.raw.RemoteAddr().String()
}

// refusalLog throttles the master's refusal logs: one line per cause and
// peer host per refusalLogInterval, with the count of what was not logged.
type refusalLog struct {
	mu   sync.Mutex
	last map[string]refusalEntry // bounded by maxRefusalKeys
}

type refusalEntry struct {
	at         time.Time
	suppressed int64
}

const (
	refusalLogInterval = time.Minute
	maxRefusalKeys     = 1024
)

// allow reports whether a refusal of cause from host is logged now.
func (l *refusalLog) allow(cause, host string) bool {
	k := cause + "\x00" + host
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil || len(l.last) >= maxRefusalKeys {
		l.last = map[string]refusalEntry{}
	}
	e, ok := l.last[k]
	if ok && now.Sub(e.at) < refusalLogInterval {
		e.suppressed++
		l.last[k] = e
		return false
	}
	l.last[k] = refusalEntry{at: now, suppressed: e.suppressed}
	return true
}

// suppressed returns and resets the count of refusals of cause from host
// not logged since the last line.
func (l *refusalLog) suppressed(cause, host string) int64 {
	k := cause + "\x00" + host
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.last[k]
	n := e.suppressed
	e.suppressed = 0
	l.last[k] = e
	return n
}

// identifySlave runs the slave's side of the identity handshake on a new
// connection (session, before the owner's handshake).
func (s *Slave) identifySlave(c net.Conn) error {
	o := s.opts
	h := hello{cluster: o.Cluster, brokerName: o.BrokerName, brokerID: o.BrokerID}
	if _, err := c.Write(h.encode()); err != nil {
		return fmt.Errorf("ha: identity handshake: %w", err)
	}
	var st [1]byte
	if _, err := io.ReadFull(c, st[:]); err != nil {
		return fmt.Errorf("ha: identity handshake: the master answered nothing (a master before the identity handshake? it must be upgraded first; or see its log): %w", err)
	}
	mc, err := readField(c)
	if err != nil {
		return fmt.Errorf("ha: identity handshake: %w", err)
	}
	mn, err := readField(c)
	if err != nil {
		return fmt.Errorf("ha: identity handshake: %w", err)
	}
	if st[0] != 0 {
		return &RefusedError{Reason: Refusal(st[0]), MasterCluster: mc, MasterBrokerName: mn}
	}
	var nonce [nonceSize]byte
	if _, err := io.ReadFull(c, nonce[:]); err != nil {
		return fmt.Errorf("ha: identity handshake: %w", err)
	}
	var ak string
	var sig []byte
	if o.Sign != nil {
		ak, sig = o.Sign(identityContent(h, nonce[:]))
	}
	if len(ak) > maxField || len(sig) > maxField {
		return fmt.Errorf("ha: identity handshake: an access key or signature longer than %d bytes", maxField)
	}
	b := appendField(nil, ak)
	b = appendField(b, string(sig))
	if _, err := c.Write(b); err != nil {
		return fmt.Errorf("ha: identity handshake: %w", err)
	}
	if _, err := io.ReadFull(c, st[:]); err != nil {
		return fmt.Errorf("ha: identity handshake: %w", err)
	}
	if st[0] != 0 {
		return &RefusedError{Reason: Refusal(st[0]), MasterCluster: mc, MasterBrokerName: mn}
	}
	return nil
}
