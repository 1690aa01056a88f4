package main

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/apogeemq/apogee/rmqpb"
)

// updateTopic -a +message.type=PRIORITY creates a priority topic (RocketMQ
// 5.4, RIP-80), as mqadmin's does: its gRPC route accepts PRIORITY
// messages alone (RocketMQ's proxy); an unknown type is refused, naming the
// ones there are.
func TestUpdateTopicPriorityType(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts processes")
	}
	b := startBroker(t)
	ok(t, b.ns, "updateTopic", "-c", "DefaultCluster", "-t", "PrioTopic", "-r", "4", "-w", "4", "-a", "+message.type=PRIORITY")
	if out, errText, code := admin(t, b.ns, "updateTopic", "-b", b.addr, "-t", "Urgent", "-a", "+message.type=URGENT"); code == 0 {
		t.Fatalf("message.type=URGENT accepted:\n%s%s", out, errText)
	} else {
		mustContain(t, "message.type=URGENT", out+errText, "PRIORITY")
	}

	cc, err := grpc.NewClient(b.Ready.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := rmqpb.NewMessagingServiceClient(cc).QueryRoute(ctx, &rmqpb.QueryRouteRequest{Topic: &rmqpb.Resource{Name: "PrioTopic"}})
	if err != nil || r.GetStatus().GetCode() != rmqpb.Code_OK || len(r.GetMessageQueues()) == 0 {
		t.Fatalf("route of PrioTopic: %v %v", r.GetStatus(), err)
	}
	want := []rmqpb.MessageType{rmqpb.MessageType_PRIORITY} // RocketMQ's proxy: PRIORITY alone
	for _, q := range r.GetMessageQueues() {
		if !slices.Equal(q.GetAcceptMessageTypes(), want) {
			t.Fatalf("queue %d accepts %v, want %v", q.GetId(), q.GetAcceptMessageTypes(), want)
		}
	}
}
