package protocol

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestExtFieldsAgainstModel runs random Set, Delete, Reset and CopyFrom calls,
// and decodes of the result in both header encodings, against a model (a list
// of pairs, the last occurrence of a key winning), and checks every lookup of
// every key after each step.
func TestExtFieldsAgainstModel(t *testing.T) {
	keys := []string{"a", "b", "topic", "queueId", "bname", "msgId", "x1", "x2", "x3", "properties",
		"MSG_REGION", "TRACE_ON", "q", "queueOffset", "producerGroup", "", "k1", "k2", "k3", "k4"}
	type pair struct{ k, v string }
	rng := rand.New(rand.NewPCG(1, 2))
	var e ExtFields
	var model []pair
	get := func(k string) (string, bool) {
		for i := len(model) - 1; i >= 0; i-- {
			if model[i].k == k {
				return model[i].v, true
			}
		}
		return "", false
	}
	check := func(step int, what string, e *ExtFields) {
		t.Helper()
		for _, k := range keys {
			want, wok := get(k)
			got, ok := e.Get(k)
			if ok != wok || string(got) != want || e.Has(k) != wok {
				t.Fatalf("step %d (%s): Get(%q) = %q %v, want %q %v", step, what, k, got, ok, want, wok)
			}
		}
	}
	for step := 0; step < 20000; step++ {
		k := keys[rng.IntN(len(keys))]
		switch op := rng.IntN(20); {
		case op < 12:
			v := string(rune('a' + rng.IntN(26)))
			if rng.IntN(3) == 0 {
				v += "-longer-value"
			}
			e.SetString(k, v)
			last := -1
			for i, p := range model {
				if p.k == k {
					last = i
				}
			}
			if last >= 0 {
				model[last].v = v
			} else {
				model = append(model, pair{k, v})
			}
		case op < 15:
			e.Delete(k)
			model = slices.DeleteFunc(model, func(p pair) bool { return p.k == k })
		case op == 15:
			e.Reset()
			model = nil
		case op == 16:
			var c ExtFields
			c.SetString("stale", "1")
			c.CopyFrom(&e)
			e = c
		default:
			// A decoded copy (JSON or binary header) must answer the same.
			for _, ser := range []SerializeType{SerializeJSON, SerializeRocketMQ} {
				cmd := Command{SerializeType: ser}
				cmd.Ext.CopyFrom(&e)
				frame, err := AppendFrame(nil, &cmd)
				if err != nil {
					t.Fatalf("step %d: encode: %v", step, err)
				}
				var d Command
				if err := DecodeFrame(frame[4:], &d); err != nil {
					t.Fatalf("step %d: decode: %v", step, err)
				}
				check(step, "decoded", &d.Ext)
			}
		}
		check(step, "after the call", &e)
	}
}
