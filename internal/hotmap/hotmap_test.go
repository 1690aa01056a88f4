package hotmap

import (
	"fmt"
	"sync"
	"testing"
)

// Concurrent Loads, Updates and Deletes agree with a model: every key read
// after its last Update returns that Update's value.
func TestMapAgreesWithAModel(t *testing.T) {
	m := New[int]()
	const writers, keys = 4, 2000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				k := fmt.Sprint("k-", w, "-", i)
				v := i
				m.Store(k, &v)
				if got := m.Load(k); got == nil || *got != i {
					t.Errorf("Load(%s) right after Store = %v", k, got)
					return
				}
				if i%3 == 0 {
					v2 := -i
					m.Store(k, &v2) // replacing a value is seen at once
					if got := m.Load(k); got == nil || *got != -i {
						t.Errorf("Load(%s) after replace = %v", k, got)
						return
					}
				}
				if i%5 == 0 {
					m.Delete(k)
					if got := m.Load(k); got != nil {
						t.Errorf("Load(%s) after Delete = %v", k, *got)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	want := 0
	for i := range keys {
		if i%5 != 0 {
			want++
		}
	}
	if n := m.Len(); n != writers*want {
		t.Fatalf("Len %d, want %d", n, writers*want)
	}
	seen := 0
	m.Range(func(k string, v *int) bool { seen++; return true })
	if seen != writers*want {
		t.Fatalf("Range saw %d keys, want %d", seen, writers*want)
	}
}

func TestUpdateSeesTheCurrentValue(t *testing.T) {
	m := New[[]int]()
	for i := range 100 {
		m.Update("q", func(old *[]int) *[]int {
			var s []int
			if old != nil {
				s = append(s, *old...)
			}
			s = append(s, i)
			return &s
		})
	}
	if got := m.Load("q"); got == nil || len(*got) != 100 || (*got)[99] != 99 {
		t.Fatalf("value after 100 updates: %v", got)
	}
}

func BenchmarkLoadHot(b *testing.B) {
	m := New[int]()
	for i := range 20000 {
		v := i
		m.Store(fmt.Sprint("topic-", i), &v)
	}
	m.Range(func(string, *int) bool { return false }) // merge
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if m.Load("topic-12345") == nil {
			b.Fatal("missing")
		}
	}
}

// BenchmarkInsert creates b.N keys one by one: the cost per key must not grow
// with the map.
func BenchmarkInsert(b *testing.B) {
	m := New[int]()
	v := 1
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		m.Store(fmt.Sprint("topic-", i), &v)
	}
}
