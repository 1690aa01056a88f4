package main

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// The floor answers a route lookup naming itself and each send with
// SUCCESS and the next queue offset, over a real socket.
func TestFloorAnswersRouteAndSends(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer(l.Addr().String())
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, l.Addr().String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })

	var rq protocol.Command
	rq.InitRequest(protocol.ReqGetRouteInfoByTopic, 0)
	route, err := cl.Invoke(ctx, &rq)
	if err != nil {
		t.Fatal(err)
	}
	if route.Code != protocol.RespSuccess || !bytes.Contains(route.Body, []byte(l.Addr().String())) {
		t.Fatalf("route: code %d, body %q; want SUCCESS naming %s", route.Code, route.Body, l.Addr())
	}
	for want := int64(1); want <= 2; want++ {
		var req protocol.Command
		req.InitRequest(protocol.ReqSendMessageV2, 0)
		req.Body = make([]byte, 1024)
		resp, err := cl.Invoke(ctx, &req)
		if err != nil {
			t.Fatal(err)
		}
		var h protocol.SendMessageResponse
		if err := h.Decode(&resp.Ext); err != nil {
			t.Fatal(err)
		}
		if resp.Code != protocol.RespSuccess || h.QueueOffset != want {
			t.Fatalf("send %d: code %d, queue offset %d", want, resp.Code, h.QueueOffset)
		}
	}
}
