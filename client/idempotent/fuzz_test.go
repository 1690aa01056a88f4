package idempotent

import (
	"bytes"
	"testing"
)

// FuzzDecodeRecord feeds arbitrary record bodies (a broker returns whatever is
// stored under a key) to the decoder: it must not panic, and what it accepts
// must encode back to a body that decodes to the same record.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendRecord(nil, &record{op: opBegin, dur: 30000, owner: []byte("host/1/ab"), key: []byte("K1")}))
	f.Add(appendRecord(nil, &record{op: opRelease, owner: []byte("o"), key: []byte("a b")}))
	f.Add([]byte{1, 3, 0, 0, 0, 0, 0, 0, 0, 1, 0x80, 0x00, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeRecord(b)
		if err != nil {
			return
		}
		again, err := decodeRecord(appendRecord(nil, &r))
		if err != nil || again.op != r.op || again.dur != r.dur || !bytes.Equal(again.owner, r.owner) || !bytes.Equal(again.key, r.key) {
			t.Fatalf("round trip of %x: %+v → %+v, %v", b, r, again, err)
		}
	})
}
