package remoting_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// A handler that answers cheap requests inline and parks a "pull" until data arrives,
// without holding up the connection's other requests.
func Example() {
	const codePull, codeSend int32 = 11, 10
	arrivals := make(chan remoting.Responder, 1)

	h := remoting.HandlerFunc(func(c *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
		switch req.Code {
		case codePull:
			// Park: keep only the Responder (req dies when we return).
			arrivals <- c.Defer(req)
			return remoting.Deferred
		case codeSend:
			resp.Cmd.Ext.SetString("msgId", "0001")
			return remoting.Reply
		}
		resp.Cmd.Code = protocol.RespRequestCodeNotSupported
		return remoting.Reply
	})

	srv := remoting.NewServer(h, nil)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(l)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := remoting.Dial(ctx, l.Addr().String(), nil)
	if err != nil {
		panic(err)
	}
	defer cl.Close()

	pulled := make(chan string, 1)
	var pull protocol.Command
	pull.InitRequest(codePull, 0)
	cl.InvokeAsync(&pull, 10*time.Second, func(resp *protocol.Command, err error) {
		pulled <- string(resp.Body) // copy: resp is valid only during the callback
	})
	parked := <-arrivals

	var send protocol.Command
	send.InitRequest(codeSend, 0)
	send.Body = []byte("hello")
	resp, err := cl.Invoke(ctx, &send)
	if err != nil {
		panic(err)
	}
	id, _ := resp.Ext.GetString("msgId")
	fmt.Println("send answered while the pull is parked:", id)

	// Later, from another goroutine: the message arrived, answer the pull. Body slices
	// are written without a copy; Release runs once they are on the wire.
	go func() {
		var cmd protocol.Command
		parked.InitResponse(&cmd, protocol.RespSuccess)
		stored := []byte("hello") // e.g. a view of the commit log
		parked.Reply(&remoting.Response{Cmd: &cmd, Body: [][]byte{stored},
			Release: remoting.ReleaseFunc(func() { /* unpin the segment */ })})
	}()
	fmt.Println("pull answered:", <-pulled)
	// Output:
	// send answered while the pull is parked: 0001
	// pull answered: hello
}
