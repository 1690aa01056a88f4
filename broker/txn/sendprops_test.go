package txn

import (
	"testing"

	"github.com/apogeemq/apogee/message"
)

// parsed is a producer's properties as the send path hands them to
// HalfProps: parsed once.
func parsed(tb testing.TB, props []byte) *message.SendProps {
	tb.Helper()
	sp := new(message.SendProps)
	if err := sp.Parse(props); err != nil {
		tb.Fatal(err)
	}
	return sp
}
