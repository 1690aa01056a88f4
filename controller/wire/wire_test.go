package wire

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/apogeemq/apogee/protocol"
)

// roundTrip encodes cmd as a frame and decodes it again, as a peer would.
func roundTrip(t *testing.T, cmd *protocol.Command) *protocol.Command {
	t.Helper()
	frame, err := protocol.AppendFrame(nil, cmd)
	if err != nil {
		t.Fatal(err)
	}
	var out protocol.Command
	if err := protocol.DecodeFrame(frame[4:], &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func TestHeadersRoundTrip(t *testing.T) {
	var cmd protocol.Command
	h := HeartbeatRequest{ClusterName: "c", BrokerName: "b", BrokerAddr: "1.2.3.4:10911", BrokerID: 2, Epoch: 3,
		MaxOffset: 1 << 40, ConfirmOffset: -1, HeartbeatTimeoutMillis: 5000, ElectionPriority: 7}
	h.Encode(&cmd)
	var h2 HeartbeatRequest
	if err := h2.Decode(roundTrip(t, &cmd)); err != nil || h2 != h {
		t.Fatalf("heartbeat %+v %v", h2, err)
	}
	a := AlterSyncStateSetRequest{BrokerName: "b", MasterID: 1, MasterEpoch: 4, Set: SyncStateSet{Set: []int64{3, 1, 2}, Epoch: 9}}
	a.Encode(&cmd)
	var a2 AlterSyncStateSetRequest
	if err := a2.Decode(roundTrip(t, &cmd)); err != nil || a2.MasterID != 1 || a2.MasterEpoch != 4 || !slices.Equal(a2.Set.Set, []int64{1, 2, 3}) || a2.Set.Epoch != 9 {
		t.Fatalf("alter %+v %v", a2, err)
	}
	e := ElectMasterRequest{ClusterName: "c", BrokerName: "b", BrokerID: 0}
	e.Encode(&cmd)
	if v, _ := cmd.Ext.GetString("brokerId"); v != "-1" {
		t.Fatalf("the controller's own trigger is brokerId %q, want -1", v)
	}
	var e2 ElectMasterRequest
	if err := e2.Decode(roundTrip(t, &cmd)); err != nil || e2 != e {
		t.Fatalf("elect %+v %v", e2, err)
	}
	r := BrokerIDRequest{ClusterName: "c", BrokerName: "b", AppliedID: 3, CheckCode: "1.2.3.4:10911;123"}
	r.EncodeApply(&cmd)
	var r2 BrokerIDRequest
	if err := r2.Decode(roundTrip(t, &cmd)); err != nil || r2 != r {
		t.Fatalf("apply id %+v %v", r2, err)
	}
	r.AppliedID = 0
	r.EncodeApply(&cmd)
	if err := r2.Decode(roundTrip(t, &cmd)); err == nil {
		t.Fatal("broker id 0 accepted")
	}
	c := CleanBrokerDataRequest{ClusterName: "c", BrokerName: "b", IDs: []int64{2, 3}, CleanLiving: true}
	c.Encode(&cmd)
	var c2 CleanBrokerDataRequest
	if err := c2.Decode(roundTrip(t, &cmd)); err != nil || !slices.Equal(c2.IDs, c.IDs) || !c2.CleanLiving {
		t.Fatalf("clean %+v %v", c2, err)
	}
	n := RoleChange{MasterInfo: MasterInfo{MasterID: 2, MasterAddress: "a:1", MasterEpoch: 5, SyncStateSetEpoch: 6}, SyncStateSet: []int64{2}}
	n.Encode(&cmd)
	var n2 RoleChange
	if err := n2.Decode(roundTrip(t, &cmd)); err != nil || n2.MasterInfo != n.MasterInfo || !slices.Equal(n2.SyncStateSet, []int64{2}) {
		t.Fatalf("role change %+v %v", n2, err)
	}
	var resp protocol.Command
	NotLeader(&resp, "n2", "127.0.0.1:9878")
	if id, addr := LeaderHint(roundTrip(t, &resp)); id != "n2" || addr != "127.0.0.1:9878" || resp.Code != RespNotLeader {
		t.Fatalf("not-leader hint %q %q", id, addr)
	}
	var hb protocol.Command
	hb.InitRequest(ReqBrokerHeartbeat, 0)
	hb.Ext.SetString("clusterName", "c")
	if err := h2.Decode(&hb); err == nil {
		t.Fatal("a heartbeat without name, address and id accepted")
	}
}

// Bodies as the Java controller writes them (fastjson).
func TestJavaBodies(t *testing.T) {
	s, err := DecodeSyncStateSet([]byte(`{"syncStateSet":[2,1],"syncStateSetEpoch":3}`))
	if err != nil || !slices.Equal(s.Set, []int64{1, 2}) || s.Epoch != 3 {
		t.Fatalf("SyncStateSet %+v %v", s, err)
	}
	var body ElectMasterBody
	if err := json.Unmarshal([]byte(`{"brokerMemberGroup":{"brokerAddrs":{"1":"127.0.0.1:10911"},"brokerName":"b","cluster":"c"},"syncStateSet":[1]}`), &body); err != nil {
		t.Fatal(err)
	}
	if body.BrokerMemberGroup.BrokerAddrs[1] != "127.0.0.1:10911" || !slices.Equal(body.SyncStateSet, []int64{1}) {
		t.Fatalf("ElectMasterResponseBody %+v", body)
	}
	if _, err := DecodeSyncStateSet(nil); err == nil {
		t.Fatal("an empty body accepted")
	}
}
