package broker

import (
	"testing"

	"github.com/apogeemq/apogee/internal/benchcpu"
)

// BenchmarkSendPath is BenchmarkSendHandler (the handler and the store, no
// network) over the shapes of send the broker routes differently, with the
// process's CPU time per send (cpu-ns/op: the broker's goroutines included,
// the time other processes ran on the shared cores excluded) beside the wall
// time. The bodies are 128 bytes, so that the store's copy into fresh
// commit-log pages (the larger part of a 1 KiB send, and the noisiest on a
// shared VM) leaves the send path's own work visible; go-1KiB is the
// ordinary size:
//
//	go test -run '^$' -bench SendPath -benchtime 200000x ./broker/
func BenchmarkSendPath(b *testing.B) {
	const uniq = "C0A80001000000000000000000000001"
	goProps := props("UNIQ_KEY", uniq, "TAGS", "TagA", "KEYS", "k")
	for _, c := range []struct {
		name, props string
		body        int
	}{
		{"go", goProps, 128},
		{"go-1KiB", goProps, 1024},
		{"java", props("KEYS", "order-1", "WAIT", "true", "TAGS", "TagA", "UNIQ_KEY", uniq), 128},
		{"delay", props("UNIQ_KEY", uniq, "DELAY", "3", "TAGS", "TagA"), 128},
		{"timer", props("UNIQ_KEY", uniq, "TIMER_DELAY_MS", "3600000", "TAGS", "TagA"), 128},
		{"half", props("UNIQ_KEY", uniq, "TRAN_MSG", "true", "PGROUP", "pg", "TAGS", "TagA"), 128},
	} {
		b.Run(c.name, func(b *testing.B) {
			br := benchBroker(b, b.TempDir())
			req := sendRequest("BenchSendPath", 0, make([]byte, c.body), c.props)
			d := &handlerDriver{b: br}
			if r := d.serve(req); r.Cmd.Code != 0 { // auto-create the topic
				b.Fatal(r.Cmd.Code, r.Cmd.Remark)
			}
			b.ReportAllocs()
			b.SetBytes(int64(c.body))
			b.ResetTimer()
			done := benchcpu.Report(b)
			for range b.N {
				if r := d.serve(req); r.Cmd.Code != 0 {
					b.Fatal(r.Cmd.Code)
				}
			}
			done()
		})
	}
}
