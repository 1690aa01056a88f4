package namesrv

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// FuzzServeRemoting feeds arbitrary headers and bodies to every name-server code: the
// registry must answer each without panicking, keep its invariants, and only ever
// serve routes that decode.
func FuzzServeRemoting(f *testing.F) {
	reg := BrokerRegistration{ClusterName: "c", BrokerName: "b", BrokerAddr: "10.0.0.1:10911",
		Topics: []protocol.TopicConfig{topicConf("T", 4, 6)}}
	good := registerReq(f, reg, nil)
	f.Add(uint16(protocol.ReqRegisterBroker), "brokerName=b\nbrokerAddr=10.0.0.1:10911\nclusterName=c\nbrokerId=0\nbodyCrc32=0", good.Body, int16(479))
	f.Add(uint16(protocol.ReqRegisterBroker), "brokerName=b\nbrokerAddr=a:1\nclusterName=c\nbrokerId=1\ncompressed=true", []byte{0x78, 0x9c}, int16(479))
	f.Add(uint16(protocol.ReqGetRouteInfoByTopic), "topic=T", []byte(nil), int16(317))
	f.Add(uint16(protocol.ReqGetRouteInfoByTopic), "topic=T\nacceptStandardJsonOnly=true", []byte(nil), int16(317))
	f.Add(uint16(protocol.ReqUnregisterBroker), "brokerName=b\nbrokerAddr=10.0.0.1:10911\nclusterName=c\nbrokerId=0", []byte(nil), int16(479))
	f.Add(uint16(protocol.ReqDeleteTopicInNameSrv), "topic=T\nclusterName=c", []byte(nil), int16(479))
	f.Add(uint16(protocol.ReqPutKVConfig), "namespace=ORDER_TOPIC_CONFIG\nkey=T\nvalue=b:4", []byte(nil), int16(479))
	f.Add(uint16(protocol.ReqGetKVListByNamespace), "namespace=ORDER_TOPIC_CONFIG", []byte(nil), int16(479))
	f.Add(uint16(protocol.ReqGetBrokerClusterInfo), "", []byte(nil), int16(-1))
	f.Add(uint16(protocol.ReqGetAllTopicListFromNameSrv), "", []byte("junk"), int16(0))

	r := NewRegistry(Options{Logger: quietLogger()})
	f.Cleanup(r.Close)
	conn := &remoting.Conn{}
	f.Fuzz(func(t *testing.T, code uint16, ext string, body []byte, version int16) {
		var req, cmd protocol.Command
		req.InitRequest(int32(code), 0)
		req.Version = int32(version)
		for _, line := range strings.Split(ext, "\n") {
			if k, v, ok := strings.Cut(line, "="); ok {
				req.Ext.SetString(k, v)
			}
		}
		req.Body = body
		cmd.InitResponse(&req, protocol.RespSuccess)
		if act := r.ServeRemoting(conn, &req, &remoting.Response{Cmd: &cmd}); act != remoting.Reply {
			t.Fatalf("action %v", act)
		}
		if !cmd.IsResponse() || cmd.Opaque != req.Opaque {
			t.Fatal("not a response to the request")
		}
		if !IsNamesrvCode(int32(code)) && cmd.Code != protocol.RespRequestCodeNotSupported {
			t.Fatalf("code %d answered %d", code, cmd.Code)
		}
		if code == uint16(protocol.ReqGetRouteInfoByTopic) && cmd.Code == 0 {
			var route protocol.TopicRouteData
			if err := route.Decode(cmd.Body); err != nil {
				t.Fatalf("served route does not decode: %v\n%s", err, cmd.Body)
			}
		}
		if err := r.checkInvariants(); err != nil {
			t.Fatal(err)
		}
	})
}

// FuzzParseKVFile: any bytes either fail to parse or give a table whose every
// namespace has keys, and which writes back to a file that parses to the same table.
func FuzzParseKVFile(f *testing.F) {
	f.Add([]byte(`{"configTable":{"ORDER_TOPIC_CONFIG":{"T":"broker-a:4"}}}`))
	f.Add([]byte(`{"configTable":{"empty":{},"ns":{"k":null}}}`))
	f.Add([]byte(`{"configTable":null}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"configTable":{"ns":{"k":"`))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, b []byte) {
		kv, err := parseKVFile(b)
		if err != nil {
			return
		}
		for ns, m := range kv {
			if len(m) == 0 {
				t.Fatalf("namespace %q without keys", ns)
			}
		}
		out, err := json.Marshal(kvFile{ConfigTable: kv})
		if err != nil {
			t.Fatal(err)
		}
		again, err := parseKVFile(out)
		if err != nil || !reflect.DeepEqual(again, kv) {
			t.Fatalf("round trip: %v\n%v\n%v", err, kv, again)
		}
	})
}
