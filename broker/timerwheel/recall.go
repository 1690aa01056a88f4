package timerwheel

import (
	"time"
)

// Recall (RocketMQ 5's RecallMessage): a pending timer message is
// cancelled by its UNIQ_KEY. The wheel keeps the recalled keys with their
// delivery times; when an entry whose record carries a recalled key comes
// due (to be delivered or rolled), the record is dropped instead. The keys
// are part of the persisted state (StateFile's "recalled"), written before
// Recall returns, so a recall survives a restart and a crash; a key is
// forgotten once a checkpoint covers the entry it dropped, or a day after
// its delivery time when no entry carried it (the message had fired before
// the recall reached the wheel).

// recallGrace is how long after its delivery time a recalled key that
// dropped nothing is kept.
const recallGrace = 24 * time.Hour

// persisted is the state file's shape: the checkpoint and the recalled
// keys (absent when none, so that the file stays what older versions
// wrote and read).
type persisted struct {
	Checkpoint
	Recalled map[string]int64 `json:"recalled,omitempty"`
}

// Recall cancels the pending timer message whose UNIQ_KEY is key, due at
// deliverMs. It returns once the cancellation is persisted. Recalling a
// key twice is harmless; a key that matches no pending timer drops
// nothing.
func (w *Wheel) Recall(key string, deliverMs int64) error {
	w.mu.Lock()
	if w.recalled == nil {
		w.recalled = make(map[string]int64)
	}
	w.recalled[key] = deliverMs
	w.changes++
	w.mu.Unlock()
	return w.Persist(false)
}

// isRecalled reports whether a record's key was recalled, and notes that
// its entry is being dropped (forgotten by the next checkpoint).
func (w *Wheel) isRecalled(key []byte) bool {
	if len(key) == 0 {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.recalled[string(key)]; !ok {
		return false
	}
	w.dropped = append(w.dropped, string(key))
	return true
}

// pruneRecalledLocked forgets the keys whose entries the checkpoint just
// published covers, and the stale ones. w.mu is held.
func (w *Wheel) pruneRecalledLocked(firedBefore int64) {
	for _, k := range w.dropped {
		delete(w.recalled, k)
	}
	w.dropped = w.dropped[:0]
	for k, due := range w.recalled {
		if due+recallGrace.Milliseconds() < firedBefore {
			delete(w.recalled, k)
		}
	}
}
