package main

import (
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
)

// --log-format json: every line on standard error is one JSON object
// (log/slog's); a slow request (--slow-request) is one WARN line naming the
// code; a connection closed for a malformed frame is one line, however
// many bytes it sent.
func TestJSONLogsSlowRequestsAndConnectionErrors(t *testing.T) {
	bin := buildBinary(t)
	p := start(t, bin, "--data-dir", filepath.Join(t.TempDir(), "data"), "--log-format", "json", "--slow-request", "1ns")
	var req protocol.Command
	req.InitRequest(protocol.ReqGetBrokerRuntimeInfo, 0)
	invoke(t, p.addr, &req) // every request is slow above 1ns

	// A peer that sends garbage: a frame whose length is negative, then more.
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte{0xFF, 0xFF, 0xFF, 0xF0, 1, 2, 3, 4})
	c.Write([]byte(strings.Repeat("junk", 1000)))
	buf := make([]byte, 1)
	c.SetReadDeadline(time.Now().Add(wait.DefaultTimeout)) // a bound on a hung test only
	if _, err := c.Read(buf); err == nil {
		t.Fatal("the broker answered a malformed frame")
	}
	c.Close()

	if err := p.Stop(syscall.SIGTERM); err != nil {
		t.Fatalf("exit: %v", err)
	}
	logs := p.RunLog()
	if !strings.Contains(logs, `"msg":"stopped cleanly"`) {
		t.Fatalf("no stopped-cleanly line:\n%s", logs)
	}
	var slow, connErrs int
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON log line: %q (%v)", line, err)
		}
		if rec["time"] == nil || rec["level"] == nil || rec["msg"] == nil {
			t.Fatalf("log line without time, level or msg: %q", line)
		}
		msg, _ := rec["msg"].(string)
		if msg == "broker: slow request" {
			slow++
			if rec["level"] != "WARN" || rec["code"] == nil || rec["took"] == nil {
				t.Fatalf("slow-request line %q", line)
			}
		}
		if strings.Contains(line, `"remote":"`+c.LocalAddr().String()+`"`) && !strings.Contains(msg, "slow request") {
			connErrs++
		}
	}
	if slow == 0 {
		t.Fatalf("no slow-request line:\n%s", logs)
	}
	if connErrs != 1 {
		t.Fatalf("%d lines about the bad connection, want 1:\n%s", connErrs, logs)
	}
}

func TestBadLogFormat(t *testing.T) {
	if err := run([]string{"--log-format", "xml", "--data-dir", t.TempDir()}); err == nil || !strings.Contains(err.Error(), "--log-format") {
		t.Fatalf("--log-format xml: %v", err)
	}
}
