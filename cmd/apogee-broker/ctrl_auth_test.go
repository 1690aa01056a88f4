package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/controller/client"
	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// ctrlACLFile has the controllers' user, the brokers' and an operator,
// all Super users, for the controller and every broker alike.
const ctrlACLFile = `
users:
  - {username: ctl, password: ctl-secret, userType: Super}
  - {username: brokers, password: brokers-secret, userType: Super}
  - {username: root, password: root-secret, userType: Super}
`

// TestControllerModeUnderACL runs a controller and a group of two brokers
// in controller mode, every process with the same ACL file and each with
// its own innerClientAuthenticationCredentials: the brokers register, one
// is elected, the other follows it (its GET_BROKER_CONFIG to the master
// signed) and joins the SyncStateSet, and signed sends are answered
// SEND_OK. A stranger without credentials is refused an id, an election
// and a SyncStateSet (NO_PERMISSION) and the master keeps writing. A broker
// without the key is refused by the controller and exits naming the key.
func TestControllerModeUnderACL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker and controller binaries")
	}
	bin := buildBinary(t)
	ctlBin := filepath.Join(t.TempDir(), "apogee-controller")
	if out, err := exec.Command("go", "build", "-o", ctlBin, "../apogee-controller").CombinedOutput(); err != nil {
		t.Fatalf("go build apogee-controller: %v\n%s", err, out)
	}
	dir := t.TempDir()
	aclFile := filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(aclFile, []byte(ctrlACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	props := filepath.Join(dir, "controller.properties")
	if err := os.WriteFile(props, []byte("aclFile="+aclFile+"\n"+
		`innerClientAuthenticationCredentials={"accessKey":"ctl","secretKey":"ctl-secret"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctls := proctest.StartControllers(t, ctlBin, 1, "-c", props)
	memberConf := func(creds bool) string {
		lines := []string{"brokerClusterName=DefaultCluster", "brokerName=g1", "enableControllerMode=true",
			"controllerAddr=" + proctest.ControllerAddrs(ctls), "aclFile=" + aclFile}
		if creds {
			lines = append(lines, innerCredsLine)
		}
		return writeConf(t, lines...)
	}
	conf := memberConf(true)
	members := make([]*proctest.Proc, 2)
	for i := range members {
		members[i] = proctest.Start(t, fmt.Sprintf("apogee-broker-%d", i), bin, "-c", conf,
			"--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--grpc-listen", "", "--namesrv-listen", "127.0.0.1:0",
			"--data-dir", t.TempDir())
	}
	root := auth.NewSigner(auth.Credentials{AccessKey: "root", SecretKey: "root-secret"})
	info := func(p *proctest.Proc) map[string]string {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cl, err := remoting.Dial(ctx, p.Ready.Listen, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		return runtimeInfoAs(t, cl, root)
	}
	var master, slave *proctest.Proc
	wait.For(t, "a master and a slave", func() error {
		r0, r1 := info(members[0])["brokerRole"], info(members[1])["brokerRole"]
		switch {
		case r0 != "SLAVE" && r1 == "SLAVE":
			master, slave = members[0], members[1]
		case r1 != "SLAVE" && r0 == "SLAVE":
			master, slave = members[1], members[0]
		default:
			return fmt.Errorf("roles %s and %s", r0, r1)
		}
		return nil
	})
	wait.For(t, "the slave replicating, in a SyncStateSet of two", func() error {
		mi := info(master)
		if s := mi["syncStateSet"]; strings.Count(s, ",") != 1 {
			return fmt.Errorf("syncStateSet %q; the slave: %v", s, info(slave)["haMasterConnected"])
		}
		return nil
	})
	for i := range 20 {
		req := sendRequest("CtlP", "CtlACL", 0, []byte(fmt.Sprintf("m%d", i)))
		if resp := signedCall(t, master.Ready.Listen, root, req); resp.Code != protocol.RespSuccess {
			t.Fatalf("send %d: %d %s", i, resp.Code, resp.Remark)
		}
	}
	wait.For(t, "the slave's commit log at the master's", func() error {
		mi, si := info(master), info(slave)
		if mi["commitLogMaxOffset"] != si["commitLogMaxOffset"] {
			return fmt.Errorf("slave at %s, master at %s", si["commitLogMaxOffset"], mi["commitLogMaxOffset"])
		}
		return nil
	})
	// A stranger without credentials asks the controller for the group:
	// an id, an election of itself, a SyncStateSet of its own. Each is
	// refused, and the master keeps its role and its writes.
	stranger, err := client.New(client.Options{Addrs: []string{ctls[0].Addr}, Cluster: "DefaultCluster", Broker: "g1",
		Addr: "127.0.0.1:1", RequestTimeout: 2 * time.Second, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	sctx, scancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer scancel()
	_, err = stranger.Register(sctx, 9, "stranger")
	refusedNP := func(what string, err error) {
		t.Helper()
		if client.Code(err) != protocol.RespNoPermission {
			t.Errorf("a stranger's %s: %v, want NO_PERMISSION", what, err)
		}
	}
	refusedNP("broker id", err)
	_, err = stranger.ElectMaster(sctx, 9, true)
	refusedNP("election", err)
	_, err = stranger.AlterSyncStateSet(sctx, 9, 1, wire.SyncStateSet{Set: []int64{9}, Epoch: 1})
	refusedNP("SyncStateSet", err)
	if r := info(master)["brokerRole"]; r == "SLAVE" {
		t.Fatalf("the master became %s", r)
	}
	if resp := signedCall(t, master.Ready.Listen, root, sendRequest("CtlP", "CtlACL", 0, []byte("after"))); resp.Code != protocol.RespSuccess {
		t.Fatalf("a send after the stranger: %d %s", resp.Code, resp.Remark)
	}

	for _, p := range members {
		if logs := p.RunLog(); strings.Contains(logs, "level=ERROR") || strings.Contains(logs, "NO_PERMISSION") {
			t.Errorf("a member with credentials logged an ERROR or a refusal:\n%s", logs)
		}
	}

	// A third member without the key: the controller refuses it.
	ctx, cancel := context.WithTimeout(context.Background(), wait.DefaultTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-c", memberConf(false), "--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0",
		"--grpc-listen", "", "--namesrv-listen", "", "--data-dir", t.TempDir()).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "NO_PERMISSION") || !strings.Contains(string(out), "innerClientAuthenticationCredentials") {
		t.Fatalf("a member without credentials: %v\n%s", err, out)
	}
}
