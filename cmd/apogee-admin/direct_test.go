package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/wait"
)

// TestDirectWithoutNameServer (issue 29, case 15): every command that
// takes -b BROKER_ADDR runs with -b alone, no name server given (no -n,
// no NAMESRV_ADDR), against a broker with access control on, as mqadmin
// talks to a broker directly; the list of such commands is read from the
// commands themselves, so a new one is tested here or the test fails.
// Without -b (and without a name server) they are usage errors whose
// message names -b.
func TestDirectWithoutNameServer(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	file := filepath.Join(t.TempDir(), "acl.yml")
	if err := os.WriteFile(file, []byte("users:\n  - {username: ops, password: ops-secret, userType: Super}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, "--acl-file", file)
	addr := b.addr
	su := []string{"--access-key", "ops", "--secret-key", "ops-secret"}
	tested := map[string]bool{}
	// direct runs a command with -b and no name server; it must succeed
	// and print each of want.
	direct := func(args []string, want ...string) string {
		t.Helper()
		tested[strings.ToLower(args[0])] = true
		args = append(append(args, "-b", addr), su...)
		text, errText, code := admin(t, "", args...)
		if code != 0 {
			t.Fatalf("apogee-admin %v without a name server: exit %d\n%s%s", args, code, text, errText)
		}
		mustContain(t, args[0], text, want...)
		return text
	}

	direct([]string{"updateTopic", "-t", "DTopic", "-r", "2", "-w", "2"}, "create topic to "+addr+" success.")
	direct([]string{"updateSubGroup", "-g", "DGroup"}, "create subscription group to "+addr+" success.")
	direct([]string{"updateSubGroup", "-g", "DGroupGone"}, "create subscription group to "+addr+" success.")
	direct([]string{"deleteSubGroup", "-g", "DGroupGone"}, "delete subscription group [DGroupGone] from broker ["+addr+"] success.")
	direct([]string{"brokerStatus"}, "runtime", "msgPutTotalTodayNow")
	direct([]string{"getBrokerConfig"}, "============"+addr+"============", "brokerClusterName")
	direct([]string{"updateBrokerConfig", "-k", "brokerPermission", "-v", "6"}, "update broker config success, "+addr)

	// A consumer of DGroup (Apogee's client, through the broker's own
	// name server: the client needs routes, apogee-admin does not).
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.NewPushConsumer(client.NameServer(b.ns), client.ConsumerGroup("DGroup"), client.Subscribe("DTopic", "*"),
		client.InstanceName("direct-consumer"), client.Credentials(auth.Credentials{AccessKey: "ops", SecretKey: "ops-secret"}),
		client.WithConcurrentListener(func(context.Context, []*client.MessageExt) client.ConsumeResult { return client.ConsumeSuccess }))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	wait.For(t, "the consumer known to the broker", func() error {
		args := append([]string{"consumerConnection", "-g", "DGroup", "-b", addr}, su...)
		if text, errText, code := admin(t, "", args...); code != 0 || !strings.Contains(text, c.ClientID()) {
			return fmt.Errorf("exit %d\n%s%s", code, text, errText)
		}
		return nil
	})
	direct([]string{"consumerConnection", "-g", "DGroup"}, c.ClientID(), "DTopic")
	direct([]string{"consumerStatus", "-g", "DGroup"}, c.ClientID(), "DTopic")

	// RocketMQ 5.3's user and ACL commands.
	direct([]string{"createUser", "-u", "dave", "-p", "dave-secret"}, "create user to "+addr+" success.")
	direct([]string{"updateUser", "-u", "dave", "-p", "dave-secret-2"}, "update user to "+addr+" success.")
	direct([]string{"getUser", "-u", "dave"}, "dave", "Normal")
	direct([]string{"listUser"}, "dave", "ops")
	direct([]string{"createAcl", "-s", "User:dave", "-r", "Topic:DTopic", "-a", "Pub", "-d", "Allow"}, "create acl to "+addr+" success.")
	direct([]string{"updateAcl", "-s", "User:dave", "-r", "Topic:DTopic", "-a", "Pub,Sub", "-d", "Allow"}, "update acl to "+addr+" success.")
	direct([]string{"getAcl", "-s", "User:dave"}, "Topic:DTopic")
	direct([]string{"listAcl"}, "User:dave")
	direct([]string{"deleteAcl", "-s", "User:dave"}, addr)
	direct([]string{"deleteUser", "-u", "dave"}, "delete user from "+addr+" success.")

	// The audit: every command that takes -b BROKER_ADDR was run above.
	var missing []string
	for name, cmd := range commands {
		if cmd.targetsBroker() && !tested[name] {
			missing = append(missing, cmd.name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("commands taking -b BROKER_ADDR not run without a name server: %v", missing)
	}

	// Without -b and without a name server: a usage error naming -b where
	// it would do.
	if _, errText, code := admin(t, "", append([]string{"getBrokerConfig"}, su...)...); code != 2 || !strings.Contains(errText, "-b BROKER_ADDR") {
		t.Errorf("getBrokerConfig without -b or a name server: exit %d, want 2 naming -b:\n%s", code, errText)
	}
	if _, errText, code := admin(t, "", "topicList"); code != 2 || !strings.Contains(errText, "no name server") || strings.Contains(errText, "-b BROKER_ADDR") {
		t.Errorf("topicList without a name server: exit %d, want 2 (and no -b hint):\n%s", code, errText)
	}
}
