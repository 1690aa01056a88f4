package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
	"github.com/apogeemq/apogee/internal/wait"
)

// The controller commands through the binaries: a group of three
// apogee-controller processes, a controller-mode broker group of two
// apogee-broker processes, and apogee-admin run as an operator would run
// mqadmin.

// controllerBinary builds apogee-controller once per test binary.
var controllerBinary = sync.OnceValues(func() (string, error) {
	dir, err := binaries()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "apogee-controller")
	if out, err := exec.Command("go", "build", "-o", bin, "../apogee-controller").CombinedOutput(); err != nil {
		return "", &buildError{string(out), err}
	}
	return bin, nil
})

func startControllers(t *testing.T, n int, extra ...string) []*proctest.Controller {
	t.Helper()
	bin, err := controllerBinary()
	if err != nil {
		t.Fatal(err)
	}
	return proctest.StartControllers(t, bin, n, extra...)
}

// replicas is getSyncStateSet's JSON for one broker group.
type replicas struct {
	BrokerName     string `json:"brokerName"`
	MasterBrokerID int64  `json:"masterBrokerId"`
	MasterAddress  string `json:"masterAddress"`
	MasterEpoch    int32  `json:"masterEpoch"`
	InSync         []struct {
		BrokerID      int64  `json:"brokerId"`
		BrokerAddress string `json:"brokerAddress"`
		Alive         bool   `json:"alive"`
	} `json:"inSyncReplicas"`
}

// adminJSON runs a command with --json that must succeed and decodes its
// last line into v.
func adminJSON(t *testing.T, ns string, v any, args ...string) {
	t.Helper()
	out, errText, code := admin(t, ns, append(args, "--json")...)
	if code != 0 {
		t.Fatalf("apogee-admin %v --json: exit %d\n%s%s", args, code, out, errText)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), v); err != nil {
		t.Fatalf("apogee-admin %v --json: last line %q: %v", args, lines[len(lines)-1], err)
	}
}

// TestControllerCommands: every controller command against a group of
// three controllers and a controller-mode broker group of two, in both
// output forms; electMaster moves the master to the slave; the
// configuration is read from each controller and changed at run time;
// refusals exit 1 with the controller's reason, usage errors 2 with what
// was wrong.
func TestControllerCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs controller and broker processes")
	}
	ctls := startControllers(t, 3)
	ctlAddrs := proctest.ControllerAddrs(ctls)
	dir, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	// Member 0's embedded name server knows both members (member 1
	// registers with it too).
	start := func(i int, extra ...string) *proctest.Proc {
		args := append([]string{"--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--grpc-listen", "",
			"--broker-name", "g1", "--cluster", "DefaultCluster", "--data-dir", t.TempDir(),
			"--enable-controller-mode", "--controller-addr", ctlAddrs}, extra...)
		p := proctest.Start(t, fmt.Sprintf("apogee-broker-%d", i), filepath.Join(dir, "apogee-broker"), args...)
		t.Cleanup(p.StopClean)
		return p
	}
	m0 := start(0, "--namesrv-listen", "127.0.0.1:0")
	ns := m0.Ready.Namesrv
	m1 := start(1, "--namesrv-listen", "", "--namesrv", ns)
	addrs := map[string]bool{m0.Ready.Advertise: true, m1.Ready.Advertise: true}

	var g replicas
	syncState := func() replicas {
		var doc struct {
			Brokers []replicas `json:"brokers"`
		}
		adminJSON(t, ns, &doc, "getSyncStateSet", "-a", ctlAddrs, "-b", "g1")
		if len(doc.Brokers) != 1 {
			t.Fatalf("getSyncStateSet: %+v", doc)
		}
		return doc.Brokers[0]
	}
	wait.For(t, "a master and an in-sync slave, both online", func() error {
		g = syncState()
		if g.MasterBrokerID == 0 || len(g.InSync) != 2 || !g.InSync[0].Alive || !g.InSync[1].Alive {
			return fmt.Errorf("%+v", g)
		}
		return nil
	})
	var slaveID int64
	var slaveAddr string
	for _, r := range g.InSync {
		if !addrs[r.BrokerAddress] {
			t.Fatalf("replica %+v is neither member", r)
		}
		if r.BrokerID != g.MasterBrokerID {
			slaveID, slaveAddr = r.BrokerID, r.BrokerAddress
		}
	}

	// getControllerMetaData: the group, its leader and its three members.
	text, _, code := admin(t, "", "getControllerMetaData", "-a", ctlAddrs)
	if code != 0 {
		t.Fatalf("getControllerMetaData: exit %d", code)
	}
	mustContain(t, "getControllerMetaData", text, "#ControllerGroup\t", "#ControllerLeaderId\t", "#ControllerLeaderAddress\t127.0.0.1:", "#Peer:\t")
	var meta struct {
		Leader string   `json:"controllerLeaderAddress"`
		Peers  []string `json:"peers"`
	}
	wait.For(t, "three members in the controller group", func() error {
		adminJSON(t, "", &meta, "getControllerMetaData", "-a", ctls[2].Addr)
		if len(meta.Peers) != 3 || meta.Leader == "" {
			return fmt.Errorf("%+v", meta)
		}
		return nil
	})

	// getSyncStateSet: mqadmin's lines, the replicas' table; -c through
	// the name server.
	text, errText, code := admin(t, ns, "getSyncStateSet", "-a", ctlAddrs, "-c", "DefaultCluster")
	if code != 0 {
		t.Fatalf("getSyncStateSet -c: exit %d: %s", code, errText)
	}
	mustContain(t, "getSyncStateSet", text, "#brokerName\tg1", "#MasterAddr\t"+g.MasterAddress, "#SyncStateSetNums\t2",
		"#Replica", "InSyncReplica", "online", "master", "slave")

	// getBrokerEpoch: through the name server, each member's epoch file.
	text, errText, code = admin(t, ns, "getBrokerEpoch", "-b", "g1")
	if code != 0 {
		t.Fatalf("getBrokerEpoch: exit %d: %s", code, errText)
	}
	mustContain(t, "getBrokerEpoch", text, "#clusterName\tDefaultCluster", "#brokerName\tg1", "#brokerAddr\t"+m0.Ready.Advertise,
		"#brokerAddr\t"+m1.Ready.Advertise, "#Epoch", "#StartOffset", "#EndOffset")
	var epochs struct {
		Brokers []struct {
			BrokerAddr string `json:"brokerAddr"`
			BrokerID   int64  `json:"brokerId"`
			EpochList  []struct {
				Epoch       int32 `json:"epoch"`
				StartOffset int64 `json:"startOffset"`
				EndOffset   int64 `json:"endOffset"`
			} `json:"epochList"`
			MaxOffset int64 `json:"maxOffset"`
		} `json:"brokers"`
	}
	adminJSON(t, ns, &epochs, "getBrokerEpoch", "-c", "DefaultCluster")
	if len(epochs.Brokers) != 2 {
		t.Fatalf("getBrokerEpoch -c: %+v", epochs)
	}
	for _, b := range epochs.Brokers {
		if b.BrokerAddr == g.MasterAddress {
			if n := len(b.EpochList); n == 0 || b.EpochList[n-1].Epoch != g.MasterEpoch || b.EpochList[n-1].EndOffset != b.MaxOffset {
				t.Fatalf("the master's epochs: %+v (master epoch %d)", b, g.MasterEpoch)
			}
		}
	}

	// electMaster moves the master to the slave.
	text, errText, code = admin(t, "", "electMaster", "-a", ctlAddrs, "-b", fmt.Sprint(slaveID), "-bn", "g1", "-c", "DefaultCluster")
	if code != 0 {
		t.Fatalf("electMaster: exit %d: %s%s", code, text, errText)
	}
	mustContain(t, "electMaster", text, "#ClusterName\tDefaultCluster", "#BrokerName\tg1", "#BrokerMasterAddr\t"+slaveAddr,
		fmt.Sprintf("#MasterEpoch\t%d", g.MasterEpoch+1), "\t#Broker\t")
	wait.For(t, "the old slave serving as master, the old master in sync again", func() error {
		n := syncState()
		if n.MasterBrokerID != slaveID || n.MasterAddress != slaveAddr || len(n.InSync) != 2 {
			return fmt.Errorf("%+v", n)
		}
		return nil
	})
	wait.For(t, "the new master's role", func() error {
		var rt map[string]any
		adminJSON(t, "", &rt, "brokerStatus", "-b", slaveAddr)
		if s := fmt.Sprint(rt); !strings.Contains(s, "brokerRole:ASYNC_MASTER") && !strings.Contains(s, "brokerRole:SYNC_MASTER") {
			return fmt.Errorf("brokerStatus: %s", s)
		}
		return nil
	})
	// Electing the master it already has is refused as RocketMQ's
	// controller refuses it; --json reports the election above.
	_, errText, code = admin(t, "", "electMaster", "-a", ctls[0].Addr, "-b", fmt.Sprint(slaveID), "-bn", "g1", "-c", "DefaultCluster", "--json")
	if code != 1 || !strings.Contains(errText, "CONTROLLER_MASTER_STILL_EXIST") {
		t.Fatalf("electMaster of the master: exit %d: %s", code, errText)
	}
	// Back to the first master, with --json.
	var el struct {
		MasterBrokerID int64   `json:"masterBrokerId"`
		MasterAddress  string  `json:"masterAddress"`
		MasterEpoch    int32   `json:"masterEpoch"`
		SyncStateSet   []int64 `json:"syncStateSet"`
	}
	adminJSON(t, "", &el, "electMaster", "-a", ctls[1].Addr, "-b", fmt.Sprint(g.MasterBrokerID), "-bn", "g1", "-c", "DefaultCluster")
	if el.MasterBrokerID != g.MasterBrokerID || el.MasterAddress != g.MasterAddress || el.MasterEpoch != g.MasterEpoch+2 {
		t.Fatalf("electMaster --json: %+v", el)
	}

	// cleanBrokerMetadata: refused while the members are alive.
	_, errText, code = admin(t, "", "cleanBrokerMetadata", "-a", ctlAddrs, "-bn", "g1", "-c", "DefaultCluster")
	if code != 1 || !strings.Contains(errText, "CONTROLLER_INVALID_CLEAN_BROKER_METADATA") || !strings.Contains(errText, "is alive") {
		t.Fatalf("cleanBrokerMetadata of a living group: exit %d: %s", code, errText)
	}

	// getControllerConfig from each controller; updateControllerConfig on
	// each, then read back; a key that needs a restart is refused.
	var cfgs map[string]map[string]string
	adminJSON(t, "", &cfgs, "getControllerConfig", "-a", ctlAddrs)
	if len(cfgs) != 3 || cfgs[ctls[1].Addr]["controllerDLegerSelfId"] != "c2" || cfgs[ctls[0].Addr]["enableElectUncleanMaster"] != "false" {
		t.Fatalf("getControllerConfig: %v", cfgs)
	}
	text, _, _ = admin(t, "", "getControllerConfig", "-a", ctls[0].Addr)
	mustContain(t, "getControllerConfig", text, "============"+ctls[0].Addr+"============", "enableElectUncleanMaster", "=  false")
	text, errText, code = admin(t, "", "updateControllerConfig", "-a", ctlAddrs, "-k", "enableElectUncleanMaster", "-v", "true")
	if code != 0 {
		t.Fatalf("updateControllerConfig: exit %d: %s", code, errText)
	}
	mustContain(t, "updateControllerConfig", text, "update controller config success!", "enableElectUncleanMaster : true")
	adminJSON(t, "", &cfgs, "getControllerConfig", "-a", ctlAddrs)
	for a, c := range cfgs {
		if c["enableElectUncleanMaster"] != "true" {
			t.Fatalf("controller %s after the update: %v", a, c)
		}
	}
	_, errText, code = admin(t, "", "updateControllerConfig", "-a", ctls[0].Addr, "-k", "controllerStorePath", "-v", "/tmp/x")
	if code != 1 || !strings.Contains(errText, "controllerStorePath cannot change at run time") {
		t.Fatalf("updateControllerConfig of a restart-only key: exit %d: %s", code, errText)
	}

	// Usage errors: exit 2 and what was wrong.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"getControllerMetaData", "-a", ctlAddrs, "--bogus"}, "unknown flag: --bogus"},
		{[]string{"getControllerMetaData"}, "--controllerAddress (-a) is required"},
		{[]string{"getSyncStateSet", "-a", ctlAddrs}, "give -b BROKER_NAME or -c CLUSTER"},
		{[]string{"electMaster", "-a", ctlAddrs, "-b", "x", "-bn", "g1", "-c", "DefaultCluster"}, `--brokerId "x" is not a number`},
		{[]string{"electMaster", "-a", ctlAddrs, "-b", "1", "-c", "DefaultCluster"}, "--brokerName is required"},
		{[]string{"cleanBrokerMetadata", "-a", ctlAddrs, "-bn", "g1"}, "--clusterName (-c) is required unless --cleanLivingBroker"},
		{[]string{"cleanBrokerMetadata", "-a", ctlAddrs, "-bn", "g1", "-c", "x", "-b", "1;a"}, "want broker ids separated by ';'"},
		{[]string{"updateControllerConfig", "-a", ctlAddrs, "-k", "enableElectUncleanMaster"}, "--value is required"},
		{[]string{"getBrokerEpoch", "-b", "g1", "-i", "0"}, "--interval \"0\""},
		{[]string{"getControllerConfig", "-a", ctlAddrs, "extra"}, `unexpected arguments ["extra"]`},
		{[]string{"topicList", "-x"}, "unknown shorthand flag: 'x'"},
		{[]string{"noSuchCommand"}, `unknown command "noSuchCommand"`},
	} {
		_, errText, code := admin(t, ns, tc.args...)
		if code != 2 || !strings.Contains(errText, tc.want) {
			t.Errorf("apogee-admin %v: exit %d, stderr %q; want 2 and %q", tc.args, code, errText, tc.want)
		}
	}
}

// TestControllerCommandsUnderACL: a controller with --acl-file obeys
// apogee-admin signed as a Super user and refuses it unsigned or signed
// with a wrong secret (exit 1, NO_PERMISSION or the signature's reason).
func TestControllerCommandsUnderACL(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a controller process")
	}
	d := t.TempDir()
	aclFile := filepath.Join(d, "acl.yml")
	props := filepath.Join(d, "controller.properties")
	if err := os.WriteFile(aclFile, []byte("users:\n  - {username: ctl, password: ctl-secret, userType: Super}\n"+
		"  - {username: ops, password: ops-secret, userType: Super}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(props, []byte(`innerClientAuthenticationCredentials={"accessKey":"ctl","secretKey":"ctl-secret"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctls := startControllers(t, 1, "--acl-file", aclFile, "-c", props)
	a := ctls[0].Addr
	wait.For(t, "a leader", func() error {
		var meta struct {
			Leader string `json:"controllerLeaderAddress"`
		}
		adminJSON(t, "", &meta, "getControllerMetaData", "-a", a, "--access-key", "ops", "--secret-key", "ops-secret")
		if meta.Leader != a {
			return fmt.Errorf("leader %q", meta.Leader)
		}
		return nil
	})
	var cfgs map[string]map[string]string
	adminJSON(t, "", &cfgs, "getControllerConfig", "-a", a, "--access-key", "ops", "--secret-key", "ops-secret")
	if cfgs[a]["authenticationEnabled"] != "true" {
		t.Fatalf("getControllerConfig: %v", cfgs)
	}
	for _, creds := range [][]string{nil, {"--access-key", "ops", "--secret-key", "wrong"}} {
		for _, cmd := range [][]string{{"getControllerMetaData", "-a", a}, {"updateControllerConfig", "-a", a, "-k", "notifyBrokerRoleChanged", "-v", "false"}} {
			_, errText, code := admin(t, "", append(cmd, creds...)...)
			if code != 1 || !strings.Contains(errText, "NO_PERMISSION") {
				t.Errorf("apogee-admin %v %v: exit %d: %s", cmd, creds, code, errText)
			}
		}
	}
	adminJSON(t, "", &cfgs, "getControllerConfig", "-a", a, "--access-key", "ops", "--secret-key", "ops-secret")
	if cfgs[a]["notifyBrokerRoleChanged"] != "true" {
		t.Fatalf("a refused update changed the config: %v", cfgs)
	}
}

// TestGroupAttributesThroughAdmin: updateSubGroup --attributes creates a
// group with RocketMQ 5's attributes, changes and removes them; the
// broker keeps them (GET_ALL_SUBSCRIPTIONGROUP_CONFIG); a malformed or
// unsupported attribute is refused with the reason. (And getBrokerEpoch
// of a broker not in controller mode says so.)
func TestGroupAttributesThroughAdmin(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a broker process")
	}
	b := startBroker(t)
	if _, errText, code := admin(t, b.ns, "getBrokerEpoch", "-b", "broker-a"); code != 1 || !strings.Contains(errText, "not in controller mode") {
		t.Fatalf("getBrokerEpoch of a broker not in controller mode: exit %d: %s", code, errText)
	}
	attrs := func() map[string]string {
		t.Helper()
		cl, err := client.NewAdmin(client.NameServer(b.ns), client.InstanceName("attrs-check"))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close(context.Background())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w, err := cl.AllSubscriptionGroups(ctx, b.addr)
		if err != nil {
			t.Fatal(err)
		}
		g := w.SubscriptionGroupTable["LiteG"]
		if g == nil {
			t.Fatal("no group LiteG")
		}
		return g.Attributes
	}
	once := func(args ...string) {
		t.Helper()
		if out, errText, code := admin(t, b.ns, args...); code != 0 {
			t.Fatalf("apogee-admin %v: exit %d\n%s%s", args, code, out, errText)
		}
	}
	once("updateSubGroup", "-b", b.addr, "-g", "LiteG", "--attributes", "+lite.bind.topic=Parent,+lite.sub.model=Shared")
	if a := attrs(); a["lite.bind.topic"] != "Parent" || a["lite.sub.model"] != "Shared" || len(a) != 2 {
		t.Fatalf("created with %v", a)
	}
	once("updateSubGroup", "-b", b.addr, "-g", "LiteG", "--attributes", "-lite.sub.model,+lite.bind.topic=Other")
	if a := attrs(); a["lite.bind.topic"] != "Other" || len(a) != 1 {
		t.Fatalf("after the change: %v", a)
	}
	once("updateSubGroup", "-b", b.addr, "-g", "LiteG", "-r", "5") // no --attributes: kept
	if a := attrs(); a["lite.bind.topic"] != "Other" {
		t.Fatalf("an update without --attributes: %v", a)
	}
	for _, tc := range []struct {
		attrs, want string
		code        int
	}{
		{"lite.bind.topic=x", "a change is +key=value", 2},
		{"+x=1,+x=2", "x given twice", 2},
		{"+no.such=1", `unsupported group attribute "no.such"`, 1},
		{"-lite.sub.model", "no such attribute to remove", 1},
	} {
		_, errText, code := admin(t, b.ns, "updateSubGroup", "-b", b.addr, "-g", "LiteG", "--attributes", tc.attrs)
		if code != tc.code || !strings.Contains(errText, tc.want) {
			t.Errorf("--attributes %q: exit %d: %s; want %d and %q", tc.attrs, code, errText, tc.code, tc.want)
		}
	}
}

// TestControllerCommandsOverTLS: a controller serving TLS only is reached
// with --tls-ca; without TLS the command fails (exit 1).
func TestControllerCommandsOverTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a controller process")
	}
	pki := tlstest.Write(t, t.TempDir())
	ctls := startControllers(t, 1, "--tls-mode", "enforcing", "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey)
	a := ctls[0].Addr
	wait.For(t, "a leader, over TLS", func() error {
		var meta struct {
			Leader string `json:"controllerLeaderAddress"`
		}
		adminJSON(t, "", &meta, "getControllerMetaData", "-a", a, "--tls-ca", pki.CA)
		if meta.Leader != a {
			return fmt.Errorf("leader %q", meta.Leader)
		}
		return nil
	})
	var cfgs map[string]map[string]string
	adminJSON(t, "", &cfgs, "getControllerConfig", "-a", a, "--tls-ca", pki.CA)
	if cfgs[a]["controllerDLegerSelfId"] != "c1" {
		t.Fatalf("getControllerConfig over TLS: %v", cfgs)
	}
	if _, errText, code := admin(t, "", "getControllerMetaData", "-a", a, "--timeout", "3s"); code != 1 {
		t.Fatalf("a plain getControllerMetaData of a TLS-only controller: exit %d: %s", code, errText)
	}

	// -i: a JSON document a round until interrupted, then exit 0.
	dir, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(dir, "apogee-admin"), "getSyncStateSet", "-a", a, "--tls-ca", pki.CA, "-b", "g9", "-i", "1", "--json")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	for i := range 2 {
		if !sc.Scan() {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("getSyncStateSet -i: round %d printed nothing: %s", i, errb.String())
		}
		var doc struct {
			Brokers []replicas `json:"brokers"`
		}
		if err := json.Unmarshal(sc.Bytes(), &doc); err != nil || doc.Brokers == nil {
			t.Fatalf("getSyncStateSet -i round %d: %q: %v", i, sc.Text(), err)
		}
	}
	cmd.Process.Signal(os.Interrupt)
	io.Copy(io.Discard, out) // to EOF: the process exits
	if err := cmd.Wait(); err != nil {
		t.Fatalf("getSyncStateSet -i after SIGINT: %v: %s", err, errb.String())
	}
}
