package reput

import (
	"net/netip"
	"testing"

	"github.com/apogeemq/apogee/message"
	"github.com/apogeemq/apogee/store"
)

// FuzzPropsEdit checks the properties rewriting against the message
// package's reader: AppendPropsExcept keeps exactly the pairs
// message.ForEachProperty sees, minus the dropped key, in order. (How a
// property's number is read is internal/javacompat's, fuzzed there.)
func FuzzPropsEdit(f *testing.F) {
	f.Add([]byte("UNIQ_KEY\x01AB\x02DELAY\x013\x02TAGS\x01a\x02"), "DELAY")
	f.Add([]byte("a\x01b\x01c\x02\x02x\x01\x02REAL_TOPIC\x01T"), "REAL_TOPIC")
	f.Add([]byte("\x01\x02\x01\x01\x02k\x01v"), "k")
	f.Add([]byte("TIMER_DELIVER_MS\x01-9223372036854775808\x02"), "TIMER_DELIVER_MS")
	f.Fuzz(func(t *testing.T, props []byte, drop string) {
		type pair struct{ k, v string }
		var want []pair
		message.ForEachProperty(props, func(k, v []byte) bool {
			if string(k) != drop {
				want = append(want, pair{string(k), string(v)})
			}
			return true
		})
		out := AppendPropsExcept(nil, props, drop)
		var got []pair
		message.ForEachProperty(out, func(k, v []byte) bool {
			got = append(got, pair{string(k), string(v)})
			return true
		})
		if len(got) != len(want) {
			t.Fatalf("%q minus %q: got %q, want %q", props, drop, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%q minus %q: pair %d is %q, want %q", props, drop, i, got[i], want[i])
			}
		}
	})
}

func TestPropInt(t *testing.T) {
	props := []byte("A\x0142\x02B\x01x\x02C\x01-7\x02")
	for _, c := range []struct {
		key              string
		v                int64
		present, numeric bool
	}{{"A", 42, true, true}, {"B", 0, true, false}, {"C", -7, true, true}, {"D", 0, false, false}} {
		v, present, ok := PropInt(props, c.key)
		if v != c.v || present != c.present || ok != c.numeric {
			t.Errorf("%s: %d %v %v, want %d %v %v", c.key, v, present, ok, c.v, c.present, c.numeric)
		}
	}
	if got := string(AppendPropInt([]byte("X\x01y\x02"), "N", -12)); got != "X\x01y\x02N\x01-12\x02" {
		t.Errorf("AppendPropInt: %q", got)
	}
}

// record encodes a record of topic with props.
func record(t *testing.T, topic string, props string) message.View {
	t.Helper()
	rec, err := message.AppendRecord(nil, &message.Record{
		Topic: topic, QueueID: 3, Flag: 5, SysFlag: message.FlagBornHostV6, BornTimestamp: 1000,
		BornHost: netip.MustParseAddrPort("10.0.0.1:5"), StoreTimestamp: 2000, ReconsumeTimes: 2,
		Body: []byte("body"), Properties: []byte(props),
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := message.Decode(rec, true)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMessageAndRealTarget(t *testing.T) {
	v := record(t, "SCHEDULE_TOPIC_XXXX", "REAL_TOPIC\x01T\x02REAL_QID\x017\x02")
	m := Message(v)
	if m.Topic != "SCHEDULE_TOPIC_XXXX" || m.QueueID != 3 || m.Flag != 5 || m.BornTimestamp != 1000 ||
		m.ReconsumeTimes != 2 || string(m.Body) != "body" || m.SysFlag&message.FlagBornHostV6 != 0 || m.Properties != nil {
		t.Errorf("Message: %+v", m)
	}
	if topic, q, ok := RealTarget(v); !ok || string(topic) != "T" || q != 7 {
		t.Errorf("RealTarget: %q %d %v", topic, q, ok)
	}
	for _, props := range []string{
		"REAL_QID\x017\x02",                             // no topic
		"REAL_TOPIC\x01\x02REAL_QID\x017\x02",           // empty topic
		"REAL_TOPIC\x01T\x02",                           // no queue
		"REAL_TOPIC\x01T\x02REAL_QID\x01x\x02",          // not a number
		"REAL_TOPIC\x01T\x02REAL_QID\x01-1\x02",         // negative
		"REAL_TOPIC\x01T\x02REAL_QID\x014294967296\x02", // beyond int32
	} {
		if _, _, ok := RealTarget(record(t, "X", props)); ok {
			t.Errorf("RealTarget accepted %q", props)
		}
	}
}

// countingRecords counts ReleaseAll calls.
type countingRecords struct{ released int }

func (c *countingRecords) Read(int64) ([]byte, error) { return nil, nil }
func (c *countingRecords) ReleaseAll()                { c.released++ }

func TestScratch(t *testing.T) {
	recs := &countingRecords{}
	sc := Scratch{Recs: recs}
	for i, p := range []string{"A\x011\x02", "B\x0122\x02"} {
		start := len(sc.Props)
		sc.Props = append(sc.Props, p...)
		sc.Add(store.Message{Topic: "T", QueueID: int32(i)}, start)
	}
	sc.Fix()
	if len(sc.Msgs) != 2 || string(sc.Msgs[0].Properties) != "A\x011\x02" || string(sc.Msgs[1].Properties) != "B\x0122\x02" {
		t.Fatalf("messages after Fix: %+v", sc.Msgs)
	}
	ents := sc.Entries(8)
	if len(ents) != 0 || cap(ents) != 8 {
		t.Fatalf("Entries(8): len %d cap %d", len(ents), cap(ents))
	}
	sc.Reset()
	if recs.released != 1 || len(sc.Msgs) != 0 || len(sc.Props) != 0 || len(sc.Res) != 0 {
		t.Fatalf("after Reset: released %d, %d messages, %d props bytes", recs.released, len(sc.Msgs), len(sc.Props))
	}
	if got := testing.AllocsPerRun(100, func() {
		start := len(sc.Props)
		sc.Props = AppendPropsExcept(sc.Props, []byte("A\x011\x02DELAY\x013\x02"), "DELAY")
		sc.Props = AppendPropInt(sc.Props, "N", 5)
		sc.Add(store.Message{Topic: "T"}, start)
		sc.Fix()
		sc.Reset()
	}); got != 0 {
		t.Errorf("a re-put's edits allocate %v times once the scratch has grown", got)
	}
}
