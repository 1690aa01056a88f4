package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apogeemq/apogee/message"
)

// hintTopics are the topics of putHintMix; "SCHED" has a tag-code override.
var hintTopics = []string{"A", "B", "SCHED"}

// hintKeys are the index keys putHintMix uses, for the snapshots.
var hintKeys = []string{"u0", "u1", "u2", "k0", "k1", "k2", "x", "y", "z"}

// hintOptions is testOptions with a tag-code override that reads the store
// timestamp, as the broker's schedule topic does.
func hintOptions(dir string) Options {
	o := testOptions(dir)
	o.TagCode = func(v message.View) (int64, bool) {
		if string(v.Topic()) == "SCHED" {
			return v.StoreTimestamp() + 1000*int64(v.QueueID()), true
		}
		return 0, false
	}
	return o
}

// putHintMix puts n rounds of every kind of record dispatch tells apart:
// with and without tags and keys, more keys than a hint holds, prepared and
// rolled-back transaction records, singly and in batches. It returns how many
// records have more than maxHintKeys index keys.
func putHintMix(t *testing.T, s *Store, n int) (manyKeys int) {
	t.Helper()
	var batch []Message
	var res []PutResult
	for i := range n {
		topic := hintTopics[i%len(hintTopics)]
		q := int32(i % 4)
		uniq := fmt.Sprintf("u%d", i%3)
		body := []byte(strings.Repeat("b", 10+i%300))
		ms := []Message{
			{Topic: topic, QueueID: q, Body: body},
			{Topic: topic, QueueID: q, Body: body, Properties: props(message.PropTags, fmt.Sprint("t", i%5))},
			{Topic: topic, QueueID: q, Body: body, Properties: props(message.PropUniqKey, uniq, message.PropKeys, fmt.Sprint("k", i%3))},
			{Topic: topic, QueueID: q, Body: body, Properties: props(message.PropUniqKey, uniq, message.PropKeys, "x y  z", message.PropTags, "many")},
			{Topic: topic, QueueID: q, Body: body, Properties: props(message.PropKeys, "  ")},
			{Topic: topic, QueueID: q, Body: body, SysFlag: message.SetTxType(0, message.TxPreparedType), Properties: props(message.PropKeys, "x")},
			{Topic: topic, QueueID: q, Body: body, SysFlag: message.SetTxType(0, message.TxRollbackType), Properties: props(message.PropKeys, "y")},
			{Topic: topic, QueueID: q, Body: body, SysFlag: message.SetTxType(0, message.TxCommitType), Properties: props(message.PropKeys, "z")},
		}
		manyKeys++ // the "x y  z" one
		for j := range ms {
			ms[j].BornHost = born
			if i%2 == 0 {
				if _, err := s.Put(&ms[j]); err != nil {
					t.Fatal(err)
				}
			} else {
				batch = append(batch, ms[j])
			}
		}
		if len(batch) >= 40 {
			var err error
			if res, err = s.PutBatch(batch, res[:0]); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		if _, err := s.PutBatch(batch, res[:0]); err != nil {
			t.Fatal(err)
		}
	}
	return manyKeys
}

// fullSnapshot captures every consume-queue entry (tag codes included) and
// every key's query results.
func fullSnapshot(t *testing.T, s *Store) string {
	t.Helper()
	var b strings.Builder
	for _, topic := range hintTopics {
		for q := int32(0); q < 4; q++ {
			es, err := s.ReadEntries(topic, q, s.MinOffset(topic, q), make([]QueueEntry, 0, 10000))
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s/%d [%d,%d): %v\n", topic, q, s.MinOffset(topic, q), s.MaxOffset(topic, q), es)
		}
		for _, k := range hintKeys {
			views, err := s.QueryByKey(topic, k, 0, time.Now().UnixMilli()+1000, 10000, nil)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s key %s:", topic, k)
			for _, v := range views {
				m, _ := message.Decode(v.Bytes(), true)
				fmt.Fprintf(&b, " %d", m.PhysicalOffset())
				v.Release()
			}
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func waitDispatchedAll(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.DispatchedOffset() != s.Log().WrittenOffset() {
		if time.Now().After(deadline) {
			t.Fatalf("dispatch stuck at %d of %d", s.DispatchedOffset(), s.Log().WrittenOffset())
		}
		time.Sleep(time.Millisecond)
	}
}

// Dispatching from Put's hints gives the same consume queues (tag codes
// included) and index as decoding every record from the log, with a ring
// that holds every hint and with one so small that most hints do not fit.
func TestHintsDispatchAsDecodingDoes(t *testing.T) {
	for _, slots := range []int{hintSlots, 8} {
		t.Run(fmt.Sprint("slots=", slots), func(t *testing.T) {
			defer func(old int) { hintSlots = old }(hintSlots)
			hintSlots = slots
			dir := t.TempDir()
			s := openStore(t, hintOptions(dir))
			manyKeys := putHintMix(t, s, 300)
			waitDispatchedAll(t, s)
			decoded := s.Stats().DispatchDecoded
			if slots > 1000 && decoded != int64(manyKeys) {
				t.Errorf("%d records decoded, want the %d with more keys than a hint holds", decoded, manyKeys)
			}
			if slots == 8 && decoded < 1000 {
				t.Errorf("%d records decoded with an 8-slot ring, want most of them", decoded)
			}
			if st := s.Stats(); st.DispatchErrors != 0 {
				t.Fatalf("%d dispatch errors", st.DispatchErrors)
			}
			hinted := fullSnapshot(t, s)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			for _, sub := range []string{"consumequeue", "index"} {
				if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
					t.Fatal(err)
				}
			}
			s = openStore(t, hintOptions(dir))
			defer s.Close()
			if got := s.Stats().DispatchDecoded; got != 300*8 {
				t.Fatalf("rebuild decoded %d records, want %d", got, 300*8)
			}
			if rebuilt := fullSnapshot(t, s); rebuilt != hinted {
				t.Fatalf("dispatched from hints:\n%s\nrebuilt from the log:\n%s", hinted, rebuilt)
			}
			// Puts after the rebuild are dispatched from hints again.
			putHintMix(t, s, 30)
			waitDispatchedAll(t, s)
			if got, want := s.Stats().DispatchDecoded, int64(300*8+30); slots > 1000 && got != want {
				t.Fatalf("%d records decoded after the rebuild, want %d", got, want)
			}
		})
	}
}

// A topic deleted and created again gets fresh queues: the dispatcher does not
// keep appending to the deleted topic's queue it had cached.
func TestHintsAfterDeleteTopic(t *testing.T) {
	s := openStore(t, testOptions(t.TempDir()))
	defer s.Close()
	for i := range 5 {
		if _, err := s.Put(msg("D", 1, fmt.Sprint("old", i))); err != nil {
			t.Fatal(err)
		}
	}
	waitVisible(t, s, "D", 1, 5)
	if err := s.DeleteTopic("D"); err != nil {
		t.Fatal(err)
	}
	r, err := s.Put(msg("D", 1, "new"))
	if err != nil || r.QueueOffset != 0 {
		t.Fatalf("put after delete: queue offset %d, %v", r.QueueOffset, err)
	}
	waitVisible(t, s, "D", 1, 1)
	var res GetResult
	defer res.Release()
	if err := s.Get("D", 1, 0, 32, 1<<20, nil, &res); err != nil || res.Status != Found {
		t.Fatalf("get: %v %v", res.Status, err)
	}
	if got := bodies(t, &res); len(got) != 1 || got[0] != "new" {
		t.Fatalf("after delete and put: %q", got)
	}
	if st := s.Stats(); st.DispatchErrors != 0 || st.DispatchDecoded != 0 {
		t.Fatalf("dispatch errors %d, decoded %d", st.DispatchErrors, st.DispatchDecoded)
	}
}
