package core

import (
	"testing"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

func TestGroupLockedExpires(t *testing.T) {
	l := newLockManager(time.Minute)
	t0 := time.Unix(1000, 0)
	if l.groupLocked("g", t0) {
		t.Fatal("a group without locks is locked")
	}
	l.tryLock("g", "A", []protocol.MessageQueue{{Topic: "T", QueueID: 1}}, t0)
	if !l.groupLocked("g", t0.Add(time.Minute)) || l.groupLocked("other", t0) {
		t.Fatal("groupLocked does not see a live lock, or sees another group's")
	}
	if l.groupLocked("g", t0.Add(time.Minute+time.Millisecond)) {
		t.Fatal("an expired lock still counts")
	}
}

func TestLockExpiry(t *testing.T) {
	l := newLockManager(60 * time.Second)
	mq := protocol.MessageQueue{Topic: "T", BrokerName: "b", QueueID: 3}
	t0 := time.Unix(1000, 0)
	if got := l.tryLock("g", "A", []protocol.MessageQueue{mq, mq}, t0); len(got) != 1 {
		t.Fatalf("A: %v", got)
	}
	if got := l.tryLock("g", "B", []protocol.MessageQueue{mq}, t0.Add(60*time.Second)); len(got) != 0 {
		t.Fatalf("B took a lock at exactly its expiry: %v", got)
	}
	if got := l.tryLock("g", "A", []protocol.MessageQueue{mq}, t0.Add(50*time.Second)); len(got) != 1 {
		t.Fatalf("A cannot renew: %v", got)
	}
	if got := l.tryLock("g", "B", []protocol.MessageQueue{mq}, t0.Add(100*time.Second)); len(got) != 0 {
		t.Fatalf("B took a renewed lock: %v", got)
	}
	if got := l.tryLock("g", "B", []protocol.MessageQueue{mq}, t0.Add(111*time.Second)); len(got) != 1 {
		t.Fatalf("B cannot take an expired lock: %v", got)
	}
	l.sweep(t0.Add(200 * time.Second))
	if len(l.groups) != 0 {
		t.Fatalf("sweep left %v", l.groups)
	}
}
