package tlsconf_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

type echo struct{}

func (echo) ServeRemoting(_ *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	resp.Cmd.Body = req.Body
	return remoting.Reply
}

// serve runs a remoting server with s's handshake on 127.0.0.1:0.
func serve(t *testing.T, s *tlsconf.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := remoting.NewServer(echo{}, &remoting.Options{Handshake: s.Handshake, Logger: testlog.New(t, "server"), HandshakeTimeout: 2 * time.Second})
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

func call(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, &remoting.ClientOptions{TLS: cfg, Options: remoting.Options{Logger: testlog.New(t, "client")}})
	if err != nil {
		return err
	}
	defer cl.Close()
	req := new(protocol.Command)
	req.InitRequest(1, 0)
	req.Body = []byte("ping")
	resp, err := cl.Invoke(ctx, req)
	if err != nil {
		return err
	}
	if string(resp.Body) != "ping" {
		t.Fatalf("echo %q", resp.Body)
	}
	return nil
}

func clientTLS(t *testing.T, f tlstest.Files, withCert bool) *tls.Config {
	t.Helper()
	c := tlsconf.ClientConfig{CAFile: f.CA}
	if withCert {
		c.CertFile, c.KeyFile = f.ClientCert, f.ClientKey
	}
	cfg, err := c.Load()
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func newServer(t *testing.T, cfg tlsconf.Config) *tlsconf.Server {
	t.Helper()
	cfg.Logger = testlog.New(t, "tlsconf")
	s, err := tlsconf.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestModes(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	for _, tc := range []struct {
		mode    tlsconf.Mode
		tlsOK   bool
		plainOK bool
	}{{tlsconf.Enforcing, true, false}, {tlsconf.Permissive, true, true}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			s := newServer(t, tlsconf.Config{Mode: tc.mode, CertFile: f.ServerCert, KeyFile: f.ServerKey})
			addr := serve(t, s)
			if err := call(t, addr, clientTLS(t, f, false)); (err == nil) != tc.tlsOK {
				t.Errorf("TLS client: %v", err)
			}
			if err := call(t, addr, &tls.Config{InsecureSkipVerify: true}); (err == nil) != tc.tlsOK {
				t.Errorf("TLS client without verification (rocketmq-client-go's WithTls): %v", err)
			}
			if err := call(t, addr, nil); (err == nil) != tc.plainOK {
				t.Errorf("plain client: %v", err)
			}
			st := s.Stats()
			if st.TLSConns != 2 || tc.plainOK && st.PlainConns != 1 || !tc.plainOK && st.HandshakeFailures != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestMutualTLS(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	s := newServer(t, tlsconf.Config{Mode: tlsconf.Enforcing, CertFile: f.ServerCert, KeyFile: f.ServerKey, ClientCAFile: f.CA, RequireClientCert: true})
	addr := serve(t, s)
	if err := call(t, addr, clientTLS(t, f, true)); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if err := call(t, addr, clientTLS(t, f, false)); err == nil {
		t.Fatal("without a client certificate: accepted")
	}
	other := tlstest.Write(t, t.TempDir()) // a client certificate of another CA
	cfg := clientTLS(t, f, false)
	cert, err := tls.LoadX509KeyPair(other.ClientCert, other.ClientKey)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Certificates = []tls.Certificate{cert}
	if err := call(t, addr, cfg); err == nil {
		t.Fatal("a client certificate of another CA: accepted")
	}
}

// TestRotation: a new certificate is used by the next handshakes, and a
// connection established before keeps working.
func TestRotation(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	s := newServer(t, tlsconf.Config{Mode: tlsconf.Enforcing, CertFile: f.ServerCert, KeyFile: f.ServerKey, ReloadInterval: 20 * time.Millisecond})
	addr := serve(t, s)
	serial := func() string {
		c, err := tls.Dial("tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, &remoting.ClientOptions{TLS: clientTLS(t, f, false), Options: remoting.Options{Logger: testlog.New(t, "client")}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	tlstest.Reissue(t, f)
	wait.For(t, "the new certificate served", func() error {
		if got := serial(); got == before {
			return fmt.Errorf("still the serial %s", got)
		}
		return nil
	})
	req := new(protocol.Command)
	req.InitRequest(1, 0)
	req.Body = []byte("ping")
	if _, err := cl.Invoke(ctx, req); err != nil {
		t.Fatalf("the connection from before the rotation: %v", err)
	}
	if err := call(t, addr, clientTLS(t, f, false)); err != nil {
		t.Fatalf("a new client after the rotation: %v", err)
	}
	// A broken pair keeps the one in force.
	errsBefore := s.Stats().ReloadErrs
	if err := os.WriteFile(f.ServerKey, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the broken key file seen by a reload", func() error {
		if st := s.Stats(); st.ReloadErrs == errsBefore {
			return fmt.Errorf("stats %+v", st)
		}
		return nil
	})
	if err := call(t, addr, clientTLS(t, f, false)); err != nil {
		t.Fatalf("after a broken key file: %v", err)
	}
	if s.Stats().Reloads == 0 || s.Stats().ReloadErrs == 0 {
		t.Fatalf("stats %+v", s.Stats())
	}
}

// TestListener serves a line protocol through Listener in permissive mode:
// plain and TLS clients on one port, and a client that never sends its
// first byte does not hold up the others.
func TestListener(t *testing.T) {
	f := tlstest.Write(t, t.TempDir())
	s := newServer(t, tlsconf.Config{Mode: tlsconf.Permissive, CertFile: f.ServerCert, KeyFile: f.ServerKey})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tl := s.Listener(ln)
	defer tl.Close()
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					return
				}
				_, tlsOK := tlsconf.ConnectionState(c)
				kind := "plain"
				if tlsOK {
					kind = "tls"
				}
				io.WriteString(c, kind+":"+line)
			}()
		}
	}()
	silent, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	roundTrip := func(c net.Conn) string {
		t.Helper()
		defer c.Close()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		io.WriteString(c, "hello\n")
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return line
	}
	pc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(pc); got != "plain:hello\n" {
		t.Fatalf("plain: %q", got)
	}
	pool := x509.NewCertPool()
	pem, _ := os.ReadFile(f.CA)
	pool.AppendCertsFromPEM(pem)
	tc, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatal(err)
	}
	if got := roundTrip(tc); got != "tls:hello\n" {
		t.Fatalf("tls: %q", got)
	}
}

func TestConfigErrors(t *testing.T) {
	if _, err := tlsconf.ParseMode("strict"); err == nil {
		t.Fatal("mode strict accepted")
	}
	for _, m := range []string{"", "Disabled", "PERMISSIVE", "enforcing"} {
		if _, err := tlsconf.ParseMode(m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tlsconf.NewServer(tlsconf.Config{Mode: tlsconf.Enforcing}); err == nil {
		t.Fatal("enforcing without a certificate accepted")
	}
	f := tlstest.Write(t, t.TempDir())
	if _, err := tlsconf.NewServer(tlsconf.Config{Mode: tlsconf.Enforcing, CertFile: f.ServerCert, KeyFile: f.ClientKey}); err == nil {
		t.Fatal("a key of another certificate accepted")
	}
	if _, err := tlsconf.NewServer(tlsconf.Config{Mode: tlsconf.Enforcing, CertFile: f.ServerCert, KeyFile: f.ServerKey, RequireClientCert: true}); err == nil {
		t.Fatal("required client certificates without a CA accepted")
	}
	var pe *os.PathError
	if _, err := tlsconf.NewServer(tlsconf.Config{Mode: tlsconf.Permissive, CertFile: "/nonexistent", KeyFile: "/nonexistent"}); !errors.As(err, &pe) {
		t.Fatalf("missing files: %v", err)
	}
}
