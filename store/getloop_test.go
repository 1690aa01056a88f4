package store

import (
	"fmt"
	"testing"

	"github.com/apogeemq/apogee/commitlog"
	"github.com/apogeemq/apogee/message"
)

// TestGetAllocs: once a GetResult has grown, Get and GetLite (one read
// loop, getRead) allocate nothing: a plain read, a read bounded by bytes,
// a filtered one that scans past rejected entries, and a lite topic's.
func TestGetAllocs(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	for i := range 64 {
		tag := "A"
		if i%4 == 0 {
			tag = "B"
		}
		if _, err := s.Put(msg("G", 0, fmt.Sprint("m", i), message.PropTags, tag)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Put(liteMsg("P", "L", 0, fmt.Sprint("l", i))); err != nil {
			t.Fatal(err)
		}
	}
	waitVisible(t, s, "G", 0, 64)
	waitLite(t, s, "P", "L", 64)
	f := &TagCodeFilter{Codes: []int64{message.TagCode([]byte("B"))}}
	var res GetResult
	for _, c := range []struct {
		name  string
		get   func() error
		found int
	}{
		{"Get", func() error { return s.Get("G", 0, 0, 32, 0, nil, &res) }, 32},
		{"Get by bytes", func() error { return s.Get("G", 0, 3, 32, 1, nil, &res) }, 1},
		{"Get filtered", func() error { return s.Get("G", 0, 1, 8, 0, f, &res) }, 8},
		{"GetLite", func() error { return s.GetLite("P", "L", 0, 32, 0, &res) }, 32},
		{"GetLite by bytes", func() error { return s.GetLite("P", "L", 5, 32, 1, &res) }, 1},
	} {
		run := func() {
			if err := c.get(); err != nil || res.Status != Found || len(res.Messages) != c.found {
				t.Fatalf("%s: %v %v, %d messages, want %d", c.name, res.Status, err, len(res.Messages), c.found)
			}
			res.Release()
		}
		run() // grows res
		if n := testing.AllocsPerRun(100, run); n != 0 {
			t.Errorf("%s allocates %v times", c.name, n)
		}
	}
}

// BenchmarkGetLite32 reads 32-message batches of 1 KiB messages of one lite
// topic from the page cache as views, the lite topic's messages
// interleaved in the commit log with those of seven others: GetLite's
// counterpart of BenchmarkGet32.
func BenchmarkGetLite32(b *testing.B) {
	s, _, err := Open(benchOptions(b, commitlog.FlushAsync))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n, lites = 50_000, 8
	var ps [lites][]byte
	for l := range ps {
		ps[l] = props(message.PropertyLiteTopic, fmt.Sprint("L", l))
	}
	m := Message{Topic: "P", BornHost: born, Body: make([]byte, 1024)}
	for i := range n * lites {
		m.Properties = ps[i%lites]
		if _, err := s.Put(&m); err != nil {
			b.Fatal(err)
		}
	}
	waitLite(b, s, "P", "L0", n)
	benchRead(b, n, func(off int64, res *GetResult) error { return s.GetLite("P", "L0", off, 32, 1<<20, res) })
}

// benchRead runs read (of a queue of n messages, from queue offset off
// into res) b.N times, each from where the last ended, from 0 again at the
// end, and reports the messages read per second.
func benchRead(b *testing.B, n int64, read func(off int64, res *GetResult) error) {
	var res GetResult
	b.ReportAllocs()
	b.ResetTimer()
	var msgs int64
	off := int64(0)
	for range b.N {
		if err := read(off, &res); err != nil || res.Status != Found {
			b.Fatal(res.Status, err)
		}
		msgs += int64(len(res.Messages))
		off = res.NextOffset
		if off >= n {
			off = 0
		}
		res.Release()
	}
	b.StopTimer()
	b.ReportMetric(float64(msgs)/b.Elapsed().Seconds(), "msgs/s")
}
