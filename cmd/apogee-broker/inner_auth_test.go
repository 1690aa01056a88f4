package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// innerACLFile has the brokers' own user (a Super user, what
// innerClientAuthenticationCredentials names) and an operator.
const innerACLFile = `
users:
  - {username: brokers, password: brokers-secret, userType: Super}
  - {username: root, password: root-secret, userType: Super}
`

// innerCredsLine is broker.conf's key for the brokers' user.
const innerCredsLine = `innerClientAuthenticationCredentials={"accessKey":"brokers","secretKey":"brokers-secret"}`

// signedCall sends req to addr signed by s and returns the answer.
func signedCall(t *testing.T, addr string, s *auth.Signer, req *protocol.Command) *protocol.Command {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, addr, &remoting.ClientOptions{Options: remoting.Options{Logger: quiet}, Signer: s})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := cl.Invoke(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// TestClassicSlaveUnderACL runs a classic ASYNC_MASTER and its slave as
// processes, both with --acl-file and innerClientAuthenticationCredentials
// naming a Super user: the slave registers with the master's name server,
// and its syncs of the master's tables (signed) are served, so a topic
// created on the master and a group offset committed there reach the
// slave. A second slave without the key is refused and logs an ERROR
// naming it.
func TestClassicSlaveUnderACL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker binary")
	}
	bin := buildBinary(t)
	dir := t.TempDir()
	aclFile := filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(aclFile, []byte(innerACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"brokerClusterName=DefaultCluster", "brokerName=broker-a", "flushDiskType=ASYNC_FLUSH", "aclFile=" + aclFile}
	masterConf := writeConf(t, append(slices.Clone(common), "brokerId=0", "brokerRole=ASYNC_MASTER", innerCredsLine)...)
	slaveConf := writeConf(t, append(slices.Clone(common), "brokerId=1", "brokerRole=SLAVE", innerCredsLine)...)
	m := start(t, bin, "-c", masterConf, "--data-dir", filepath.Join(dir, "master"))
	defer m.stop(t, syscall.SIGTERM)
	sl := start(t, bin, "-c", slaveConf, "--namesrv-listen", "", "--namesrv", m.nsAddr, "--data-dir", filepath.Join(dir, "slave"))
	defer sl.stop(t, syscall.SIGTERM)
	root := auth.NewSigner(auth.Credentials{AccessKey: "root", SecretKey: "root-secret"})

	// A topic created on the master, and a group offset committed there.
	var create protocol.Command
	create.InitRequest(protocol.ReqUpdateAndCreateTopic, 0)
	for k, v := range map[string]string{"topic": "InnerT", "readQueueNums": "2", "writeQueueNums": "2", "perm": "6", "topicFilterType": "SINGLE_TAG", "defaultTopic": "TBW102"} {
		create.Ext.SetString(k, v)
	}
	if resp := signedCall(t, m.addr, root, &create); resp.Code != protocol.RespSuccess {
		t.Fatalf("create the topic on the master: %d %s", resp.Code, resp.Remark)
	}
	for i := range 3 {
		req := sendRequest("InnerP", "InnerT", 0, []byte(fmt.Sprintf("m%d", i)))
		if resp := signedCall(t, m.addr, root, req); resp.Code != protocol.RespSuccess {
			t.Fatalf("send %d: %d %s", i, resp.Code, resp.Remark)
		}
	}
	var commit protocol.Command
	commit.InitRequest(protocol.ReqUpdateConsumerOffset, 0)
	(&protocol.UpdateConsumerOffsetRequest{ConsumerGroup: []byte("InnerG"), Topic: []byte("InnerT"), QueueID: 0, CommitOffset: 2}).Encode(&commit.Ext)
	if resp := signedCall(t, m.addr, root, &commit); resp.Code != protocol.RespSuccess {
		t.Fatalf("commit an offset on the master: %d %s", resp.Code, resp.Remark)
	}

	wait.For(t, "the slave's topic table has the master's topic", func() error {
		var req protocol.Command
		req.InitRequest(protocol.ReqGetAllTopicConfig, 0)
		resp := signedCall(t, sl.addr, root, &req)
		if resp.Code != protocol.RespSuccess {
			return fmt.Errorf("GET_ALL_TOPIC_CONFIG: %d %s", resp.Code, resp.Remark)
		}
		var w protocol.TopicConfigSerializeWrapper
		if err := w.Decode(resp.Body); err != nil {
			return err
		}
		if _, ok := w.TopicConfigTable["InnerT"]; !ok {
			return fmt.Errorf("%d topics, InnerT not among them", len(w.TopicConfigTable))
		}
		return nil
	})
	wait.For(t, "the slave's offset of InnerG follows the master's", func() error {
		var req protocol.Command
		req.InitRequest(protocol.ReqQueryConsumerOffset, 0)
		(&protocol.QueryConsumerOffsetRequest{ConsumerGroup: []byte("InnerG"), Topic: []byte("InnerT"), QueueID: 0}).Encode(&req.Ext)
		resp := signedCall(t, sl.addr, root, &req)
		if resp.Code != protocol.RespSuccess {
			return fmt.Errorf("QUERY_CONSUMER_OFFSET: %d %s", resp.Code, resp.Remark)
		}
		if off, _ := resp.Ext.GetString("offset"); off != "2" {
			return fmt.Errorf("offset %q", off)
		}
		return nil
	})
	if logs := sl.RunLog(); strings.Contains(logs, "level=ERROR") || strings.Contains(logs, "brokers-secret") {
		t.Errorf("the slave with the credentials logged an ERROR or the secret:\n%s", logs)
	}

	// A slave without the key: refused, and told what to set.
	bare := writeConf(t, append(slices.Clone(common), "brokerId=2", "brokerRole=SLAVE")...)
	lone := start(t, bin, "-c", bare, "--namesrv-listen", "", "--namesrv", m.nsAddr, "--data-dir", filepath.Join(dir, "bare"))
	defer lone.stop(t, syscall.SIGTERM)
	line := lone.AwaitLog("innerClientAuthenticationCredentials")
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "NO_PERMISSION") {
		t.Errorf("the slave without credentials should log an ERROR naming the key: %s", line)
	}
}

// TestClassicSlaveRefusedByMaster: a name server without access control
// (apogee-namesrv) takes every registration, so a slave without
// innerClientAuthenticationCredentials learns its master; the master, under
// ACL, refuses the slave's syncs, and the slave logs an ERROR naming the
// key.
func TestClassicSlaveRefusedByMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the broker and name server binaries")
	}
	bin := buildBinary(t)
	nsBin := filepath.Join(t.TempDir(), "apogee-namesrv")
	if out, err := exec.Command("go", "build", "-o", nsBin, "../apogee-namesrv").CombinedOutput(); err != nil {
		t.Fatalf("go build apogee-namesrv: %v\n%s", err, out)
	}
	ns := proctest.Start(t, "apogee-namesrv", nsBin, "--listen", "127.0.0.1:0", "--data-dir", t.TempDir())
	dir := t.TempDir()
	aclFile := filepath.Join(dir, "acl.yml")
	if err := os.WriteFile(aclFile, []byte(innerACLFile), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"brokerClusterName=DefaultCluster", "brokerName=broker-b", "flushDiskType=ASYNC_FLUSH", "aclFile=" + aclFile}
	m := start(t, bin, "-c", writeConf(t, append(slices.Clone(common), "brokerId=0", "brokerRole=ASYNC_MASTER", innerCredsLine)...),
		"--namesrv-listen", "", "--namesrv", ns.Ready.Listen, "--data-dir", filepath.Join(dir, "master"))
	defer m.stop(t, syscall.SIGTERM)
	sl := start(t, bin, "-c", writeConf(t, append(slices.Clone(common), "brokerId=1", "brokerRole=SLAVE")...),
		"--namesrv-listen", "", "--namesrv", ns.Ready.Listen, "--data-dir", filepath.Join(dir, "slave"))
	defer sl.stop(t, syscall.SIGTERM)
	line := sl.AwaitLog("the master refuses this slave's requests")
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "innerClientAuthenticationCredentials") {
		t.Errorf("the refused slave's line: %s", line)
	}
	if logs := sl.RunLog(); strings.Count(logs, "the master refuses this slave's requests") != 1 {
		t.Errorf("the refusal should be logged once:\n%s", logs)
	}
}
