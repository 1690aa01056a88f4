package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// TestACL: the name server with --acl-file. Unsigned requests and a
// wrong secret are refused NO_PERMISSION; a user reads the routes its ACL
// grants and may not register a broker; an apogee-broker process given
// innerClientAuthenticationCredentials of an admin user registers; the
// refusals are logged without a secret.
func TestACL(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(file, []byte(`users:
  - {username: brokers, password: brokers-secret, userType: Super}
  - {username: app, password: app-secret}
acls:
  - subject: User:app
    policies:
      - entries:
          - {resource: "Topic:orders", actions: [Pub, Sub], decision: Allow}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ns := start(t, "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "ns"), "--acl-file", file)

	signed := func(req *protocol.Command, ak, sk string) *protocol.Command {
		auth.NewKey(sk).Sign(req, auth.Credentials{AccessKey: ak, SecretKey: sk})
		return req
	}
	routeReq := func(topic string) *protocol.Command {
		var req protocol.Command
		req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
		(&protocol.GetRouteInfoRequest{Topic: []byte(topic)}).Encode(&req.Ext)
		return &req
	}
	c := dial(t, ns.addr)
	if resp := invoke(t, c, routeReq("orders")); resp.Code != protocol.RespNoPermission || !strings.Contains(string(resp.Remark), "AccessKey") {
		t.Fatalf("unsigned route: %d %s", resp.Code, resp.Remark)
	}
	if resp := invoke(t, c, signed(routeReq("orders"), "app", "guess")); resp.Code != protocol.RespNoPermission || !strings.Contains(string(resp.Remark), "signature") {
		t.Fatalf("route with a wrong secret: %d %s", resp.Code, resp.Remark)
	}
	// Granted: the route is looked up (there is none yet).
	if resp := invoke(t, c, signed(routeReq("orders"), "app", "app-secret")); resp.Code != protocol.RespTopicNotExist {
		t.Fatalf("granted route: %d %s", resp.Code, resp.Remark)
	}
	if resp := invoke(t, c, signed(routeReq("billing"), "app", "app-secret")); resp.Code != protocol.RespNoPermission || !strings.Contains(string(resp.Remark), "Topic:billing") {
		t.Fatalf("route of a topic not granted: %d %s", resp.Code, resp.Remark)
	}
	var ci protocol.Command
	ci.InitRequest(protocol.ReqGetBrokerClusterInfo, 0)
	if resp := invoke(t, c, signed(&ci, "app", "app-secret")); resp.Code != protocol.RespNoPermission || !strings.Contains(string(resp.Remark), "Cluster:DefaultCluster") {
		t.Fatalf("cluster info as a normal user: %d %s", resp.Code, resp.Remark)
	}

	// A broker process registers with the credentials of its broker.conf.
	bin := filepath.Join(dir, "apogee-broker")
	if out, err := exec.Command("go", "build", "-o", bin, "../apogee-broker").CombinedOutput(); err != nil {
		t.Fatalf("go build apogee-broker: %v\n%s", err, out)
	}
	conf := filepath.Join(dir, "broker.conf")
	if err := os.WriteFile(conf, []byte(`innerClientAuthenticationCredentials={"accessKey":"brokers","secretKey":"brokers-secret"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	broker := proctest.Start(t, "apogee-broker", bin, "--listen", "127.0.0.1:0", "--namesrv-listen", "", "--grpc-listen", "",
		"--namesrv", ns.addr, "--data-dir", filepath.Join(dir, "broker"), "--config", conf)
	t.Cleanup(broker.StopClean)
	// TBW102, which every broker registers, has an open route.
	wait.Equal(t, "the broker's registration", protocol.RespSuccess, func() int32 {
		return invoke(t, c, signed(routeReq("TBW102"), "app", "app-secret")).Code
	})
	ci.InitRequest(protocol.ReqGetBrokerClusterInfo, 0)
	resp := invoke(t, c, signed(&ci, "brokers", "brokers-secret"))
	if resp.Code != protocol.RespSuccess || !regexp.MustCompile(`"brokerName":"[^"]+"`).Match(resp.Body) {
		t.Fatalf("cluster info as the admin: %d %s %s", resp.Code, resp.Remark, resp.Body)
	}
	if logs := broker.RunLog(); strings.Contains(logs, "registration failed") {
		t.Fatalf("the broker's registration was refused:\n%s", logs)
	}

	// An unsigned registration (a broker without credentials) is refused.
	var reg protocol.Command
	reg.InitRequest(protocol.ReqRegisterBroker, 0)
	(&protocol.RegisterBrokerRequest{BrokerName: "rogue", BrokerAddr: "127.0.0.1:1", ClusterName: "DefaultCluster"}).Encode(&reg.Ext)
	if resp := invoke(t, c, &reg); resp.Code != protocol.RespNoPermission {
		t.Fatalf("unsigned REGISTER_BROKER: %d %s", resp.Code, resp.Remark)
	}
	logs := ns.RunLog()
	for _, secret := range []string{"app-secret", "brokers-secret", "guess"} {
		if strings.Contains(logs, secret) {
			t.Fatalf("the name server's log shows %q:\n%s", secret, logs)
		}
	}
	if !strings.Contains(logs, "acl: request refused") {
		t.Fatalf("no refusal logged:\n%s", logs)
	}
}
