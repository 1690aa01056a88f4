package controller_test

import (
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/internal/javaprops"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// TestControllerConfig: GET_CONTROLLER_CONFIG answers ControllerConfig's
// keys as Java properties; UPDATE_CONTROLLER_CONFIG changes the two run-time
// keys and refuses, changing nothing, a key that needs a restart, a key
// that is none and a value that is not a boolean, with the reason.
func TestControllerConfig(t *testing.T) {
	c := newCluster(t, 1, nil)
	lead := c.leader()
	ctx := ctxT(t, 10*time.Second)
	conn, err := remoting.Dial(ctx, lead.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	get := func() map[string]string {
		t.Helper()
		var req protocol.Command
		req.InitRequest(wire.ReqGetControllerConfig, 0)
		resp, err := conn.Invoke(ctx, &req)
		if err != nil || resp.Code != protocol.RespSuccess {
			t.Fatalf("GET_CONTROLLER_CONFIG: %v %+v", err, resp)
		}
		props, err := javaprops.Parse(string(resp.Body))
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		for _, p := range props {
			m[p.Key] = p.Value
		}
		return m
	}
	update := func(body string) *protocol.Command {
		t.Helper()
		var req protocol.Command
		req.InitRequest(wire.ReqUpdateControllerConfig, 0)
		req.Body = []byte(body)
		resp, err := conn.Invoke(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	cfg := get()
	if cfg["controllerDLegerSelfId"] != "n1" || cfg["controllerStorePath"] != lead.opts.DataDir ||
		cfg["enableElectUncleanMaster"] != "false" || cfg["notifyBrokerRoleChanged"] != "true" ||
		cfg["scanInactiveMasterInterval"] != "50" || !strings.HasPrefix(cfg["controllerDLegerPeers"], "n1-127.0.0.1:") {
		t.Fatalf("config %v", cfg)
	}
	if r := update("enableElectUncleanMaster=true\nnotifyBrokerRoleChanged=false\n"); r.Code != protocol.RespSuccess {
		t.Fatalf("update: %d %s", r.Code, string(r.Remark))
	}
	if cfg := get(); cfg["enableElectUncleanMaster"] != "true" || cfg["notifyBrokerRoleChanged"] != "false" {
		t.Fatalf("after the update: %v", cfg)
	}
	for _, tc := range []struct {
		body, want string
		code       int32
	}{
		{"enableElectUncleanMaster=false\ncontrollerStorePath=/tmp/x\n", "controllerStorePath cannot change at run time", protocol.RespNoPermission},
		{"enableElectUncleanMaster=false\nnoSuchKey=1\n", "noSuchKey is not a controller setting", protocol.RespNoPermission},
		{"enableElectUncleanMaster=maybe\n", `enableElectUncleanMaster="maybe": want true or false`, protocol.RespInvalidParameter},
		{"# nothing\n", "no key to update", protocol.RespInvalidParameter},
	} {
		r := update(tc.body)
		if r.Code != tc.code || !strings.Contains(string(r.Remark), tc.want) {
			t.Errorf("update %q: %d %q, want %d %q", tc.body, r.Code, string(r.Remark), tc.code, tc.want)
		}
	}
	if cfg := get(); cfg["enableElectUncleanMaster"] != "true" {
		t.Fatalf("a refused update changed the config: %v", cfg)
	}
}

// TestUncleanElectionEnabledAtRunTime: without ElectUncleanMaster, the
// out-of-sync replica of a dead master is not elected; once
// UPDATE_CONTROLLER_CONFIG turns enableElectUncleanMaster on, it is.
func TestUncleanElectionEnabledAtRunTime(t *testing.T) {
	c := newCluster(t, 1, nil)
	lead := c.leader()
	ctx := ctxT(t, 20*time.Second)
	a, x := newBroker(t, c, "broker-a"), newBroker(t, c, "broker-a")
	ra := a.register(ctx)
	if _, err := a.cl.ElectMaster(ctx, ra.ID, false); err != nil {
		t.Fatal(err)
	}
	x.register(ctx)
	a.setStatus(1, 10_000)
	x.setStatus(1, 4_000)
	a.waitFigures(c)
	x.waitFigures(c)
	a.stop()
	wait.Until(t, "an election that found no master", func() bool {
		g := lead.node.Group("broker-a")
		return g.MasterID == 0 && g.MasterEpoch >= 2
	})
	conn, err := remoting.Dial(ctx, lead.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var req protocol.Command
	req.InitRequest(wire.ReqUpdateControllerConfig, 0)
	req.Body = []byte("enableElectUncleanMaster=true\n")
	if resp, err := conn.Invoke(ctx, &req); err != nil || resp.Code != protocol.RespSuccess {
		t.Fatalf("update: %v %+v", err, resp)
	}
	wait.Until(t, "the out-of-sync replica elected", func() bool {
		s, ok := x.lastState()
		return ok && s.MasterID == x.id
	})
}
