package message

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestBatchGolden(t *testing.T) {
	b := AppendBatchEntry(nil, 7, []byte("ab"), []byte("K\x01v\x02"))
	want := unhexT(t, `
		0000001C 00000000 00000000 00000007
		00000002 6162
		0004 4B 01 76 02`)
	if !bytes.Equal(b, want) {
		t.Fatalf("got %X want %X", b, want)
	}
	if len(AppendBatchEntry(nil, 0, nil, nil)) != BatchEntryOverhead || BatchEntryOverhead != 22 {
		t.Fatal("overhead is not 22 bytes")
	}
}

func TestBatchRoundTrip(t *testing.T) {
	type ent struct {
		flag        int32
		body, props string
	}
	in := []ent{{1, "one", "TAGS\x01a\x02"}, {0, "", ""}, {-1, string(bytes.Repeat([]byte{9}, 5000)), "K\x01v\x02"}}
	var batch []byte
	for _, e := range in {
		batch = AppendBatchEntry(batch, e.flag, []byte(e.body), []byte(e.props))
	}
	var out []ent
	err := ForEachBatchEntry(batch, func(flag int32, body, props []byte) error {
		out = append(out, ent{flag, string(body), string(props)})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d entries", len(out))
	}
	for i := range in {
		if in[i] != out[i] {
			t.Errorf("entry %d: %v != %v", i, out[i], in[i])
		}
	}
	stop := errors.New("stop")
	n := 0
	if err := ForEachBatchEntry(batch, func(int32, []byte, []byte) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("fn error not returned: %v after %d", err, n)
	}
	if err := ForEachBatchEntry(nil, func(int32, []byte, []byte) error { return stop }); err != nil {
		t.Errorf("empty batch: %v", err)
	}
}

func TestBatchErrors(t *testing.T) {
	good := AppendBatchEntry(nil, 1, []byte("body"), []byte("K\x01v\x02"))
	mod := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	tests := map[string][]byte{
		"short":            good[:21],
		"truncated":        good[:len(good)-1],
		"trailing junk":    append(append([]byte(nil), good...), 0, 0, 0),
		"total too small":  mod(func(b []byte) { binary.BigEndian.PutUint32(b, 21) }),
		"total negative":   mod(func(b []byte) { binary.BigEndian.PutUint32(b, 0x80000000) }),
		"total too large":  mod(func(b []byte) { binary.BigEndian.PutUint32(b, uint32(len(good)+1)) }),
		"body len large":   mod(func(b []byte) { binary.BigEndian.PutUint32(b[16:], 5) }),
		"body len small":   mod(func(b []byte) { binary.BigEndian.PutUint32(b[16:], 3) }),
		"body len neg":     mod(func(b []byte) { binary.BigEndian.PutUint32(b[16:], 0xFFFFFFFF) }),
		"prop len large":   mod(func(b []byte) { binary.BigEndian.PutUint16(b[24:], 5) }),
		"prop len neg":     mod(func(b []byte) { binary.BigEndian.PutUint16(b[24:], 0xFFFF) }),
		"second truncated": append(append([]byte(nil), good...), good[:10]...),
	}
	for name, b := range tests {
		n := 0
		err := ForEachBatchEntry(b, func(int32, []byte, []byte) error { n++; return nil })
		if !errors.Is(err, ErrBadBatch) {
			t.Errorf("%s: err = %v", name, err)
		}
	}
}

func TestAppendBatchEntryPanicsOnOversizeProps(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	AppendBatchEntry(nil, 0, nil, make([]byte, MaxPropertiesSize+1))
}
