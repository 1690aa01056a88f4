package protocol_test

import (
	"bytes"
	"fmt"

	"github.com/apogeemq/apogee/protocol"
)

// A broker's steady-state send path: read a frame, decode it into a reused Command and
// typed header, answer with a response header written before the (empty) body. None of
// these steps allocates once the buffers are warm.
func Example_sendRoundTrip() {
	// What a client writes (Apogee's client here; rocketmq-client-go writes the same shape).
	var req protocol.Command
	req.InitRequest(protocol.ReqSendMessage, 1)
	send := protocol.SendMessageRequest{
		ProducerGroup: []byte("pg"), Topic: []byte("T"), DefaultTopic: []byte("TBW102"), DefaultTopicQueueNums: 4,
		QueueID: 2, BornTimestamp: 1700000000000, Properties: []byte("UNIQ_KEY\x01ABC\x02"),
	}
	send.Encode(&req.Ext)
	req.Body = []byte("hello")
	wire, _ := protocol.AppendFrame(nil, &req)

	// The broker side.
	var (
		buf  []byte
		cmd  protocol.Command
		hdr  protocol.SendMessageRequest
		resp protocol.Command
		out  []byte
	)
	frame, err := protocol.ReadFrame(bytes.NewReader(wire), buf, protocol.DefaultMaxFrameSize)
	if err != nil {
		panic(err)
	}
	if err := protocol.DecodeFrame(frame, &cmd); err != nil {
		panic(err)
	}
	if err := hdr.Decode(&cmd.Ext); err != nil {
		panic(err)
	}
	fmt.Printf("code %d topic %s queue %d body %q\n", cmd.Code, hdr.Topic, hdr.QueueID, cmd.Body)

	resp.InitResponse(&cmd, protocol.RespSuccess)
	(&protocol.SendMessageResponse{MsgID: []byte("7F00000100002A9F0000000000000000"), QueueID: hdr.QueueID, QueueOffset: 0}).Encode(&resp.Ext)
	out, _ = protocol.AppendFrameHeader(out[:0], &resp, 0)
	fmt.Printf("%s\n", out[8:])
	// Output:
	// code 10 topic T queue 2 body "hello"
	// {"code":0,"language":"GO","version":401,"opaque":1,"flag":1,"remark":"","extFields":{"msgId":"7F00000100002A9F0000000000000000","queueId":"2","queueOffset":"0","TRACE_ON":"false"}}
}

// A name server answering rocketmq-client-go (version 317) with the route shape its hand
// parser reads.
func ExampleTopicRouteData_AppendJSON() {
	route := protocol.TopicRouteData{
		QueueDatas: []protocol.QueueData{{BrokerName: "broker-a", ReadQueueNums: 4, WriteQueueNums: 4, Perm: protocol.PermRead | protocol.PermWrite}},
		BrokerDatas: []protocol.BrokerData{{Cluster: "DefaultCluster", BrokerName: "broker-a",
			BrokerAddrs: map[int64]string{0: "10.0.0.1:10911"}}},
	}
	standard := protocol.RouteJSONStandard(protocol.VersionV4_5_2, false)
	fmt.Printf("%s\n", route.AppendJSON(nil, standard))
	// Output:
	// {"queueDatas":[{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,"perm":6,"topicSysFlag":0}],"brokerDatas":[{"cluster":"DefaultCluster","brokerName":"broker-a","brokerAddrs":{0:"10.0.0.1:10911"}}],"filterServerTable":{}}
}
