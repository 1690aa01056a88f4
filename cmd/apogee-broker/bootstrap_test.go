package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// TestInitAuthenticationUser (issue 29, case 6): a broker started with
// --acl and no ACL file, and RocketMQ 5.3's initAuthenticationUser in
// broker.conf, has that user as a super user: it signs requests, creates
// the next user through the admin codes, and survives a restart (where a
// changed password in the file does not replace the stored one). Its
// password appears in no log line, and a malformed value is refused
// without showing it.
func TestInitAuthenticationUser(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	const pw, pw2 = "Boot-Secret-4242", "Other-Secret-4343"
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	conf := writeConf(t, `initAuthenticationUser={"username":"boot","password":"`+pw+`"}`)
	pp := proctest.New(t, "apogee-broker", bin)
	p := startProc(t, pp, "--namesrv-listen", "", "--data-dir", data, "--acl", "--config", conf)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	call := func(addr string, req *protocol.Command, s *auth.Signer) *protocol.Command {
		t.Helper()
		cl, err := remoting.Dial(ctx, addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if s != nil {
			s.Sign(req)
		}
		resp, err := cl.Invoke(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	runtimeInfo := func() *protocol.Command {
		var req protocol.Command
		req.InitRequest(protocol.ReqGetBrokerRuntimeInfo, 0)
		return &req
	}
	boot := auth.NewSigner(auth.Credentials{AccessKey: "boot", SecretKey: pw})
	if resp := call(p.addr, runtimeInfo(), boot); resp.Code != protocol.RespSuccess {
		t.Fatalf("the initial user's admin request: %d %s", resp.Code, resp.Remark)
	}
	if resp := call(p.addr, runtimeInfo(), nil); resp.Code != protocol.RespNoPermission {
		t.Fatalf("an unsigned request: %d, want NO_PERMISSION", resp.Code)
	}
	// The first user creates the next one (apogee-admin createUser's request).
	var create protocol.Command
	create.InitRequest(protocol.ReqAuthCreateUser, 0)
	create.Ext.SetString("username", "app")
	create.Body, _ = json.Marshal(acl.UserInfo{Username: "app", Password: "app-secret-1"})
	if resp := call(p.addr, &create, boot); resp.Code != protocol.RespSuccess {
		t.Fatalf("createUser signed by the initial user: %d %s", resp.Code, resp.Remark)
	}
	p.stop(t, syscall.SIGTERM)

	// A restart with another password in broker.conf: the stored one stays,
	// and the broker says so (without either password).
	conf2 := writeConf(t, `initAuthenticationUser={"username":"boot","password":"`+pw2+`"}`)
	p = startProc(t, pp, "--namesrv-listen", "", "--data-dir", data, "--acl", "--config", conf2)
	if resp := call(p.addr, runtimeInfo(), boot); resp.Code != protocol.RespSuccess {
		t.Errorf("after a restart the initial user's stored password is refused: %d %s", resp.Code, resp.Remark)
	}
	if resp := call(p.addr, runtimeInfo(), auth.NewSigner(auth.Credentials{AccessKey: "boot", SecretKey: pw2})); resp.Code != protocol.RespNoPermission {
		t.Errorf("the changed password in broker.conf replaced the stored one: %d", resp.Code)
	}
	if !strings.Contains(p.RunLog(), "exists already with another password") {
		t.Errorf("no WARN about the password that differs:\n%s", p.RunLog())
	}
	p.stop(t, syscall.SIGTERM)

	// A malformed value stops the start, and the error shows no secret.
	bad := writeConf(t, `initAuthenticationUser={"username":"boot","password":"`+pw+`"`)
	out, err := exec.CommandContext(ctx, bin, "--listen", "127.0.0.1:0", "--namesrv-listen", "", "--data-dir", data, "--acl", "--config", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "initAuthenticationUser") {
		t.Errorf("a malformed initAuthenticationUser: %v\n%s", err, out)
	}
	for _, logs := range []string{pp.Log(), string(out)} {
		for _, secret := range []string{pw, pw2, "app-secret-1"} {
			if strings.Contains(logs, secret) {
				t.Errorf("a password is logged (%q):\n%s", secret, logs)
			}
		}
	}
}
