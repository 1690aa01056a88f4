package main

import (
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

func TestSecurityConfig(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		lines []string
		acl   bool
		file  string
	}{
		{nil, nil, false, ""},
		{[]string{"--acl"}, nil, true, ""},
		{[]string{"--acl-file", "/etc/acl.yml"}, nil, true, "/etc/acl.yml"},
		{nil, []string{"aclEnable=true"}, true, ""},
		{nil, []string{"authenticationEnabled=true", "authorizationEnabled=true"}, true, ""},
		{nil, []string{"aclEnable=false"}, false, ""},
		{nil, []string{"aclFile=/x/plain_acl.yml"}, true, "/x/plain_acl.yml"},
		{[]string{"--acl-file", "/flag.yml"}, []string{"aclFile=/file.yml"}, true, "/flag.yml"},
	} {
		args := tc.args
		if tc.lines != nil {
			args = append(args, "--config", writeConf(t, tc.lines...))
		}
		c, err := parseConfig(args)
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if c.sec.acl != tc.acl || c.sec.aclFile != tc.file {
			t.Errorf("%v %v: acl %v file %q, want %v %q", tc.args, tc.lines, c.sec.acl, c.sec.aclFile, tc.acl, tc.file)
		}
	}
}

// The users of TestACLRequests: app may publish and subscribe to Sec*
// topics with GSec* groups; root is a super user.
const secACLFile = `
users:
  - {username: app, password: app-secret}
  - {username: root, password: root-secret, userType: Super}
acls:
  - subject: User:app
    policies:
      - entries:
          - {resource: "Topic:Sec*", actions: [Pub, Sub], decision: Allow}
          - {resource: "Group:GSec*", actions: [Sub], decision: Allow}
`

// TestACLRequests drives the broker binary with --acl-file through raw
// requests signed as RocketMQ's clients sign them: what the user is granted
// is served; a missing or tampered signature, and each operation not granted
// (reset offset, update config, delete topic, a pull for another group, a
// list of every group), answer NO_PERMISSION with a remark naming what was
// refused; a super user is served them; a replayed request is served again
// (the remoting signature carries no timestamp or nonce, as in RocketMQ:
// docs/security.md); the log names refusals without the secret.
func TestACLRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(file, []byte(secACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, buildBinary(t), "--namesrv-listen", "", "--data-dir", filepath.Join(dir, "data"), "--acl-file", file)
	defer p.stop(t, syscall.SIGTERM)
	app := auth.NewSigner(auth.Credentials{AccessKey: "app", SecretKey: "app-secret"})
	root := auth.NewSigner(auth.Credentials{AccessKey: "root", SecretKey: "root-secret"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, p.addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// call signs req as s (nil: unsigned), lets edit change it after, and
	// returns the answer.
	call := func(req *protocol.Command, s *auth.Signer, edit func(*protocol.Command)) *protocol.Command {
		t.Helper()
		if s != nil {
			s.Sign(req)
		}
		if edit != nil {
			edit(req)
		}
		resp, err := cl.Invoke(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	send := func(topic string) *protocol.Command {
		return sendRequest("GSecP", topic, 0, []byte("secured"))
	}
	header := func(code int32, kv ...string) *protocol.Command {
		var req protocol.Command
		req.InitRequest(code, 0)
		for i := 0; i < len(kv); i += 2 {
			req.Ext.SetString(kv[i], kv[i+1])
		}
		return &req
	}
	refused := func(what string, resp *protocol.Command, remark string) {
		t.Helper()
		if resp.Code != protocol.RespNoPermission || !strings.Contains(string(resp.Remark), remark) {
			t.Errorf("%s: %d %q, want NO_PERMISSION naming %q", what, resp.Code, resp.Remark, remark)
		}
	}

	if resp := call(send("SecT"), app, nil); resp.Code != protocol.RespSuccess {
		t.Fatalf("a granted send: %d %s", resp.Code, resp.Remark)
	}
	refused("an unsigned send", call(send("SecT"), nil, nil), "AccessKey")
	refused("a send without its signature", call(send("SecT"), app, func(r *protocol.Command) {
		var ext protocol.ExtFields
		r.Ext.ForEach(func(k, v []byte) bool {
			if string(k) != auth.FieldSignature {
				ext.SetString(string(k), string(v))
			}
			return true
		})
		r.Ext = ext
	}), "Signature")
	refused("a send with another secret", call(send("SecT"), auth.NewSigner(auth.Credentials{AccessKey: "app", SecretKey: "guess"}), nil), "signature")
	refused("a tampered body", call(send("SecT"), app, func(r *protocol.Command) { r.Body = []byte("tampered") }), "signature")
	refused("a tampered header", call(send("SecT"), app, func(r *protocol.Command) { r.Ext.SetString("topic", "SecOther") }), "signature")
	refused("a send to a topic not granted", call(send("Billing"), app, nil), "Topic:Billing (Pub)")

	// A replay: the same signed frame, sent again, is served again.
	replay := send("SecT")
	app.Sign(replay)
	for i := range 2 {
		if resp := call(replay, nil, nil); resp.Code != protocol.RespSuccess {
			t.Errorf("replay %d: %d %s", i, resp.Code, resp.Remark)
		}
	}

	resetOffset := func() *protocol.Command {
		return header(protocol.ReqInvokeBrokerToResetOffset, "topic", "SecT", "group", "GSec1", "timestamp", "0", "isForce", "true")
	}
	refused("reset offset", call(resetOffset(), app, nil), "(Update)")
	if resp := call(resetOffset(), root, nil); resp.Code == protocol.RespNoPermission {
		t.Errorf("root's reset offset refused: %s", resp.Remark)
	}
	updateConfig := func() *protocol.Command {
		r := header(protocol.ReqUpdateBrokerConfig)
		r.Body = []byte("maxMessageSize=4194304\n")
		return r
	}
	refused("update config", call(updateConfig(), app, nil), "Cluster:DefaultCluster (Update)")
	if resp := call(updateConfig(), root, nil); resp.Code == protocol.RespNoPermission {
		t.Errorf("root's update config refused: %s", resp.Remark)
	}
	refused("delete topic", call(header(protocol.ReqDeleteTopicInBroker, "topic", "SecT"), app, nil), "Topic:SecT (Delete)")
	refused("create topic", call(header(protocol.ReqUpdateAndCreateTopic, "topic", "SecNew", "readQueueNums", "1", "writeQueueNums", "1", "perm", "6"), app, nil), "Topic:SecNew (Create)")
	pull := func(group string) *protocol.Command {
		var req protocol.Command
		req.InitRequest(protocol.ReqPullMessage, 0)
		(&protocol.PullMessageRequest{ConsumerGroup: []byte(group), Topic: []byte("SecT"), MaxMsgNums: 1,
			SysFlag: protocol.PullFlagSubscription, Subscription: []byte("*"), ExpressionType: []byte("TAG")}).Encode(&req.Ext)
		return &req
	}
	if resp := call(pull("GSec1"), app, nil); resp.Code == protocol.RespNoPermission {
		t.Errorf("a granted pull: %s", resp.Remark)
	}
	refused("a pull for a group not granted", call(pull("Billing"), app, nil), "Group:Billing (Sub)")
	refused("the list of every group", call(header(protocol.ReqGetAllSubscriptionGroup), app, nil), "Group:*")

	info := runtimeInfoAs(t, cl, root)
	if atoi(info["aclDenied"]) < 12 || atoi(info["aclDeniedBadSignature"]) < 3 || atoi(info["aclDeniedUnsigned"]) < 1 {
		t.Errorf("access control counters: allowed %s denied %s (bad signature %s, unsigned %s)", info["aclAllowed"], info["aclDenied"],
			info["aclDeniedBadSignature"], info["aclDeniedUnsigned"])
	}
	logs := p.RunLog()
	if !strings.Contains(logs, "request refused") || strings.Contains(logs, "app-secret") || strings.Contains(logs, "root-secret") {
		t.Errorf("the log should name refusals and no secret:\n%s", logs)
	}
}

// runtimeInfoAs asks for GET_BROKER_RUNTIME_INFO signed by s.
func runtimeInfoAs(t *testing.T, cl *remoting.Client, s *auth.Signer) map[string]string {
	t.Helper()
	var req protocol.Command
	req.InitRequest(protocol.ReqGetBrokerRuntimeInfo, 0)
	s.Sign(&req)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cl.Invoke(ctx, &req)
	if err != nil || resp.Code != protocol.RespSuccess {
		t.Fatalf("runtime info: %v %v", err, resp)
	}
	var kv protocol.KVTable
	if err := kv.Decode(resp.Body); err != nil {
		t.Fatal(err)
	}
	return kv.Table
}

// TestMutualTLS runs the broker binary in enforcing mode with client
// certificates required, on both its listeners: a client presenting a
// certificate of the CA sends, receives and looks up routes (through
// Apogee's client, as the official Go client cannot present one); one
// without a certificate, one with another CA's, and a plain client are
// refused and counted; a rotated server certificate is used by the next
// connections while the open one keeps working.
func TestMutualTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	dir := t.TempDir()
	pki := tlstest.Write(t, t.TempDir())
	p := start(t, buildBinary(t), "--data-dir", filepath.Join(dir, "data"),
		"--tls-mode", "enforcing", "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey,
		"--tls-client-ca", pki.CA, "--tls-client-auth", "require")
	defer p.stop(t, syscall.SIGTERM)
	load := func(c tlsconf.ClientConfig) *tls.Config {
		t.Helper()
		cfg, err := c.Load()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	good := load(tlsconf.ClientConfig{CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey})
	other := tlstest.Write(t, t.TempDir())
	dial := func(addr string, cfg *tls.Config) (*remoting.Client, *protocol.Command, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cl, err := remoting.Dial(ctx, addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}, TLS: cfg})
		if err != nil {
			return nil, nil, err
		}
		var req protocol.Command
		req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
		(&protocol.GetRouteInfoRequest{Topic: []byte("TBW102")}).Encode(&req.Ext)
		resp, err := cl.Invoke(ctx, &req)
		if err != nil {
			cl.Close()
			return nil, nil, err
		}
		return cl, resp, nil
	}
	for _, addr := range []string{p.addr, p.nsAddr} {
		cl, resp, err := dial(addr, good)
		if err != nil || resp.Code != protocol.RespSuccess {
			t.Fatalf("%s with a client certificate: %v %v", addr, err, resp)
		}
		cl.Close()
		for name, cfg := range map[string]*tls.Config{
			"no client certificate":    load(tlsconf.ClientConfig{CAFile: pki.CA}),
			"another CA's certificate": load(tlsconf.ClientConfig{CAFile: pki.CA, CertFile: other.ClientCert, KeyFile: other.ClientKey}),
			"a plain client":           nil,
			"an untrusted server (CA)": load(tlsconf.ClientConfig{CAFile: other.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}),
		} {
			if cl, _, err := dial(addr, cfg); err == nil {
				cl.Close()
				t.Errorf("%s, %s: served", addr, name)
			}
		}
	}

	// Send and pull over mutual TLS, through Apogee's client (the bound
	// covers the rotation's wait too; it ends a hung test only).
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait.DefaultTimeout)
	defer cancel()
	prod, err := client.NewProducer(client.NameServer(p.addr), client.TLS(good), client.Logger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close(context.Background())
	if _, err := prod.SendSync(ctx, &client.Message{Topic: "MTLS", Body: []byte("over mutual TLS")}); err != nil {
		t.Fatalf("send over mutual TLS: %v", err)
	}

	// Rotation: the open connection keeps working, a new one gets the new
	// certificate.
	cl, _, err := dial(p.addr, good)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	before := serverSerial(t, p.addr, good)
	tlstest.Reissue(t, pki)
	wait.Until(t, "the broker to present the new certificate", func() bool { return serverSerial(t, p.addr, good) != before })
	var req protocol.Command
	req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
	(&protocol.GetRouteInfoRequest{Topic: []byte("MTLS")}).Encode(&req.Ext)
	if resp, err := cl.Invoke(ctx, &req); err != nil || resp.Code != protocol.RespSuccess {
		t.Errorf("the connection opened before the rotation: %v %v", err, resp)
	}
	if _, err := prod.SendSync(ctx, &client.Message{Topic: "MTLS", Body: []byte("after the rotation")}); err != nil {
		t.Errorf("send after the rotation: %v", err)
	}
	// The broker's counter is its own listener's: the four refused there.
	if n := atoi(runtimeInfoTLS(t, p.addr, good)["remotingHandshakeFailures"]); n < 4 {
		t.Errorf("%d handshake failures counted, want the 4 refused clients", n)
	}
}

// serverSerial connects with cfg and returns the serial number of the
// certificate the server presents.
func serverSerial(t *testing.T, addr string, cfg *tls.Config) string {
	t.Helper()
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
}

// runtimeInfoTLS asks for GET_BROKER_RUNTIME_INFO over TLS.
func runtimeInfoTLS(t *testing.T, addr string, cfg *tls.Config) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}, TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var req protocol.Command
	req.InitRequest(protocol.ReqGetBrokerRuntimeInfo, 0)
	resp, err := cl.Invoke(ctx, &req)
	if err != nil || resp.Code != protocol.RespSuccess {
		t.Fatalf("runtime info: %v %v", err, resp)
	}
	var kv protocol.KVTable
	if err := kv.Decode(resp.Body); err != nil {
		t.Fatal(err)
	}
	return kv.Table
}
