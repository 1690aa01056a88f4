package grpcfe

import (
	"fmt"
	"testing"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/rmqpb"
)

// TestEveryReasonHasAStatus checks that the generated table gives every
// reason of the core a status code, and that errStatus uses it.
func TestEveryReasonHasAStatus(t *testing.T) {
	for _, r := range core.Reasons() {
		if int(r) >= len(reasonCodes) || reasonCodes[r] == rmqpb.Code_CODE_UNSPECIFIED {
			t.Errorf("reason %v has no status code: run go generate ./broker/core", r)
			continue
		}
		err := fmt.Errorf("wrapped: %w", &core.Error{Reason: r, Code: r.Code(), Remark: "remark"})
		if st := errStatus(err); st.Code != reasonCodes[r] || st.Message != "remark" {
			t.Errorf("errStatus(%v) = %v %q, want %v %q", r, st.Code, st.Message, reasonCodes[r], "remark")
		}
	}
	if got := codeOf(core.Reason(60000)); got != rmqpb.Code_INTERNAL_SERVER_ERROR {
		t.Errorf("codeOf(out of table) = %v", got)
	}
	if st := errStatus(nil); st.Code != rmqpb.Code_OK {
		t.Errorf("errStatus(nil) = %v", st.Code)
	}
}
