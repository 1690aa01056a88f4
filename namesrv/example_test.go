package namesrv_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/apogeemq/apogee/namesrv"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// An embedded registry: the broker registers itself (no network, never expires) and a
// standalone listener answers rocketmq-client-go's route query.
func Example() {
	r := namesrv.NewRegistry(namesrv.Options{Logger: slog.New(slog.DiscardHandler)})
	defer r.Close()
	r.RegisterBroker(namesrv.BrokerRegistration{
		ClusterName: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: "192.168.1.10:10911",
		Topics: []protocol.TopicConfig{
			{TopicName: "TBW102", ReadQueueNums: 8, WriteQueueNums: 8, Perm: 7}, // auto-create on
			{TopicName: "orders", ReadQueueNums: 4, WriteQueueNums: 4, Perm: 6},
		},
	})

	l, _ := net.Listen("tcp", "127.0.0.1:0")
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- namesrv.Serve(ctx, l, r, nil) }()
	defer func() { stop(); <-served }()

	dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(dctx, l.Addr().String(), nil)
	if err != nil {
		panic(err)
	}
	defer cl.Close()

	var req protocol.Command
	req.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
	req.Version = protocol.VersionV4_5_2 // what rocketmq-client-go sends
	(&protocol.GetRouteInfoRequest{Topic: []byte("orders")}).Encode(&req.Ext)
	resp, err := cl.Invoke(dctx, &req)
	if err != nil {
		panic(err)
	}
	fmt.Println(resp.Code, string(resp.Body))

	(&protocol.GetRouteInfoRequest{Topic: []byte("nope")}).Encode(&req.Ext)
	resp, _ = cl.Invoke(dctx, &req)
	fmt.Println(resp.Code, string(resp.Remark))
	// Output:
	// 0 {"queueDatas":[{"brokerName":"broker-a","readQueueNums":4,"writeQueueNums":4,"perm":6,"topicSysFlag":0}],"brokerDatas":[{"cluster":"DefaultCluster","brokerName":"broker-a","brokerAddrs":{0:"192.168.1.10:10911"}}],"filterServerTable":{}}
	// 17 No topic route info in name server for the topic: nope
}
