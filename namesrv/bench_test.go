package namesrv

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// A cached route is served without allocating.
func TestRouteServedWithoutAllocation(t *testing.T) {
	r := NewRegistry(Options{Logger: quietLogger()})
	defer r.Close()
	r.RegisterBroker(embeddedA)
	req := routeReq("T")
	var cmd protocol.Command
	resp := remoting.Response{Cmd: &cmd}
	serve := func() {
		cmd.InitResponse(req, protocol.RespSuccess)
		r.ServeRemoting(nil, req, &resp)
	}
	serve()
	if cmd.Code != 0 || len(cmd.Body) == 0 {
		t.Fatalf("answered %d", cmd.Code)
	}
	if n := testing.AllocsPerRun(1000, serve); n != 0 {
		t.Fatalf("%v allocs per served route", n)
	}
}

// BenchmarkRoute measures GET_ROUTEINFO_BY_TOPIC: "handler" is ServeRemoting alone on
// a cached route (a topic hosted by two brokers, one with a slave); "network" is a
// full round trip over a loopback connection, as rocketmq-client-go makes it.
func BenchmarkRoute(b *testing.B) {
	setup := func(r *Registry) {
		r.RegisterBroker(embeddedA)
		r.RegisterBroker(BrokerRegistration{ClusterName: "DefaultCluster", BrokerName: "broker-a", BrokerAddr: "127.0.0.2:10911", BrokerID: 1})
		r.RegisterBroker(BrokerRegistration{ClusterName: "DefaultCluster", BrokerName: "broker-b", BrokerAddr: "127.0.0.3:10911",
			Topics: []protocol.TopicConfig{topicConf("T", 8, 6)}})
	}
	b.Run("handler", func(b *testing.B) {
		r := NewRegistry(Options{Logger: quietLogger()})
		defer r.Close()
		setup(r)
		req := routeReq("T")
		var cmd protocol.Command
		resp := remoting.Response{Cmd: &cmd}
		b.ReportAllocs()
		for b.Loop() {
			cmd.InitResponse(req, protocol.RespSuccess)
			r.ServeRemoting(nil, req, &resp)
		}
		b.SetBytes(int64(len(cmd.Body)))
	})
	b.Run("network", func(b *testing.B) {
		s := startServer(b, Options{})
		setup(s.r)
		cl := dial(b, s.addr)
		req := routeReq("T")
		var resp protocol.Command
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		b.ReportAllocs()
		for b.Loop() {
			if err := cl.InvokeInto(ctx, req, &resp); err != nil || resp.Code != 0 {
				b.Fatal(err, resp.Code)
			}
		}
		b.SetBytes(int64(len(resp.Body)))
	})
}

// BenchmarkRegister measures a broker's periodic re-registration with 1000 unchanged
// topics, decoded from the JSON body as the name server receives it.
func BenchmarkRegister(b *testing.B) {
	r := NewRegistry(Options{Logger: quietLogger()})
	defer r.Close()
	reg := BrokerRegistration{ClusterName: "c", BrokerName: "b", BrokerAddr: "10.0.0.1:10911"}
	for i := range 1000 {
		reg.Topics = append(reg.Topics, topicConf(fmt.Sprintf("topic-%04d", i), 8, 6))
	}
	req := registerReq(b, reg, nil)
	var cmd protocol.Command
	resp := remoting.Response{Cmd: &cmd}
	b.SetBytes(int64(len(req.Body)))
	b.ReportAllocs()
	for b.Loop() {
		cmd.InitResponse(req, protocol.RespSuccess)
		r.ServeRemoting(&remoting.Conn{}, req, &resp)
		if cmd.Code != 0 {
			b.Fatal(cmd.Code, string(cmd.Remark))
		}
	}
}

// BenchmarkKVPut measures a PUT_KV_CONFIG through ServeRemoting: "memory" is the
// embedded registry's (no file), "file" writes kvConfig.json (temporary file, fsync,
// link to .bak, rename, directory fsync) before answering, with 100 keys in the table.
func BenchmarkKVPut(b *testing.B) {
	for _, withFile := range []bool{false, true} {
		name := "memory"
		if withFile {
			name = "file"
		}
		b.Run(name, func(b *testing.B) {
			opts := Options{Logger: quietLogger()}
			if withFile {
				opts.KVConfigPath = b.TempDir() + "/kvConfig.json"
			}
			r, err := OpenRegistry(opts)
			if err != nil {
				b.Fatal(err)
			}
			defer r.Close()
			for i := range 100 {
				if _, err := r.changeKV("ns", fmt.Sprintf("key-%03d", i), "value", false); err != nil {
					b.Fatal(err)
				}
			}
			var req, cmd protocol.Command
			resp := remoting.Response{Cmd: &cmd}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				req.InitRequest(protocol.ReqPutKVConfig, 0)
				req.Ext.SetString("namespace", "ns")
				req.Ext.SetString("key", "key-007")
				req.Ext.SetString("value", fmt.Sprint(i))
				cmd.InitResponse(&req, protocol.RespSuccess)
				r.ServeRemoting(nil, &req, &resp)
				if cmd.Code != 0 {
					b.Fatalf("answered %d %s", cmd.Code, cmd.Remark)
				}
			}
		})
	}
}
