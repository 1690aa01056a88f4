package broker

import (
	"testing"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// fuzzSeedCommands are well-formed GoC-shaped requests for each code the
// broker serves; FuzzHandler mutates their frames.
func fuzzSeedCommands(tb testing.TB) []*protocol.Command {
	hb := heartbeatRequest(tb, "10.0.0.1@1", "cg", map[string]string{"T": "a || b"})
	lock := goRequest(protocol.ReqLockBatchMQ)
	lock.Body, _ = (&protocol.LockBatchRequestBody{ConsumerGroup: "g", ClientID: "c",
		MQSet: []protocol.MessageQueue{{Topic: "T", BrokerName: "broker-a", QueueID: 0}}}).Encode()
	create := goRequest(protocol.ReqUpdateAndCreateTopic)
	(&protocol.CreateTopicRequest{Topic: "F", DefaultTopic: "TBW102", ReadQueueNums: 2, WriteQueueNums: 2, Perm: 6, TopicFilterType: "SINGLE_TAG"}).Encode(&create.Ext)
	query := goRequest(protocol.ReqQueryMessage)
	(&protocol.QueryMessageRequest{Topic: "T", Key: "k", MaxNum: 4, EndTimestamp: 1 << 62}).Encode(&query.Ext)
	offset := goRequest(protocol.ReqUpdateConsumerOffset)
	(&protocol.UpdateConsumerOffsetRequest{ConsumerGroup: []byte("g"), Topic: []byte("T"), QueueID: 1, CommitOffset: 3}).Encode(&offset.Ext)
	sendBack := sendBackRequest("cg", 0, 0, 16, "T", "AB")
	endTx := endTxAt("pg", 0, 0, "AB", protocol.TransactionCommitType, false)
	group := goRequest(protocol.ReqUpdateAndCreateSubscription)
	group.Body = []byte(`{"groupName":"g2","consumeEnable":true,"retryMaxTimes":3,"groupRetryPolicy":{"type":"EXPONENTIAL","exponentialRetryPolicy":{"initial":1000,"max":60000,"multiplier":2}}}`)
	reset := resetReq("T", "cg", 0, true)
	check := goRequest(protocol.ReqCheckClientConfig)
	check.Body = []byte(`{"clientId":"c","group":"g","subscriptionData":{"topic":"T","subString":"a > 1","expressionType":"SQL92"}}`)
	conns := goRequest(protocol.ReqGetConsumerConnectionList)
	conns.Ext.SetString("consumerGroup", "cg")
	return []*protocol.Command{
		sendRequest("T", 0, []byte("hello"), props("UNIQ_KEY", "AB", "TAGS", "a", "KEYS", "k")),
		sendRequest("T", 0, []byte("later"), props("UNIQ_KEY", "AC", "DELAY", "3")),
		sendRequest("T", 0, []byte("at"), props("UNIQ_KEY", "AD", "TIMER_DELIVER_MS", "99999999999999")),
		halfSend("T", 0, "half", "AE", "pg"),
		sendRequest("%RETRY%cg", 0, []byte("retry"), props("RETRY_TOPIC", "T", "DELAY", "3")),
		sendBack, endTx, group, reset, check, conns,
		sendV2Request(protocol.ReqSendBatchMessage, "T", 1, batchBody(batchEntry{"a", props("TAGS", "b")}, batchEntry{"b", ""}), ""),
		pullRequest(pullArgs{group: "cg", topic: "T", sysFlag: 6, sub: "a || b", suspendMs: 20000}),
		pullRequest(pullArgs{group: "cg", topic: "T", sysFlag: 4, sub: "a > 1", expr: "SQL92"}),
		hb, lock, create, query, offset,
	}
}

// FuzzHandler feeds arbitrary frames to the broker's handler: whatever a
// client sends, the broker answers (or defers) and never panics.
func FuzzHandler(f *testing.F) {
	for _, cmd := range fuzzSeedCommands(f) {
		frame, err := protocol.AppendFrame(nil, cmd)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(frame[4:])
	}
	opts := testOptions(f, f.TempDir())
	opts.Core.AdvertiseAddr = "127.0.0.1:10911"
	b, err := New(opts)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { b.Shutdown(timeoutCtx(f)) })
	f.Fuzz(func(t *testing.T, frame []byte) {
		var req protocol.Command
		if protocol.DecodeFrame(frame, &req) != nil || req.IsResponse() {
			return
		}
		var cmd protocol.Command
		cmd.InitResponse(&req, protocol.RespSuccess)
		resp := remoting.Response{Cmd: &cmd}
		act := b.ServeRemoting(nil, &req, &resp)
		if act == remoting.Deferred {
			t.Fatalf("code %d deferred without a connection", req.Code)
		}
		if resp.Release != nil {
			resp.Release.Release()
		}
		if act == remoting.Reply && cmd.Code != protocol.RespSuccess && len(cmd.Remark) == 0 &&
			cmd.Code != protocol.RespPullNotFound && cmd.Code != protocol.RespPullOffsetMoved && cmd.Code != protocol.RespPullRetryImmediately {
			t.Fatalf("code %d answered %d without a remark", req.Code, cmd.Code)
		}
	})
}
