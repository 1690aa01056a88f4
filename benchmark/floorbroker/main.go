// Command floorbroker is the floor of Apogee's remoting front end, for
// measurements only: a RocketMQ remoting server on the same package
// (`remoting`, the broker's connection, read and write code) that answers
// every send at once with a made-up result and stores nothing. It answers a
// topic-route lookup with one broker of eight queues (itself), every send
// (SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE) with SUCCESS and a
// queue offset counting up, and any other request with an empty SUCCESS.
//
// Driven by apogee-bench's produce mode (scripts/bench-floor.sh), it tells
// what a Go remoting server costs per message on the machine at a given
// rate before any broker work: the system calls, the goroutine wake-ups and
// the runtime's scheduler. What apogee-broker costs above it is the broker.
//
//	floorbroker --listen 127.0.0.1:0 --ready-file /tmp/floor.ready
package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/internal/readyfile"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

func main() {
	fs := pflag.NewFlagSet("floorbroker", pflag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:0", "remoting address")
	ready := fs.String("ready-file", "", "write the bound address here (JSON, as apogee-broker's --ready-file) once listening")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	if err := run(*listen, *ready); err != nil {
		fmt.Fprintln(os.Stderr, "floorbroker:", err)
		os.Exit(1)
	}
}

func run(listen, ready string) error {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	srv := newServer(addr)
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := readyfile.Publish(ready, readyfile.File{Command: "floorbroker", PID: os.Getpid(), Listen: addr, Advertise: addr}, logger); err != nil {
		return err
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-stop
		_ = srv.Close()
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, remoting.ErrServerClosed) {
		return err
	}
	_ = readyfile.Remove(ready)
	return nil
}

// newServer is the floor's remoting server; addr is the address its route
// answer names.
func newServer(addr string) *remoting.Server {
	route := fmt.Appendf(nil, `{"brokerDatas":[{"cluster":"floor","brokerName":"floor","brokerAddrs":{"0":%q}}],`+
		`"queueDatas":[{"brokerName":"floor","readQueueNums":8,"writeQueueNums":8,"perm":6,"topicSysFlag":0}]}`, addr)
	var offset atomic.Int64
	msgID := []byte("7F00000100002A9F0000000000000000")
	region := []byte("DefaultRegion")
	h := remoting.HandlerFunc(func(_ *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
		switch req.Code {
		case protocol.ReqGetRouteInfoByTopic:
			resp.Body = [][]byte{route}
		case protocol.ReqSendMessage, protocol.ReqSendMessageV2, protocol.ReqSendBatchMessage:
			hd := protocol.SendMessageResponse{MsgID: msgID, QueueOffset: offset.Add(1), Region: region, TraceOn: true}
			hd.Encode(&resp.Cmd.Ext)
		}
		return remoting.Reply
	})
	return remoting.NewServer(h, &remoting.Options{})
}
