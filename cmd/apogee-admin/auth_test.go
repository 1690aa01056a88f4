package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/auth"
	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/internal/tlsconf/tlstest"
)

// The user and ACL commands through the binaries, against a broker with
// access control on: each in both output forms, signed as a super user;
// refused unsigned and with a wrong secret; what they create is enforced.
func TestAuthCommands(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	file := filepath.Join(t.TempDir(), "acl.yml")
	if err := os.WriteFile(file, []byte(`users:
  - {username: ops, password: ops-secret, userType: Super}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	b := startBroker(t, "--acl-file", file)
	ns := b.ns
	su := []string{"--access-key", "ops", "--secret-key", "ops-secret"}
	as := func(args ...string) []string { return append(args, su...) }

	// Refused without credentials, and with a wrong secret.
	out, errText, code := admin(t, ns, "listUser", "-b", b.addr)
	if code != 1 || !strings.Contains(errText, "No permission") {
		t.Fatalf("unsigned listUser: exit %d\n%s%s", code, out, errText)
	}
	out, errText, code = admin(t, ns, "listUser", "-b", b.addr, "--access-key", "ops", "--secret-key", "guess")
	if code != 1 || !strings.Contains(errText, "signature") {
		t.Fatalf("listUser with a wrong secret: exit %d\n%s%s", code, out, errText)
	}
	if _, errText, code = admin(t, ns, "listUser", "-b", b.addr, "--access-key", "ops"); code != 2 {
		t.Fatalf("an access key without a secret: exit %d, want 2\n%s", code, errText)
	}

	// Users. A change is run once as text, and once more (on another
	// user) with --json.
	text := once(t, ns, as("createUser", "-b", b.addr, "-u", "alice", "-p", "alice-secret")...)
	mustContain(t, "createUser", text, "create user to "+b.addr+" success.")
	if doc := jsonOf(t, ns, as("createUser", "-b", b.addr, "-u", "bob", "-p", "bob-secret")...); doc["username"] != "bob" {
		t.Fatalf("createUser json %v", doc)
	}
	if _, errText, code := admin(t, ns, as("createUser", "-b", b.addr, "-u", "alice", "-p", "x")...); code != 1 || !strings.Contains(errText, "existed") {
		t.Fatalf("createUser of an existing user: exit %d\n%s", code, errText)
	}
	// Through the name server's cluster table (-c), signed too; the secret
	// from the environment.
	t.Setenv(envAccessKey, "ops")
	t.Setenv(envSecretKey, "ops-secret")
	text, doc := ok(t, ns, "getUser", "-c", "DefaultCluster", "-u", "alice")
	mustContain(t, "getUser", text, "#UserName", "alice", "Normal")
	if s := toJSON(doc); !strings.Contains(s, `"username":"alice"`) || strings.Contains(s, "alice-secret") || strings.Contains(text, "alice-secret") {
		t.Fatalf("getUser json %s (the password must not show)", s)
	}
	os.Unsetenv(envAccessKey)
	os.Unsetenv(envSecretKey)
	text, doc = ok(t, ns, as("listUser", "-b", b.addr)...)
	mustContain(t, "listUser", text, "alice", "ops", "Super", "list users from")
	mustContain(t, "listUser json", toJSON(doc), `"username":"ops"`, `"username":"alice"`)
	text, _ = ok(t, ns, as("listUser", "-b", b.addr, "-f", "ali")...)
	if strings.Contains(text, "ops") {
		t.Fatalf("listUser -f ali shows ops:\n%s", text)
	}

	// ACLs.
	text = once(t, ns, as("createAcl", "-b", b.addr, "-s", "User:alice", "-r", "Topic:orders,Group:billing", "-a", "Pub,Sub", "-d", "Allow", "-i", "127.0.0.1,10.0.0.0/8")...)
	mustContain(t, "createAcl", text, "create acl to "+b.addr+" success.")
	if doc := jsonOf(t, ns, as("createAcl", "-b", b.addr, "-s", "User:bob", "-r", "Topic:bob", "-a", "Pub", "-d", "Allow")...); doc["subject"] != "User:bob" {
		t.Fatalf("createAcl json %v", doc)
	}
	ok(t, ns, as("updateAcl", "-b", b.addr, "-s", "User:alice", "-r", "Topic:secret", "-a", "All", "-d", "Deny")...)
	text, doc = ok(t, ns, as("getAcl", "-b", b.addr, "-s", "User:alice")...)
	mustContain(t, "getAcl", text, "#Subject", "#PolicyType", "User:alice", "Topic:orders", "Group:billing", "Pub,Sub", "127.0.0.1", "Topic:secret", "Deny")
	mustContain(t, "getAcl json", toJSON(doc), `"resource":"Topic:orders"`, `"decision":"Deny"`)
	text, _ = ok(t, ns, as("listAcl", "-b", b.addr, "-r", "secret")...)
	mustContain(t, "listAcl", text, "User:alice", "Topic:secret")

	// What was created is enforced: alice sends to orders, not to secret.
	p, err := client.NewProducer(client.NameServer(ns), client.ProducerGroup("alice-producer"), client.InstanceName("alice"),
		client.Credentials(auth.Credentials{AccessKey: "alice", SecretKey: "alice-secret"}))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ok(t, ns, as("updateTopic", "-b", b.addr, "-t", "orders", "-r", "1", "-w", "1")...)
	ok(t, ns, as("updateTopic", "-b", b.addr, "-t", "secret", "-r", "1", "-w", "1")...)
	if _, err := p.SendSync(ctx, &client.Message{Topic: "orders", Body: []byte("granted")}); err != nil {
		t.Fatalf("alice's send to a granted topic: %v", err)
	}
	if _, err := p.SendSync(ctx, &client.Message{Topic: "secret", Body: []byte("denied")}); err == nil || !strings.Contains(err.Error(), "Topic:secret") {
		t.Fatalf("alice's send to a denied topic: %v", err)
	}

	// Deleting entries, then the user.
	once(t, ns, as("deleteAcl", "-b", b.addr, "-s", "User:alice", "-r", "Topic:secret")...)
	if doc := jsonOf(t, ns, as("deleteAcl", "-b", b.addr, "-s", "User:bob", "-r", "Topic:bob")...); doc["subject"] != "User:bob" {
		t.Fatalf("deleteAcl json %v", doc)
	}
	text, _ = ok(t, ns, as("getAcl", "-b", b.addr, "-s", "User:alice")...)
	if strings.Contains(text, "Topic:secret") || !strings.Contains(text, "Topic:orders") {
		t.Fatalf("getAcl after deleteAcl -r Topic:secret:\n%s", text)
	}
	text, _ = ok(t, ns, as("updateUser", "-b", b.addr, "-u", "alice", "-s", "disable")...)
	mustContain(t, "updateUser", text, "update user to "+b.addr+" success.")
	text, _ = ok(t, ns, as("getUser", "-b", b.addr, "-u", "alice")...)
	mustContain(t, "getUser after disable", strings.ToLower(text), "disable")
	text = once(t, ns, as("deleteAcl", "-b", b.addr, "-s", "User:alice")...)
	mustContain(t, "deleteAcl", text, "delete acl from "+b.addr+" success.")
	text, _ = ok(t, ns, as("listAcl", "-b", b.addr)...)
	mustContain(t, "listAcl after deleteAcl", text, "there is no acl found")
	text, doc = ok(t, ns, as("deleteUser", "-b", b.addr, "-u", "alice")...)
	mustContain(t, "deleteUser", text, "delete user from "+b.addr+" success.")
	if doc["username"] != "alice" {
		t.Fatalf("deleteUser json %v", doc)
	}
	if _, errText, code := admin(t, ns, as("getUser", "-b", b.addr, "-u", "alice")...); code != 1 || !strings.Contains(errText, "not found") {
		t.Fatalf("getUser of a deleted user: exit %d\n%s", code, errText)
	}
	// Usage errors.
	if _, _, code := admin(t, ns, as("createAcl", "-b", b.addr, "-s", "User:x")...); code != 2 {
		t.Fatalf("createAcl without resources: exit %d, want 2", code)
	}
}

// once runs a command that must succeed, once, and returns its output.
func once(t *testing.T, ns string, args ...string) string {
	t.Helper()
	text, errText, code := admin(t, ns, args...)
	if code != 0 {
		t.Fatalf("apogee-admin %v: exit %d\n%s%s", args, code, text, errText)
	}
	return text
}

// TestTLSOption: apogee-admin reaches a broker (and its embedded name
// server) that serves TLS only, given --tls-ca; without --tls it fails.
func TestTLSOption(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	pki := tlstest.Write(t, t.TempDir())
	b := startBroker(t, "--tls-mode", "enforcing", "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey)
	text, doc := ok(t, b.ns, "clusterList", "--tls-ca", pki.CA)
	mustContain(t, "clusterList over TLS", text, "DefaultCluster", b.addr)
	if !strings.Contains(toJSON(doc), b.addr) {
		t.Fatalf("clusterList json over TLS: %v", doc)
	}
	ok(t, b.ns, "clusterList", "--tls-insecure")
	if out, errText, code := admin(t, b.ns, "clusterList", "--timeout", "3s"); code != 1 {
		t.Fatalf("plain clusterList against a TLS-only broker: exit %d\n%s%s", code, out, errText)
	}
}
