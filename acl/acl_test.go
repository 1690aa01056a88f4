package acl

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/internal/benchcpu"
	"github.com/apogeemq/apogee/internal/testlog"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

const projectFile = `
users:
  - {username: admin, password: admin-secret, userType: Super}
  - {username: alice, password: alice-secret}
  - {username: bob, password: bob-secret, userStatus: disable}
acls:
  - subject: User:alice
    policies:
      - policyType: Custom
        entries:
          - {resource: "Topic:orders", actions: [Pub, Sub], decision: Allow}
          - {resource: "Topic:orders-*", actions: [All], decision: Allow}
          - {resource: "Topic:orders-secret", actions: [Sub], decision: Deny}
          - {resource: "Group:billing", actions: [Sub], decision: Allow}
          - {resource: "Topic:lan", actions: [Pub], sourceIps: ["10.0.0.0/8"], decision: Allow}
      - policyType: Default
        entries:
          - {resource: "Topic:*", actions: [Sub], decision: Allow}
`

func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func openGuard(t *testing.T, file string) *Guard {
	t.Helper()
	g, err := Open(Options{File: file, Dir: t.TempDir(), ClusterName: "c1", ReloadInterval: 20 * time.Millisecond, Logger: testlog.New(t, "acl")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func req(code int32, ext ...string) *protocol.Command {
	c := new(protocol.Command)
	c.InitRequest(code, 1)
	for i := 0; i+1 < len(ext); i += 2 {
		c.Ext.SetString(ext[i], ext[i+1])
	}
	return c
}

func signed(c *protocol.Command, user, secret string) *protocol.Command {
	auth.NewKey(secret).Sign(c, auth.Credentials{AccessKey: user, SecretKey: secret})
	return c
}

var local = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5000}
var lan = &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 5000}

func TestCheck(t *testing.T) {
	g := openGuard(t, writeFile(t, t.TempDir(), "acl.yml", projectFile))
	send := func(topic string) *protocol.Command {
		return req(protocol.ReqSendMessage, "producerGroup", "pg", "topic", topic, "queueId", "0")
	}
	pull := func(topic, group string) *protocol.Command {
		return req(protocol.ReqPullMessage, "consumerGroup", group, "topic", topic, "queueId", "0")
	}
	for _, tc := range []struct {
		name   string
		req    *protocol.Command
		remote net.Addr
		ok     bool
		remark string
	}{
		{"unsigned", send("orders"), local, false, "no AccessKey"},
		{"unknown user", signed(send("orders"), "carol", "x"), local, false, "user not found"},
		{"disabled user", signed(send("orders"), "bob", "bob-secret"), local, false, "disabled"},
		{"wrong secret", signed(send("orders"), "alice", "wrong"), local, false, "check signature failed"},
		{"send allowed", signed(send("orders"), "alice", "alice-secret"), local, true, ""},
		{"prefix allows", signed(send("orders-eu"), "alice", "alice-secret"), local, true, ""},
		{"not granted", signed(send("payments"), "alice", "alice-secret"), local, false, "Topic:payments (Pub), no matched acl policies"},
		{"default policy allows sub", signed(pull("payments", "billing"), "alice", "alice-secret"), local, true, ""},
		{"group not granted", signed(pull("orders", "other"), "alice", "alice-secret"), local, false, "Group:other (Sub)"},
		{"literal deny beats prefix allow", signed(pull("orders-secret", "billing"), "alice", "alice-secret"), local, false, "Topic:orders-secret (Sub), the acl policy's decision is deny"},
		{"literal deny only for its action", signed(send("orders-secret"), "alice", "alice-secret"), local, true, ""},
		{"source address outside", signed(send("lan"), "alice", "alice-secret"), local, false, "Topic:lan"},
		{"source address inside", signed(send("lan"), "alice", "alice-secret"), lan, true, ""},
		{"retry topic is the group's", signed(send("%RETRY%billing"), "alice", "alice-secret"), local, true, ""},
		{"create topic needs Create", signed(req(protocol.ReqUpdateAndCreateTopic, "topic", "orders"), "alice", "alice-secret"), local, false, "Topic:orders (Create)"},
		{"create topic by prefix grant", signed(req(protocol.ReqUpdateAndCreateTopic, "topic", "orders-new"), "alice", "alice-secret"), local, true, ""},
		{"delete topic", signed(req(protocol.ReqDeleteTopicInBroker, "topic", "payments"), "alice", "alice-secret"), local, false, "Topic:payments (Delete)"},
		{"admin code", signed(req(protocol.ReqUpdateBrokerConfig), "alice", "alice-secret"), local, false, "Cluster:c1 (Update)"},
		{"unknown code is admin", signed(req(9999), "alice", "alice-secret"), local, false, "Cluster:c1 (Update)"},
		{"reset offset", signed(req(protocol.ReqInvokeBrokerToResetOffset, "group", "billing", "topic", "orders"), "alice", "alice-secret"), local, false, "(Update)"},
		{"super user", signed(req(protocol.ReqUpdateBrokerConfig), "admin", "admin-secret"), local, true, ""},
		{"list topics needs Topic:*", signed(req(protocol.ReqGetAllTopicConfig), "alice", "alice-secret"), local, false, "Topic:* (Get|List)"},
		// Request-reply: a reply's send needs Pub on its topic, as a send does.
		{"reply allowed", signed(req(protocol.ReqSendReplyMessage, "producerGroup", "pg", "topic", "orders-reply", "queueId", "0"), "alice", "alice-secret"), local, true, ""},
		{"reply not granted", signed(req(protocol.ReqSendReplyMessage, "producerGroup", "pg", "topic", "payments", "queueId", "0"), "alice", "alice-secret"), local, false, "Topic:payments (Pub)"},
		{"reply V2 allowed", signed(req(protocol.ReqSendReplyMessageV2, "a", "pg", "b", "orders-reply", "e", "0"), "alice", "alice-secret"), local, true, ""},
		{"reply V2 not granted", signed(req(protocol.ReqSendReplyMessageV2, "a", "pg", "b", "payments", "e", "0"), "alice", "alice-secret"), local, false, "Topic:payments (Pub)"},
		{"unsigned reply", req(protocol.ReqSendReplyMessageV2, "a", "pg", "b", "orders", "e", "0"), local, false, "no AccessKey"},
	} {
		ok, code, remark := g.Check(tc.remote, tc.req)
		if ok != tc.ok || !ok && (code != protocol.RespNoPermission || !strings.Contains(remark, tc.remark)) {
			t.Errorf("%s: Check = %v, %d, %q; want %v, remark containing %q", tc.name, ok, code, remark, tc.ok, tc.remark)
		}
		if !ok && strings.Contains(remark, "secret") && !strings.Contains(remark, "orders-secret") {
			t.Errorf("%s: the remark mentions a secret: %q", tc.name, remark)
		}
	}
	st := g.Stats()
	if st.Users != 3 || st.ACLs != 1 || st.Denied == 0 || st.Allowed == 0 || st.Unsigned != 2 || st.BadSignature != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestCheckHeartbeatAndLock(t *testing.T) {
	g := openGuard(t, writeFile(t, t.TempDir(), "acl.yml", projectFile))
	hb := protocol.HeartbeatData{ClientID: "c", ConsumerDataSet: []protocol.ConsumerData{{GroupName: "billing",
		SubscriptionDataSet: []protocol.SubscriptionData{{Topic: "orders"}, {Topic: "%RETRY%billing"}}}}}
	body, _ := hb.Encode()
	c := req(protocol.ReqHeartBeat)
	c.Body = body
	if ok, _, remark := g.Check(local, signed(c, "alice", "alice-secret")); !ok {
		t.Fatalf("heartbeat refused: %s", remark)
	}
	hb.ConsumerDataSet[0].GroupName = "other"
	body, _ = hb.Encode()
	c = req(protocol.ReqHeartBeat)
	c.Body = body
	if ok, _, remark := g.Check(local, signed(c, "alice", "alice-secret")); ok || !strings.Contains(remark, "Group:other") {
		t.Fatalf("heartbeat of another group: %v %s", ok, remark)
	}
	lb, _ := (&protocol.LockBatchRequestBody{ConsumerGroup: "billing", MQSet: []protocol.MessageQueue{{Topic: "orders"}, {Topic: "orders-x"}}}).Encode()
	c = req(protocol.ReqLockBatchMQ)
	c.Body = lb
	if ok, _, remark := g.Check(local, signed(c, "alice", "alice-secret")); !ok {
		t.Fatalf("lock refused: %s", remark)
	}
}

func TestPlainACLImport(t *testing.T) {
	// RocketMQ 4's distribution file, with a secret key that YAML reads as
	// a number.
	plain := `
globalWhiteRemoteAddresses:
  - 10.10.103.*
  - 192.168.0.*

accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
    groupPerms:
      # the group should convert to retry topic
      - groupA=DENY
      - groupB=PUB|SUB
      - groupC=SUB

  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 192.168.1.*
    # if it is admin, it could access all resources
    admin: true
`
	c, err := ParseFile([]byte(plain))
	if err != nil {
		t.Fatal(err)
	}
	if c.Format != "plain_acl" || len(c.Users) != 2 || c.Users[0].Password != "12345678" || c.Users[1].Type != Super || len(c.ACLs) != 1 {
		t.Fatalf("config %+v", c)
	}
	g := openGuard(t, writeFile(t, t.TempDir(), "plain_acl.yml", plain))
	pull := func(topic, group string) *protocol.Command {
		return req(protocol.ReqPullMessage, "consumerGroup", group, "topic", topic)
	}
	send := func(topic string) *protocol.Command { return req(protocol.ReqSendMessage, "topic", topic) }
	for _, tc := range []struct {
		name   string
		req    *protocol.Command
		remote net.Addr
		ok     bool
	}{
		{"topicB pub", signed(send("topicB"), "RocketMQ", "12345678"), local, true},
		{"topicA denied", signed(send("topicA"), "RocketMQ", "12345678"), local, false},
		{"topicC sub only", signed(send("topicC"), "RocketMQ", "12345678"), local, false},
		{"default topic DENY", signed(send("other"), "RocketMQ", "12345678"), local, false},
		{"default group SUB", signed(pull("topicC", "anyGroup"), "RocketMQ", "12345678"), local, true},
		{"groupA denied", signed(pull("topicC", "groupA"), "RocketMQ", "12345678"), local, false},
		{"global white address, unsigned", send("anything"), &net.TCPAddr{IP: net.IPv4(10, 10, 103, 7)}, true},
		{"account white address skips the signature", req(protocol.ReqUpdateBrokerConfig, "AccessKey", "rocketmq2"), &net.TCPAddr{IP: net.IPv4(192, 168, 1, 9)}, true},
		{"account white address elsewhere", req(protocol.ReqUpdateBrokerConfig, "AccessKey", "rocketmq2"), local, false},
		{"admin is super", signed(req(protocol.ReqUpdateBrokerConfig), "rocketmq2", "12345678"), local, true},
	} {
		if ok, _, remark := g.Check(tc.remote, tc.req); ok != tc.ok {
			t.Errorf("%s: %v (%s)", tc.name, ok, remark)
		}
	}
	for _, bad := range []string{
		"accounts:\n  - {accessKey: a, secretKey: b, topicPerms: [t=WRITE]}\n",
		"accounts:\n  - {accessKey: a}\n",
		"accounts:\n  - {accessKey: a, secretKey: b}\nusers: []\n",
		"users:\n  - {username: a, password: b}\nacls:\n  - {subject: User:z, policies: [{entries: [{resource: '*', actions: [All], decision: Allow}]}]}\n",
		"usres:\n  - {username: a, password: b}\n",
		"users:\n  - {username: a, password: b, userType: Root}\n",
		"users:\n  - {username: a, password: b}\nacls:\n  - {subject: User:a, policies: [{entries: [{resource: 'Queue:x', actions: [All], decision: Allow}]}]}\n",
		"users:\n  - {username: a, password: b}\nacls:\n  - {subject: User:a, policies: [{entries: [{resource: 'Topic:x', actions: [Fly], decision: Allow}]}]}\n",
		"users:\n  - {username: a, password: b}\nacls:\n  - {subject: User:a, policies: [{entries: [{resource: 'Topic:x', actions: [Pub], decision: Maybe}]}]}\n",
		"users:\n  - {username: a, password: b}\nacls:\n  - {subject: User:a, policies: [{entries: [{resource: 'Topic:x', actions: [Pub], sourceIps: [300.1.1.1], decision: Allow}]}]}\n",
		"globalWhiteRemoteAddresses: [nonsense]\n",
	} {
		if _, err := ParseFile([]byte(bad)); err == nil {
			t.Errorf("ParseFile accepted %q", bad)
		}
	}
}

func TestParseIPs(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		in, out []string
	}{
		{"10.0.0.0/8", []string{"10.1.2.3"}, []string{"11.0.0.1", "::1"}},
		{"192.168.1.*", []string{"192.168.1.0", "192.168.1.255"}, []string{"192.168.2.1"}},
		{"192.168.*", []string{"192.168.7.7"}, []string{"192.169.0.0"}},
		{"192.168.1.10-20", []string{"192.168.1.10", "192.168.1.20"}, []string{"192.168.1.21"}},
		{"192.168.1.{1,3}", []string{"192.168.1.1", "192.168.1.3"}, []string{"192.168.1.2"}},
		{"*", []string{"1.2.3.4", "::1"}, nil},
		{"::1", []string{"::1"}, []string{"127.0.0.1"}},
		{"127.0.0.1", []string{"127.0.0.1", "::ffff:127.0.0.1"}, []string{"127.0.0.2"}},
	} {
		ms, err := ParseIPs(tc.pattern)
		if err != nil {
			t.Errorf("%s: %v", tc.pattern, err)
			continue
		}
		for _, s := range tc.in {
			if !matchIP(ms, netip.MustParseAddr(s)) {
				t.Errorf("%s should match %s", tc.pattern, s)
			}
		}
		for _, s := range tc.out {
			if matchIP(ms, netip.MustParseAddr(s)) {
				t.Errorf("%s should not match %s", tc.pattern, s)
			}
		}
	}
	for _, bad := range []string{"", "1.2.3", "1.2.3.256", "1.2.3.5-4", "a.b.c.d", "1.2.3.4.5"} {
		if _, err := ParseIPs(bad); err == nil {
			t.Errorf("ParseIPs(%q) accepted", bad)
		}
	}
}

func TestHotReload(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "acl.yml", projectFile)
	g := openGuard(t, file)
	r := signed(req(protocol.ReqSendMessage, "topic", "payments"), "alice", "alice-secret")
	if ok, _, _ := g.Check(local, r); ok {
		t.Fatal("payments allowed before the change")
	}
	updated := strings.Replace(projectFile, `"Topic:orders", actions: [Pub, Sub]`, `"Topic:payments", actions: [Pub, Sub]`, 1)
	tmp := writeFile(t, dir, "acl.yml.tmp", updated)
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the change to take effect", func() error {
		if ok, code, remark := g.Check(local, r); !ok {
			return fmt.Errorf("payments still refused: code %d %q", code, remark)
		}
		return nil
	})
	// An empty file (an edit in place caught before its write) and a broken
	// file keep the rules in force.
	writeFile(t, dir, "acl.yml", "")
	if _, err := g.Reload(); err == nil {
		t.Fatal("an empty file reloaded")
	}
	if ok, _, _ := g.Check(local, r); !ok {
		t.Fatal("an empty file changed the rules")
	}
	writeFile(t, dir, "acl.yml", "users: [\n")
	if _, err := g.Reload(); err == nil {
		t.Fatal("a broken file reloaded")
	}
	if ok, _, _ := g.Check(local, r); !ok {
		t.Fatal("a broken file changed the rules")
	}
	if g.Stats().ReloadErrors == 0 || g.Stats().Reloads == 0 {
		t.Fatalf("stats %+v", g.Stats())
	}
}

func admin(t *testing.T, g *Guard, code int32, caller string, body any, ext ...string) (int32, string, []byte) {
	t.Helper()
	c := req(code, ext...)
	if body != nil {
		c.Body, _ = json.Marshal(body)
	}
	if caller != "" {
		c.Ext.SetString("AccessKey", caller)
	}
	return g.ServeAdmin(c)
}

func TestAdmin(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, t.TempDir(), "acl.yml", projectFile)
	g, err := Open(Options{File: file, Dir: dir, ClusterName: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ok := func(code int32, remark string) {
		t.Helper()
		if code != protocol.RespSuccess {
			t.Fatalf("code %d: %s", code, remark)
		}
	}
	code, remark, _ := admin(t, g, protocol.ReqAuthCreateUser, "admin", UserInfo{Password: "dave-secret"}, "username", "dave")
	ok(code, remark)
	if code, _, _ := admin(t, g, protocol.ReqAuthCreateUser, "admin", UserInfo{Password: "x"}, "username", "dave"); code != protocol.RespNoPermission {
		t.Fatalf("create twice: %d", code)
	}
	if code, remark, _ := admin(t, g, protocol.ReqAuthCreateUser, "alice", UserInfo{Password: "x", UserType: "Super"}, "username", "eve"); code != protocol.RespSystemError || !strings.Contains(remark, "super user") {
		t.Fatalf("a normal user creates a super user: %d %s", code, remark)
	}
	if code, remark, _ := admin(t, g, protocol.ReqAuthUpdateUser, "admin", UserInfo{Password: "x"}, "username", "alice"); code != protocol.RespNoPermission || !strings.Contains(remark, "ACL file") {
		t.Fatalf("change a file user: %d %s", code, remark)
	}
	code, remark, _ = admin(t, g, protocol.ReqAuthCreateACL, "admin", AclInfo{Policies: []PolicyInfo{{Entries: []PolicyEntryInfo{{Resource: "Topic:d-*", Actions: []string{"Pub"}, Decision: "Allow"}}}}}, "subject", "User:dave")
	ok(code, remark)
	r := signed(req(protocol.ReqSendMessage, "topic", "d-1"), "dave", "dave-secret")
	if allowed, _, remark := g.Check(local, r); !allowed {
		t.Fatalf("dave refused: %s", remark)
	}
	// GET and LIST never show a password.
	_, _, body := admin(t, g, protocol.ReqAuthGetUser, "admin", nil, "username", "dave")
	if !strings.Contains(string(body), `"username":"dave"`) || strings.Contains(string(body), "secret") {
		t.Fatalf("GET_USER body %s", body)
	}
	_, _, body = admin(t, g, protocol.ReqAuthListUser, "admin", nil)
	if !strings.Contains(string(body), "alice") || !strings.Contains(string(body), "dave") || strings.Contains(string(body), "secret") {
		t.Fatalf("LIST_USER body %s", body)
	}
	_, _, body = admin(t, g, protocol.ReqAuthGetACL, "admin", nil, "subject", "User:dave")
	var ai AclInfo
	if err := json.Unmarshal(body, &ai); err != nil || ai.Subject != "User:dave" || ai.Policies[0].Entries[0].Resource != "Topic:d-*" {
		t.Fatalf("GET_ACL %s %v", body, err)
	}
	_, _, body = admin(t, g, protocol.ReqAuthListACL, "admin", nil, "resourceFilter", "orders")
	if !strings.Contains(string(body), "User:alice") || strings.Contains(string(body), "User:dave") {
		t.Fatalf("LIST_ACL body %s", body)
	}

	// The store survives a restart, with the secret encrypted at rest.
	g.Close()
	raw, err := os.ReadFile(filepath.Join(dir, StoreFile))
	if err != nil || strings.Contains(string(raw), "dave-secret") || !strings.Contains(string(raw), "v1:") {
		t.Fatalf("%s: %s %v", StoreFile, raw, err)
	}
	if fi, err := os.Stat(filepath.Join(dir, KeyFile)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s: %v %v", KeyFile, fi, err)
	}
	g2, err := Open(Options{File: file, Dir: dir, ClusterName: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	defer g2.Close()
	if allowed, _, remark := g2.Check(local, r); !allowed {
		t.Fatalf("dave refused after a restart: %s", remark)
	}
	code, remark, _ = admin(t, g2, protocol.ReqAuthDeleteACL, "admin", nil, "subject", "User:dave", "resource", "Topic:d-*")
	ok(code, remark)
	if allowed, _, _ := g2.Check(local, r); allowed {
		t.Fatal("dave allowed after the ACL was deleted")
	}
	code, remark, _ = admin(t, g2, protocol.ReqAuthDeleteUser, "admin", nil, "username", "dave")
	ok(code, remark)
	if allowed, _, remark := g2.Check(local, r); allowed || !strings.Contains(remark, "not found") {
		t.Fatalf("deleted user: %v %s", allowed, remark)
	}
	// Without its key file the store does not open.
	os.Remove(filepath.Join(dir, KeyFile))
	code, remark, _ = admin(t, g2, protocol.ReqAuthCreateUser, "admin", UserInfo{Password: "p"}, "username", "fred")
	ok(code, remark)
	g2.Close()
	os.Remove(filepath.Join(dir, KeyFile))
	if _, err := Open(Options{Dir: dir}); err == nil {
		t.Fatal("the store opened without its key")
	}
}

func TestCheckAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates (sync.Pool drops items under it); scripts/test.sh runs this without -race")
	}
	g := openGuard(t, writeFile(t, t.TempDir(), "acl.yml", projectFile))
	for _, r := range []*protocol.Command{
		signed(req(protocol.ReqSendMessage, "producerGroup", "pg", "topic", "orders-eu", "queueId", "0"), "alice", "alice-secret"),
		signed(req(protocol.ReqPullMessage, "consumerGroup", "billing", "topic", "orders", "queueId", "0"), "alice", "alice-secret"),
		signed(req(protocol.ReqUpdateConsumerOffset, "consumerGroup", "billing", "topic", "orders"), "admin", "admin-secret"),
	} {
		if ok, _, remark := g.Check(local, r); !ok {
			t.Fatalf("refused: %s", remark)
		}
		if n := testing.AllocsPerRun(100, func() { g.Check(local, r) }); n != 0 {
			t.Errorf("code %d: Check allocates %v", r.Code, n)
		}
	}
}

// BenchmarkCheck is the broker's cost of access control per send: the
// signature over a 1 KiB body and the topic's permission.
func BenchmarkCheck(b *testing.B) {
	dir := b.TempDir()
	file := filepath.Join(dir, "acl.yml")
	os.WriteFile(file, []byte(projectFile), 0o600)
	g, err := Open(Options{File: file, Dir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	r := req(protocol.ReqSendMessage, "producerGroup", "PG", "topic", "orders-eu", "defaultTopic", "TBW102",
		"defaultTopicQueueNums", "4", "queueId", "3", "sysFlag", "0", "bornTimestamp", "1700000000000", "flag", "0",
		"properties", "UNIQ_KEY\x01AC110001000018B4AAC2\x02WAIT\x01true\x02", "reconsumeTimes", "0", "unitMode", "false")
	r.Body = make([]byte, 1024)
	signed(r, "alice", "alice-secret")
	b.ReportAllocs()
	done := benchcpu.Report(b)
	for b.Loop() {
		if ok, _, _ := g.Check(local, r); !ok {
			b.Fatal("refused")
		}
	}
	done()
}
