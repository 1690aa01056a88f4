// Package interop tests Apogee's broker with the official RocketMQ Go client,
// github.com/apache/rocketmq-client-go/v2, and with hostile input over raw
// sockets.
//
// It is a separate Go module so that the client and its dependencies never
// enter the main module (it uses the main module's test helpers,
// internal/proctest and internal/wait, through a replace of ../). The tests
// drive the broker as a process: TestMain builds ../cmd/apogee-broker (and
// ../cmd/apogee-namesrv and ../cmd/apogee-controller, which the tests of
// standalone name servers and of failover start) once per run, and each
// test starts its own broker with every listener on a loopback port from
// :0, read from its --ready-file (no port is guessed or derived), its data
// directory and its log in t.TempDir() (the log printed if the test fails),
// stops it with SIGTERM (or SIGKILL for crash tests) and restarts it on the
// same directory and the addresses its first run bound.
//
// Run the suite with
//
//	cd interop && go test -race -count=1 ./...
//
// Environment:
//
//	ROCKETMQ_GO_LOG_LEVEL   the client's log level (default here: error)
//	APOGEE_BROKER_BIN       test this broker binary instead of building one
//	APOGEE_NAMESRV_BIN      test this name-server binary instead of building one
//	APOGEE_CONTROLLER_BIN   test this controller binary instead of building one
//
// A test that fails because of a known broker bug is kept out of the default
// run with the build tag interop_pending (none at the moment) and described
// in the findings notes; run such tests with `go test -tags interop_pending`.
// The orderly-consumer tests skip under -race because the client's orderly
// path races with itself (consumer/process_queue.go); they pass without it.
//
// The bad-input tests write frames by hand (rawconn_test.go) and check that
// the broker answers or closes, then that it still serves the real client.
package interop
