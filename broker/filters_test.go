package broker

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

// sqlHeartbeat registers a consumer group subscribing topic with SQL92.
func sqlHeartbeat(t testing.TB, group, topic, expr string) *protocol.Command {
	t.Helper()
	hb := protocol.HeartbeatData{ClientID: "127.0.0.1@5", ConsumerDataSet: []protocol.ConsumerData{{
		GroupName: group, ConsumeType: "CONSUME_PASSIVELY", MessageModel: "CLUSTERING", ConsumeFromWhere: "CONSUME_FROM_FIRST_OFFSET",
		SubscriptionDataSet: []protocol.SubscriptionData{
			{Topic: topic, SubString: expr, SubVersion: time.Now().UnixNano(), ExpressionType: "SQL92"},
			{Topic: "%RETRY%" + group, SubString: "*", SubVersion: 1, ExpressionType: "TAG"},
		},
	}}}
	body, err := hb.Encode()
	if err != nil {
		t.Fatal(err)
	}
	cmd := goRequest(protocol.ReqHeartBeat)
	cmd.Body = body
	return cmd
}

func TestSQL92Filtering(t *testing.T) {
	h := featureHarness(t, nil)
	cl := h.dial(nil)
	for i, p := range []string{
		props("a", "1", "color", "red", "TAGS", "x"),
		props("a", "7", "color", "red"),
		props("a", "7", "color", "blue"),
		props("color", "red"),
	} {
		mustSend(t, cl, sendRequest("F", 0, []byte{'0' + byte(i)}, p))
	}
	// Through the heartbeat (the Go client's push consumer: its pulls say TAG).
	invoke(t, cl, sqlHeartbeat(t, "sqlg", "F", "a > 5 AND color = 'red'"))
	h.waitMax("F", 0, 4)
	resp := invoke(t, cl, pullRequest(pullArgs{group: "sqlg", topic: "F", sysFlag: protocol.PullFlagSuspend, suspendMs: 1000}))
	if recs := decodeBody(t, resp.Body); resp.Code != 0 || len(recs) != 1 || string(recs[0].Body()) != "1" {
		t.Fatalf("heartbeat SQL92 pull: code %d, %d records", resp.Code, len(recs))
	}
	// Carried by the pull (the pull consumer), with a parse error: 23 with the position.
	resp = invoke(t, cl, pullRequest(pullArgs{group: "sqlp", topic: "F", sysFlag: protocol.PullFlagSubscription, sub: "a > 5 AND", expr: "SQL92"}))
	if resp.Code != protocol.RespSubscriptionParseFailed || !strings.Contains(string(resp.Remark), "offset 9") {
		t.Fatalf("bad SQL92 in a pull: %d %q", resp.Code, resp.Remark)
	}
	// A bad expression registered by a heartbeat fails the pulls the same way.
	invoke(t, cl, sqlHeartbeat(t, "sqlbad", "F", "color IN ()"))
	resp = invoke(t, cl, pullRequest(pullArgs{group: "sqlbad", topic: "F"}))
	if resp.Code != protocol.RespSubscriptionParseFailed || !strings.Contains(string(resp.Remark), "offset") {
		t.Fatalf("bad SQL92 in a heartbeat: %d %q", resp.Code, resp.Remark)
	}
	// Retry topics are read unfiltered, whatever the subscription says.
	invoke(t, cl, heartbeatRequest(t, "127.0.0.1@1", "sqlg", map[string]string{"F": "*"}))
	mustSend(t, cl, sendRequest("%RETRY%sqlg", 0, []byte("retried"), props("color", "blue", "RETRY_TOPIC", "F")))
	got := pullSub(t, cl, "sqlg", "%RETRY%sqlg", 0, 0, 1, arrive, "color = 'red'", "SQL92")
	if len(got) != 1 || string(got[0].Body()) != "retried" {
		t.Fatalf("retry topic pull with SQL92: %d records", len(got))
	}

	// CHECK_CLIENT_CONFIG (Java clients validate SQL92 subscriptions).
	check := func(expr, typ string) *protocol.Command {
		body, _ := json.Marshal(checkClientBody{ClientID: "c", Group: "g", SubscriptionData: protocol.SubscriptionData{
			Topic: "F", SubString: expr, ExpressionType: typ}})
		cmd := goRequest(protocol.ReqCheckClientConfig)
		cmd.Body = body
		return invoke(t, cl, cmd)
	}
	if r := check("a BETWEEN 1 AND 3", "SQL92"); r.Code != 0 {
		t.Fatalf("check good SQL92: %d %s", r.Code, r.Remark)
	}
	if r := check("a BETWEEN 1", "SQL92"); r.Code != protocol.RespSubscriptionParseFailed || !strings.Contains(string(r.Remark), "offset") {
		t.Fatalf("check bad SQL92: %d %s", r.Code, r.Remark)
	}
	if r := check("x || y", "TAG"); r.Code != 0 {
		t.Fatalf("check tags: %d %s", r.Code, r.Remark)
	}
}

func TestPropertyFilterDisabled(t *testing.T) {
	h := featureHarness(t, func(o *Options) { o.Core.DisablePropertyFilter = true })
	cl := h.dial(nil)
	mustSend(t, cl, sendRequest("F", 0, []byte("x"), props("a", "1")))
	resp := invoke(t, cl, pullRequest(pullArgs{group: "sqlp", topic: "F", sysFlag: protocol.PullFlagSubscription, sub: "a = 1", expr: "SQL92"}))
	if resp.Code != protocol.RespSystemError || !strings.Contains(string(resp.Remark), "SQL92") {
		t.Fatalf("SQL92 pull with the property filter off: %d %q", resp.Code, resp.Remark)
	}
	// Tag pulls work as before.
	if got := pullN(t, cl, "F", 0, 0, 1, arrive); len(got) != 1 {
		t.Fatal("tag pull failed")
	}
	body, _ := json.Marshal(checkClientBody{SubscriptionData: protocol.SubscriptionData{Topic: "F", SubString: "a = 1", ExpressionType: "SQL92"}})
	cmd := goRequest(protocol.ReqCheckClientConfig)
	cmd.Body = body
	if r := invoke(t, cl, cmd); r.Code != protocol.RespSystemError {
		t.Fatalf("check SQL92 with the property filter off: %d", r.Code)
	}
}
