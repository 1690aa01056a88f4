package store

import (
	"fmt"
	"sync"
	"testing"
)

// The counter table hands out one counter per (topic, queue), whatever the
// interleaving of lookups, creations and merges.
func TestCounterTableOneCounterPerQueue(t *testing.T) {
	var tab counterTable
	tab.init()
	const topics, queues = 3000, 4
	var wg sync.WaitGroup
	got := make([][]*queueCounter, 4)
	for g := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < topics*queues; i++ {
				k := (i*7 + g*13) % (topics * queues)
				got[g] = append(got[g], tab.get(fmt.Sprint("t-", k/queues), int32(k%queues)))
			}
		}()
	}
	wg.Wait()
	seen := map[*queueCounter]string{}
	for g := range got {
		for i, c := range got[g] {
			k := (i*7 + g*13) % (topics * queues)
			name := fmt.Sprintf("t-%d/%d", k/queues, k%queues)
			if prev, ok := seen[c]; ok && prev != name {
				t.Fatalf("one counter for %s and %s", prev, name)
			}
			seen[c] = name
		}
	}
	if len(seen) != topics*queues {
		t.Fatalf("%d counters for %d queues", len(seen), topics*queues)
	}
	for name, c := range map[string]*queueCounter{"t-5/2": tab.get("t-5", 2)} {
		if seen[c] != name {
			t.Fatalf("lookup after the merges gave another counter")
		}
	}
	tab.remove("t-5")
	if c := tab.get("t-5", 2); seen[c] != "" {
		t.Fatal("a removed topic kept its counter")
	}
}

func BenchmarkCounterLookup(b *testing.B) {
	var tab counterTable
	tab.init()
	for i := 0; i < 20000; i++ {
		tab.get(fmt.Sprint("topic-", i), int32(i%8))
	}
	tab.m.Range(func(string, *[]*queueCounter) bool { return false }) // merge
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tab.get("topic-12345", 1)
	}
}
