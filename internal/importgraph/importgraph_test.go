package importgraph

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/apogeemq/apogee"

// allowed lists, for each package of the module, the packages of the module it
// may import (its non-test imports). It mirrors the table in design.md:
// imports point up the table, and siblings on one layer never import each other.
// Packages under internal/ may import what sits below their user; they are
// listed as they appear.
var allowed = map[string][]string{
	"mmap":     {},
	"message":  {},
	"protocol": {},
	// The generator of protocol's header codecs (go generate; standard library only).
	"protocol/internal/headergen": {},
	"filter":                      {"message"},
	"commitlog":                   {"mmap", "message"},
	"consumequeue":                {"mmap"},
	"index":                       {"mmap"},
	"litequeue":                   {"mmap"},
	"store":                       {"commitlog", "consumequeue", "index", "litequeue", "message", "mmap"},
	"remoting":                    {"protocol"},
	"namesrv":                     {"remoting", "protocol"},
	"broker":                      {"store", "remoting", "protocol", "namesrv", "broker/core", "broker/longpoll", "ha"},
	"broker/longpoll":             {}, // a feature unit: it sees only its host interface
	"client":                      {"remoting", "protocol", "message", "auth"},
	"benchmark":                   {"client", "broker", "broker/core", "broker/grpcfe", "rmqpb", "store", "message", "protocol", "namesrv", "remoting", "auth", "acl", "internal/tlsconf"},

	// The messaging core under broker (the remoting front end and the
	// process wiring): every operation of the broker on plain Go types,
	// the tables, the state files, the features and their hosts. No wire:
	// neither remoting nor namesrv (and, within protocol, codes and JSON
	// bodies only: broker/core's TestNoWireFormat checks the types).
	"broker/core": {"store", "protocol", "message", "filter", "broker/txn", "broker/pop", "broker/lite", "broker/delay", "broker/timerwheel", "broker/internal/reput", "broker/core/stats"},
	// RocketMQ's runtime statistics, counted by the core: a leaf (the metrics
	// exporter reads it).
	"broker/core/stats": {},
	// The generator of the core's reasons from errors.json (go generate;
	// standard library only).
	"broker/core/internal/errgen": {},

	// The broker's features as packages: below broker/core (which hosts
	// them), beside each other (siblings never import each other), on the
	// store's types. reput is what the features that re-store records
	// share; fakehost, the in-memory host their tests run against.
	"broker/delay":             {"store", "message", "protocol", "broker/internal/reput"},
	"broker/timerwheel":        {"store", "message", "broker/internal/reput"},
	"broker/internal/reput":    {"store", "message"},
	"broker/internal/fakehost": {"store", "message", "broker/internal/reput"},

	// Commit-log replication (the HA stream): on the store, below the
	// broker, which wires it; plain TCP, not the remoting protocol.
	"ha": {"store"},

	// Security (issue 21): authentication is on the wire format only; access
	// control on authentication and its durable files.
	"auth": {"protocol"},
	"acl":  {"auth", "protocol"},

	// The idempotent-consumption helper sits on the client; its conformance suite
	// for stores on it. The Redis store is a module of its own (not listed).
	"client/idempotent":           {"client", "remoting", "protocol", "message", "auth"},
	"client/idempotent/storetest": {"client/idempotent"},

	// Transactions (half and op queues, END_TRANSACTION's operation, the
	// checker), behind a Host broker/core implements: no remoting, no headers.
	"broker/txn": {"store", "message", "broker/internal/reput"},
	// POP (POP_MESSAGE, ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME), behind a
	// Host broker/core implements: no remoting, no headers.
	"broker/pop": {"store", "message", "broker/internal/reput"},
	// The lite topics' messaging state (docs/lite-topics.md): pure logic
	// behind a Host broker/core implements; the front end uses its types
	// (actions, offset options) in core.LiteSyncRequest.
	"broker/lite": {},

	// RocketMQ 5's gRPC protocol: the code protoc generates from the
	// project's .proto files (google.golang.org/grpc and protobuf only).
	"rmqpb": {},
	// The gRPC front end: on the messaging core, like the remoting front
	// end, but never remoting or namesrv (and of protocol only codes and
	// JSON bodies, as broker/core).
	"broker/grpcfe": {"broker/core", "broker/longpoll", "broker/lite", "rmqpb", "message", "protocol", "acl", "auth", "internal/tlsconf", "internal/logthrottle"},
	// The scenario suite: tests only (its one non-test file is the package
	// doc), run against the core and both front ends.
	"broker/scenario": {},

	// The composition root: the broker and every front end and service
	// attached to its one core.
	"node": {"broker", "broker/core", "broker/ctrlmode", "broker/grpcfe", "ha", "namesrv", "remoting", "protocol"},

	"cmd/apogee-broker":  {"node", "broker", "broker/core", "broker/ctrlmode", "broker/grpcfe", "ha", "namesrv", "store", "remoting", "protocol", "internal/version", "internal/javaprops", "acl", "auth", "internal/tlsconf", "broker/metrics", "broker/dashboard"},
	"cmd/apogee-bench":   {"benchmark", "broker", "store", "client", "auth", "internal/tlsconf"},
	"cmd/apogee-hdrplot": {"benchmark"},
	// The remoting floor a broker is measured against: the server code alone.
	"benchmark/floorbroker": {"remoting", "protocol", "internal/readyfile"},
	"cmd/apogee-admin":      {"store", "internal/version", "client", "protocol", "message", "consumequeue", "acl", "auth", "internal/tlsconf", "controller/wire", "internal/javaprops"},
	// The standalone name server: flags, its data directory and the wiring.
	"cmd/apogee-namesrv": {"namesrv", "remoting", "internal/version", "internal/javaprops", "internal/tlsconf", "acl", "protocol"},

	// The controller (automatic failover): RocketMQ 5's controller protocol
	// (wire: codes, headers, bodies on protocol alone), the Raft-replicated
	// controller on remoting (and hashicorp/raft, outside the module), and
	// the brokers' client, which neither the broker nor the store is below.
	"controller/wire":       {"protocol"},
	"controller":            {"controller/wire", "remoting", "protocol"},
	"controller/client":     {"controller/wire", "remoting", "protocol"},
	"cmd/apogee-controller": {"controller", "remoting", "internal/version", "internal/javaprops", "acl", "auth"},
	// A broker in controller mode: the broker run in the controller's
	// role, through the controller's client.
	"broker/ctrlmode": {"broker", "broker/core", "store", "ha", "controller/client", "controller/wire", "remoting", "protocol"},

	"internal/importgraph": {},
	// What runs Apogee in containers (deploy/container, deploy/kubernetes):
	// no code, tests only.
	"deploy": {},
	// The processes tests start (their ready files, logs and waits): a
	// test-only helper on the other test-only ones.
	"internal/proctest": {"internal/readyfile", "internal/wait", "internal/testlog"},
	// The throttle of log lines repeated in loops: a leaf; TLS's file
	// watcher uses it.
	"internal/logthrottle": {},
	"internal/tlsconf":     {"internal/logthrottle"},
	// Java's hashCode and number parsing, shared by the layers above: a leaf.
	"internal/javacompat": {},
	// The java.util.Properties reader of the -c files: a leaf.
	"internal/javaprops": {},
	// The connection-limit flags of the name server and the controller:
	// pflag over remoting's process-wide limits.
	"internal/limitflags": {"remoting"},
	// Basic authentication of the operator's HTTP endpoints (/metrics,
	// pprof) and the failed-login limit the dashboard shares: a leaf
	// (package acl's Guard is its Users through an interface).
	"internal/opauth": {},
	// The file-system seam below the storage packages (on mmap for File.Map),
	// the durable-file primitives on it, and the seam's fault injector, which
	// only tests import (see testOnly).
	"internal/vfs":         {"mmap"},
	"internal/durable":     {"internal/vfs"},
	"internal/vfs/errorfs": {"internal/vfs", "mmap"},
	"internal/vfs/crashfs": {"internal/vfs", "mmap"},

	// Operations over HTTP, beside the front ends: the Prometheus exporter
	// (read at scrape time from the core and the remoting server's
	// counters) and the built-in dashboard (pages on the core's admin
	// operations; the front end's few extras through an interface the
	// broker implements). The broker binary wires both on one listener.
	"broker/metrics":   {"broker/core", "broker/core/stats", "protocol", "remoting"},
	"broker/dashboard": {"broker/core", "broker/core/stats", "broker/history", "protocol", "message"},
	"broker/history":   {}, // the dashboard's sample rings: a leaf, fed by its owner
}

// testOnly lists the packages no package may import outside its tests.
var testOnly = map[string]bool{
	"internal/vfs/errorfs": true,
	"internal/vfs/crashfs": true,
	"internal/wait":        true,
	"internal/testlog":     true,
	"internal/proctest":    true,
	"broker/scenario":      true,
}

// internalAllowed lists the internal helper packages each package may use in
// addition to the table above.
var internalAllowed = map[string][]string{
	"commitlog":    {"internal/vfs", "internal/durable"},
	"consumequeue": {"internal/vfs", "internal/durable"},
	"litequeue":    {"internal/vfs", "internal/durable"},
	"store":        {"internal/hotmap", "internal/vfs", "internal/durable"},
	"client":       {"internal/hotmap", "internal/vfs", "internal/durable"},
	"message":      {"internal/javacompat"},
	"protocol":     {"internal/javacompat"},
	"filter":       {"internal/javacompat"},
	"index":        {"internal/javacompat", "internal/vfs", "internal/durable"},
	"broker/core":  {"internal/vfs", "internal/durable"},
	"namesrv":      {"internal/vfs", "internal/durable"},
	"acl":          {"internal/vfs", "internal/durable"},
	// The owners of state files outside the storage packages: their files
	// go through the seam too (Options.FS).
	"broker":          {"internal/vfs"},
	"broker/ctrlmode": {"internal/vfs", "internal/durable"},
	"controller":      {"internal/vfs", "internal/durable"},
}

func TestImportGraph(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	seen := 0
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(fields[0], module), "/")
		seen++
		ok, known := allowed[pkg]
		if !known && !strings.HasPrefix(pkg, "internal/") {
			t.Errorf("package %q is not in the design's table; add it to design.md and to this test", pkg)
			continue
		}
		permitted := map[string]bool{}
		for _, p := range ok {
			permitted[p] = true
		}
		for _, p := range internalAllowed[pkg] {
			permitted[p] = true
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			if testOnly[dep] && !testOnly[pkg] {
				t.Errorf("%s imports %s, which only tests may import", pkg, dep)
				continue
			}
			if permitted[dep] {
				continue
			}
			// Small shared helpers under internal/ may be used by anything that
			// sits above them, unless they are test harnesses.
			if strings.HasPrefix(dep, "internal/") && !strings.HasPrefix(pkg, "internal/") && !strings.Contains(dep, "harness") {
				continue
			}
			t.Errorf("%s imports %s, which the design's package table forbids", pkg, dep)
		}
	}
	if seen == 0 {
		t.Fatal("go list listed no packages")
	}
}
