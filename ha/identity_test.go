package ha

import (
	"bufio"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/store"
)

// testUsers is the verifier's user table: access key → secret.
var testUsers = map[string]string{"inner": "inner-secret"}

func testSign(ak, secret string) func([]byte) (string, []byte) {
	return func(content []byte) (string, []byte) {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(content)
		return ak, mac.Sum(nil)
	}
}

var errTestUser = errors.New("unknown user or bad signature")

// testVerify checks testSign's signatures against testUsers, counting calls.
func testVerify(calls *atomic.Int32) func(net.Addr, string, []byte, []byte) (string, error) {
	return func(_ net.Addr, ak string, content, sig []byte) (string, error) {
		calls.Add(1)
		secret, ok := testUsers[ak]
		if !ok {
			return "", errTestUser
		}
		_, want := testSign(ak, secret)(content)
		if !hmac.Equal(want, sig) {
			return "", errTestUser
		}
		return ak, nil
	}
}

// TestIdentityRefusesAnotherGroup (issue 29, case 11): a slave that names
// another broker name, or another cluster, is refused by the master with
// an ERROR naming both sides; it copies nothing and never counts as a
// replica, and logs the refusal as an ERROR itself. The group's own slave
// replicates.
func TestIdentityRefusesAnotherGroup(t *testing.T) {
	master := openStore(t, storeOptions(t.TempDir()))
	defer master.Close()
	put(t, master, 50, 2, 1, "g")
	var mlog logBuffer
	m, addr := startMaster(t, master, MasterOptions{Logger: mlog.logger(t, "master"), Cluster: "c1", BrokerName: "broker-a"})
	defer m.Close()
	for _, tc := range []struct {
		cluster, name, want string
		reason              Refusal
	}{
		{"c1", "broker-b", "slaveBrokerName=broker-b", RefusedBrokerName},
		{"c2", "broker-a", "slaveCluster=c2", RefusedCluster},
	} {
		replica := openStore(t, replicaOptions(t.TempDir()))
		var slog logBuffer
		s := startSlave(t, replica, addr, SlaveOptions{Logger: slog.logger(t, "slave"), Cluster: tc.cluster, BrokerName: tc.name, BrokerID: 1})
		wait.Until(t, "the master to refuse "+tc.want, func() bool {
			return strings.Contains(mlog.String(), tc.want)
		})
		wait.Until(t, "the slave to log the refusal", func() bool {
			return strings.Contains(slog.String(), "the master refused this slave")
		})
		s.Close()
		for _, line := range strings.Split(mlog.String(), "\n") {
			if strings.Contains(line, tc.want) {
				if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "masterBrokerName=broker-a") || !strings.Contains(line, "masterCluster=c1") {
					t.Errorf("the master's refusal does not name both sides at ERROR: %s", line)
				}
			}
		}
		sl := slog.String()
		if !strings.Contains(sl, "level=ERROR") || !strings.Contains(sl, "reason=\""+tc.reason.String()+"\"") {
			t.Errorf("the slave's log:\n%s", sl)
		}
		if replica.WrittenOffset() != 0 || s.Status().Received != 0 {
			t.Errorf("a slave of another group copied %d bytes", replica.WrittenOffset())
		}
		if len(master.Replicas()) != 0 {
			t.Errorf("a refused slave counts as a replica: %+v", master.Replicas())
		}
		replica.Close()
	}
	replica := openStore(t, replicaOptions(t.TempDir()))
	defer replica.Close()
	s := startSlave(t, replica, addr, SlaveOptions{Cluster: "c1", BrokerName: "broker-a", BrokerID: 1})
	defer s.Close()
	caughtUp(t, master, replica)
}

// TestIdentityAuthentication: with MasterOptions.Verify, a slave without
// credentials or with bad ones is refused before it reads a byte of the
// log; one with good ones replicates; a peer without the identity
// handshake (the classic stream) is refused.
func TestIdentityAuthentication(t *testing.T) {
	o := storeOptions(t.TempDir())
	o.SyncReplicas = 1
	master := openStore(t, o)
	defer master.Close()
	var calls atomic.Int32
	var mlog logBuffer
	m, addr := startMaster(t, master, MasterOptions{Logger: mlog.logger(t, "master"), Cluster: "c1", BrokerName: "a", Verify: testVerify(&calls)})
	defer m.Close()
	for _, tc := range []struct {
		sign   func([]byte) (string, []byte)
		reason Refusal
	}{
		{nil, RefusedNoCredentials},
		{testSign("inner", "wrong"), RefusedCredentials},
		{testSign("nobody", "inner-secret"), RefusedCredentials},
	} {
		replica := openStore(t, replicaOptions(t.TempDir()))
		var slog logBuffer
		s := startSlave(t, replica, addr, SlaveOptions{Logger: slog.logger(t, "slave"), Cluster: "c1", BrokerName: "a", Sign: tc.sign})
		wait.Until(t, "a refusal: "+tc.reason.String(), func() bool {
			return strings.Contains(slog.String(), "reason=\""+tc.reason.String()+"\"")
		})
		s.Close()
		if replica.WrittenOffset() != 0 || len(master.Replicas()) != 0 {
			t.Fatalf("%s: the slave copied %d bytes, replicas %+v", tc.reason, replica.WrittenOffset(), master.Replicas())
		}
		replica.Close()
	}
	if !strings.Contains(mlog.String(), "not authenticated") {
		t.Fatalf("the master's log:\n%s", mlog.String())
	}
	if strings.Contains(mlog.String(), "wrong") || strings.Contains(mlog.String(), "secret") {
		t.Fatalf("a secret in the master's log:\n%s", mlog.String())
	}
	// The classic stream (no hello): closed at once.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var rep [ReportSize]byte
	c.Write(rep[:])
	c.SetReadDeadline(time.Now().Add(wait.DefaultTimeout))
	if n, err := c.Read(make([]byte, 64)); n != 0 || err == nil {
		t.Fatalf("a peer without the identity handshake read %d bytes (%v)", n, err)
	}
	c.Close()
	if len(master.Replicas()) != 0 {
		t.Fatal("a peer without the handshake counts as a replica")
	}

	replica := openStore(t, replicaOptions(t.TempDir()))
	defer replica.Close()
	s := startSlave(t, replica, addr, SlaveOptions{Cluster: "c1", BrokerName: "a", Sign: testSign("inner", "inner-secret")})
	defer s.Close()
	wait.Until(t, "the authenticated slave to count", func() bool { return len(master.Replicas()) == 1 })
	if r, _ := putOne(t, master, "after", false); r.Status != store.StatusOK {
		t.Fatalf("a SYNC_MASTER's put with its authenticated slave: status %d", r.Status)
	}
	caughtUp(t, master, replica)
}

// TestIdentityReplayRefused: a proof recorded on one connection is refused
// on another (the master's nonce differs).
func TestIdentityReplayRefused(t *testing.T) {
	master := openStore(t, storeOptions(t.TempDir()))
	defer master.Close()
	var calls atomic.Int32
	m, addr := startMaster(t, master, MasterOptions{Cluster: "c1", BrokerName: "a", Verify: testVerify(&calls)})
	defer m.Close()
	h := hello{cluster: "c1", brokerName: "a", brokerID: 1}
	// challenge dials, says hello and returns the connection and the nonce.
	challenge := func() (net.Conn, *bufio.Reader, []byte) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(wait.DefaultTimeout))
		if _, err := c.Write(h.encode()); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		st, _ := br.ReadByte()
		readField(br)
		readField(br)
		nonce := make([]byte, nonceSize)
		if _, err := io.ReadFull(br, nonce); err != nil || st != 0 {
			t.Fatalf("challenge: status %d, %v", st, err)
		}
		return c, br, nonce
	}
	prove := func(c net.Conn, br *bufio.Reader, ak string, sig []byte) byte {
		c.Write(appendField(appendField(nil, ak), string(sig)))
		v, err := br.ReadByte()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	c1, br1, nonce1 := challenge()
	ak, sig := testSign("inner", "inner-secret")(identityContent(h, nonce1))
	if v := prove(c1, br1, ak, sig); v != 0 {
		t.Fatalf("a good proof: verdict %d", v)
	}
	c1.Close()
	c2, br2, nonce2 := challenge()
	defer c2.Close()
	if string(nonce1) == string(nonce2) {
		t.Fatal("the same nonce twice")
	}
	if v := prove(c2, br2, ak, sig); Refusal(v) != RefusedCredentials {
		t.Fatalf("a replayed proof: verdict %d, want %d", v, RefusedCredentials)
	}
}

// TestIdentityMutualTLS: under MasterOptions.Verify, a slave whose client
// certificate verified (mutual TLS) needs no credentials.
func TestIdentityMutualTLS(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	srv := tlsServer(t, f, tlsconf.Enforcing, true)
	master := openStore(t, storeOptions(t.TempDir()))
	defer master.Close()
	put(t, master, 20, 1, 1, "tls")
	var calls atomic.Int32
	m, addr := startMaster(t, master, MasterOptions{Secure: srv.Handshake, Cluster: "c1", BrokerName: "a", Verify: testVerify(&calls)})
	defer m.Close()
	replica := openStore(t, replicaOptions(t.TempDir()))
	defer replica.Close()
	s := startSlave(t, replica, addr, SlaveOptions{TLS: slaveTLS(t, f, true), Cluster: "c1", BrokerName: "a"})
	defer s.Close()
	caughtUp(t, master, replica)
	if calls.Load() != 0 {
		t.Fatalf("the verifier ran %d times for a certificate", calls.Load())
	}
}

// TestAckBeyondEndCloses (issue 29, case 4): a peer on the HA port that
// acknowledges an offset beyond the master's log end (2^40) is closed
// with an ERROR, the acknowledgement is never counted, and a SYNC_MASTER's
// puts stay SLAVE_NOT_AVAILABLE. With and without the identity handshake
// (the master has no access control: anybody may connect).
func TestAckBeyondEndCloses(t *testing.T) {
	for _, withHello := range []bool{false, true} {
		o := storeOptions(t.TempDir())
		o.SyncReplicas = 1
		o.SyncFlushTimeout = time.Minute // a counted replica would hold the put, not answer it
		master := openStore(t, o)
		put(t, master, 10, 1, 1, "x")
		var mlog logBuffer
		m, addr := startMaster(t, master, MasterOptions{Logger: mlog.logger(t, "master"), Cluster: "c1", BrokerName: "a"})
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(wait.DefaultTimeout))
		br := bufio.NewReader(c)
		if withHello {
			h := hello{cluster: "c1", brokerName: "a"}
			c.Write(h.encode())
			if st, _ := br.ReadByte(); st != 0 {
				t.Fatalf("challenge status %d", st)
			}
			readField(br)
			readField(br)
			io.ReadFull(br, make([]byte, nonceSize))
			c.Write(appendField(appendField(nil, ""), ""))
			if v, _ := br.ReadByte(); v != 0 {
				t.Fatalf("verdict %d", v)
			}
		}
		var b [ReportSize]byte
		c.Write(b[:]) // first report: 0
		wait.Until(t, "the peer to count as a replica", func() bool { return len(master.Replicas()) == 1 })
		binary.BigEndian.PutUint64(b[:], 1<<40)
		c.Write(b[:])
		if _, err := io.Copy(io.Discard, br); err != nil {
			t.Fatalf("the connection was not closed: %v", err)
		}
		wait.Until(t, "the connection to be gone", func() bool { return len(master.Replicas()) == 0 && len(m.Slaves()) == 0 })
		if got := master.ReplicatedOffset(); got != 0 {
			t.Fatalf("replicated offset %d after a fake acknowledgement", got)
		}
		if !strings.Contains(mlog.String(), "level=ERROR") || !strings.Contains(mlog.String(), "acked=1099511627776") {
			t.Fatalf("the master's log:\n%s", mlog.String())
		}
		for range 5 {
			if r, _ := putOne(t, master, "y", false); r.Status != store.StatusSlaveNotAvailable {
				t.Fatalf("a put after the fake acknowledgement: status %d", r.Status)
			}
		}
		c.Close()
		m.Close()
		master.Close()
	}
}

// acceptIdentity is a fake master's side of the identity handshake: it
// takes whatever the slave says.
func acceptIdentity(t testing.TB, c net.Conn, br *bufio.Reader) {
	t.Helper()
	if _, err := readHello(br); err != nil {
		t.Fatal(err)
	}
	b := appendField(appendField([]byte{0}, ""), "")
	if _, err := c.Write(append(b, make([]byte, nonceSize)...)); err != nil {
		t.Fatal(err)
	}
	if _, err := readField(br); err != nil {
		t.Fatal(err)
	}
	if _, err := readField(br); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte{0}); err != nil {
		t.Fatal(err)
	}
}
