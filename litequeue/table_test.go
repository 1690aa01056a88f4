package litequeue

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestTableModel inserts and removes at random against a map, with many
// seeds (the hash is seeded per table), checking every name after each step.
func TestTableModel(t *testing.T) {
	for seed := range 50 {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		var tab table
		tab.init()
		var slots []slot
		var free []uint32
		model := map[string]uint32{}
		for step := 0; step < 3000; step++ {
			name := fmt.Sprintf("n%d", rng.IntN(800))
			id, ok := tab.find(slots, 1, []byte(name))
			mid, mok := model[name]
			if ok != mok || ok && id != mid {
				t.Fatalf("seed %d step %d: find(%s) = %d %v, model %d %v", seed, step, name, id, ok, mid, mok)
			}
			if ok {
				tab.remove(slots, id)
				slots[id].parent = freeParent
				free = append(free, id)
				delete(model, name)
				continue
			}
			if n := len(free); n > 0 {
				id, free = free[n-1], free[:n-1]
			} else {
				id = uint32(len(slots))
				slots = append(slots, slot{})
			}
			slots[id] = slot{nameOff: tab.addName([]byte(name)), nameLen: uint16(len(name)), parent: 1}
			tab.insert(slots, id)
			model[name] = id
		}
		for name, id := range model {
			if got, ok := tab.find(slots, 1, []byte(name)); !ok || got != id {
				t.Fatalf("seed %d: %s lost", seed, name)
			}
		}
	}
}
