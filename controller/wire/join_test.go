package wire

import (
	"errors"
	"testing"

	"github.com/apogeemq/apogee/protocol"
)

func TestJoinRequestRoundTripAndRefusals(t *testing.T) {
	var cmd protocol.Command
	j := JoinRequest{ID: "c2", RaftAddress: "127.0.0.1:40100"}
	j.Encode(&cmd)
	if cmd.Code != ReqJoinGroup || CodeName(cmd.Code) != "APOGEE_CONTROLLER_JOIN_GROUP" {
		t.Fatalf("code %d (%s)", cmd.Code, CodeName(cmd.Code))
	}
	var j2 JoinRequest
	if err := j2.Decode(roundTrip(t, &cmd)); err != nil || j2 != j {
		t.Fatalf("join %+v %v", j2, err)
	}
	for _, bad := range []JoinRequest{{ID: "", RaftAddress: "127.0.0.1:1"}, {ID: "c2", RaftAddress: "127.0.0.1:0"},
		{ID: "c2", RaftAddress: "no-port"}} {
		var c protocol.Command
		bad.Encode(&c)
		if err := new(JoinRequest).Decode(roundTrip(t, &c)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%+v: %v, want ErrBadRequest", bad, err)
		}
	}
	var missing protocol.Command
	missing.InitRequest(ReqJoinGroup, 0)
	if err := new(JoinRequest).Decode(&missing); !errors.Is(err, ErrBadRequest) {
		t.Errorf("no fields: %v", err)
	}
}
