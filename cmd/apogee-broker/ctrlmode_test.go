package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/apogeemq/apogee/internal/proctest"
	"github.com/apogeemq/apogee/internal/wait"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/rmqpb"
)

// A controller-mode group of two processes serves, on every member in
// both roles, every listener it was given: the metrics and the dashboard
// on --metrics-listen, the embedded name server (which knows the member),
// and gRPC, where a send to
// the slave's port is forwarded to the master. The master is killed: the
// survivor, now master, serves them all too.
func TestControllerModeServesEveryListener(t *testing.T) {
	bin := buildBinary(t)
	ctlBin := filepath.Join(t.TempDir(), "apogee-controller")
	if out, err := exec.Command("go", "build", "-o", ctlBin, "../apogee-controller").CombinedOutput(); err != nil {
		t.Fatalf("go build apogee-controller: %v\n%s", err, out)
	}
	ctls := proctest.StartControllers(t, ctlBin, 1)
	members := make([]*proctest.Proc, 2)
	for i := range members {
		members[i] = proctest.Start(t, fmt.Sprintf("apogee-broker-%d", i), bin,
			"--listen", "127.0.0.1:0", "--ha-listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0",
			"--namesrv-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--broker-name", "g1",
			"--data-dir", t.TempDir(), "--enable-controller-mode", "--controller-addr", proctest.ControllerAddrs(ctls))
	}
	role := func(p *proctest.Proc) string { return runtimeInfo(t, p.Ready.Listen)["brokerRole"] }
	var master, slave *proctest.Proc
	wait.For(t, "a master and a slave", func() error {
		r0, r1 := role(members[0]), role(members[1])
		switch {
		case r0 != "SLAVE" && r1 == "SLAVE":
			master, slave = members[0], members[1]
		case r1 != "SLAVE" && r0 == "SLAVE":
			master, slave = members[1], members[0]
		default:
			return fmt.Errorf("roles %s and %s", r0, r1)
		}
		return nil
	})
	serves := func(p *proctest.Proc, what string) {
		t.Helper()
		r := p.Ready
		if r.Metrics == "" || r.GRPC == "" || r.Namesrv == "" {
			t.Fatalf("%s: the ready file lacks a listener: %+v", what, r)
		}
		for path, want := range map[string]string{"/metrics": "rocketmq_", "/": "<html"} {
			if err := httpHas("http://"+r.Metrics+path, want); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		// The embedded name server answers with what registered with it:
		// this member (a slave's queues are never in routes).
		var req protocol.Command
		req.InitRequest(protocol.ReqGetBrokerClusterInfo, 0)
		if resp := invoke(t, r.Namesrv, &req); resp.Code != protocol.RespSuccess || !strings.Contains(string(resp.Body), r.Advertise) {
			t.Fatalf("%s: the embedded name server's cluster info: code %d, %s", what, resp.Code, resp.Body)
		}
		wait.For(t, what+": a gRPC send acknowledged", func() error { return grpcSend(r.GRPC, "TCtlListeners") })
	}
	serves(master, "master")
	serves(slave, "slave (its gRPC send forwarded to the master)")
	// The slave in the SyncStateSet (the controller elects only members).
	wait.For(t, "a SyncStateSet of two", func() error {
		if s := runtimeInfo(t, master.Ready.Listen)["syncStateSet"]; strings.Count(s, ",") != 1 {
			return fmt.Errorf("syncStateSet %q", s)
		}
		return nil
	})

	master.Kill()
	wait.For(t, "the slave elected", func() error {
		if r := role(slave); r == "SLAVE" {
			return fmt.Errorf("still %s", r)
		}
		return nil
	})
	serves(slave, "the new master")
}

// httpHas fetches url and checks its body holds want.
func httpHas(url, want string) error {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
		return fmt.Errorf("GET %s: %s, %d bytes, no %q", url, resp.Status, len(b), want)
	}
	return nil
}

// grpcSend sends one message over gRPC (plaintext) to addr.
func grpcSend(addr, topic string) error {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-mq-client-id", "ctlmode-test")
	r, err := rmqpb.NewMessagingServiceClient(cc).SendMessage(ctx, &rmqpb.SendMessageRequest{Messages: []*rmqpb.Message{{
		Topic: &rmqpb.Resource{Name: topic}, Body: []byte("hello"), SystemProperties: &rmqpb.SystemProperties{
			MessageId: fmt.Sprint(time.Now().UnixNano()), BornTimestamp: timestamppb.Now(), BornHost: "test",
			BodyEncoding: rmqpb.Encoding_IDENTITY}}}})
	if err != nil {
		return err
	}
	if c := r.GetStatus().GetCode(); c != rmqpb.Code_OK {
		return fmt.Errorf("SendMessage: %v %s", c, r.GetStatus().GetMessage())
	}
	return nil
}
