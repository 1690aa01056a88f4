package stats

import (
	"strconv"
	"testing"
)

// BenchmarkPut is the send path's counting: three items (topic messages,
// topic bytes, the broker's total) of an existing key. It must not allocate.
func BenchmarkPut(b *testing.B) {
	s := New(Options{})
	topics := make([]string, 1000)
	for i := range topics {
		topics[i] = "topic-" + strconv.Itoa(i)
		s.Put(topics[i], 1, 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Put(topics[i%len(topics)], 1, 1024)
	}
}

// BenchmarkGet is the pull path's counting: four items keyed by topic and group.
func BenchmarkGet(b *testing.B) {
	s := New(Options{})
	topics := make([]string, 1000)
	for i := range topics {
		topics[i] = "topic-" + strconv.Itoa(i)
		s.Get(topics[i], "group-"+topics[i], 1, 1, 1)
	}
	groups := make([]string, len(topics))
	for i := range groups {
		groups[i] = "group-" + topics[i]
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		j := i % len(topics)
		s.Get(topics[j], groups[j], 32, 32<<10, 3)
	}
}

// BenchmarkPutParallel counts from every P at once on 8 topics (the
// contention of a busy broker: atomics on shared lines, no lock).
func BenchmarkPutParallel(b *testing.B) {
	s := New(Options{})
	topics := make([]string, 8)
	for i := range topics {
		topics[i] = "topic-" + strconv.Itoa(i)
		s.Put(topics[i], 1, 1)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			s.Put(topics[i%len(topics)], 1, 1024)
			i++
		}
	})
}

// BenchmarkSample is the sampler's second: every tier of 5,000 items (1,000
// topics × 2 sets, 1,000 topic-group pairs × 3 sets).
func BenchmarkSample(b *testing.B) {
	s := New(Options{})
	for i := 0; i < 1000; i++ {
		t := "topic-" + strconv.Itoa(i)
		s.Put(t, 1, 1)
		s.Get(t, "g", 1, 1, 1)
	}
	now := t0
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = now.Add(10 * 60e9) // every tier due
		s.Sample(now)
	}
}
