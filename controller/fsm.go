package controller

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/apogeemq/apogee/controller/wire"
)

// fsm is the Raft state machine: the replicated state, changed only by
// Apply (log order) and Restore (a snapshot), read by the node under mu.
type fsm struct {
	mu sync.RWMutex
	st *state
}

func newFSM() *fsm { return &fsm{st: newState()} }

// Apply decodes and applies one command; the *result it returns is what
// the proposer's ApplyFuture.Response gives back.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var c command
	if err := json.Unmarshal(l.Data, &c); err != nil {
		// Every node fails the same way on the same bytes: the state stays
		// the same everywhere.
		return fail(wire.RespInvalidRequest, "undecodable command at index %d: %v", l.Index, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.apply(&c)
}

// Snapshot captures the state now (encoded at once: the state is small,
// and Apply may go on while the snapshot is written).
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	b, err := f.st.marshal()
	f.mu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("controller: snapshot: %w", err)
	}
	return snapshot(b), nil
}

// Restore replaces the state with a snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("controller: read snapshot: %w", err)
	}
	st, err := unmarshalState(b)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.st = st
	f.mu.Unlock()
	return nil
}

// group returns a copy of the named group, or nil.
func (f *fsm) group(name string) *Group {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if g := f.st.Groups[name]; g != nil {
		return g.clone()
	}
	return nil
}

// groups returns copies of every group, by name.
func (f *fsm) groups() []*Group {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make([]*Group, 0, len(f.st.Groups))
	for _, name := range f.st.names() {
		out = append(out, f.st.Groups[name].clone())
	}
	return out
}

// nodeAddr is the remoting address controller id announced.
func (f *fsm) nodeAddr(id string) string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.st.Nodes[id]
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return fmt.Errorf("controller: write snapshot: %w", err)
	}
	return sink.Close()
}

func (s snapshot) Release() {}
