package stats

import "testing"

// TestPutCounter: a resolved PutCounter counts on the items Put counts on,
// and a topic removed then counted again starts from zero.
func TestPutCounter(t *testing.T) {
	s := newUTC()
	pc := s.PutCounter("T")
	pc.Put(3, 300)
	s.Put("T", 2, 200)
	if it, ok := s.TopicPut.Lookup(Key{Topic: "T"}); !ok || it.Totals() != (Totals{Value: 5, Times: 2}) {
		t.Errorf("TOPIC_PUT_NUMS %+v", it.Totals())
	}
	if it, ok := s.TopicPutSize.Lookup(Key{Topic: "T"}); !ok || it.Totals() != (Totals{Value: 500, Times: 2}) {
		t.Errorf("TOPIC_PUT_SIZE %+v", it.Totals())
	}
	if put, _ := s.BrokerTotals(); put != (Totals{Value: 5, Times: 2}) {
		t.Errorf("BROKER_PUT_NUMS %+v", put)
	}
	s.RemoveTopic("T")
	s.PutCounter("T").Put(1, 10)
	if it, ok := s.TopicPut.Lookup(Key{Topic: "T"}); !ok || it.Totals() != (Totals{Value: 1, Times: 1}) {
		t.Errorf("TOPIC_PUT_NUMS after RemoveTopic %+v", it.Totals())
	}
	if n := testing.AllocsPerRun(100, func() { pc.Put(1, 1) }); n != 0 {
		t.Errorf("PutCounter.Put allocates %v times", n)
	}
}

// BenchmarkPutCounter is BenchmarkPut's counting through counters resolved
// once.
func BenchmarkPutCounter(b *testing.B) {
	s := New(Options{})
	pcs := make([]*PutCounter, 1000)
	for i := range pcs {
		pcs[i] = s.PutCounter("topic-" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pcs[i%len(pcs)].Put(1, 1024)
	}
}
