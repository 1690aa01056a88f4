package pop

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// stateFile is the JSON shape of the state file (the broker's
// config/popState.json).
type stateFile struct {
	Queues []stateQueue `json:"queues"`
}

type stateQueue struct {
	Group    string           `json:"group"`
	Topic    string           `json:"topic"`
	QueueID  int32            `json:"queueId"`
	Next     int64            `json:"next"`
	Inflight map[string]entry `json:"inflight,omitempty"` // by queue offset
}

// Load reads the state file through the host (which may fall back to its
// previous version) and replaces the manager's state with it. Queues and
// entries the file names out of bounds (no group or topic, a queue id out
// of 0..MaxQueueID-1, an offset not below the queue's next) are skipped.
// Call it before Start and before the first request.
func (m *Manager) Load() error {
	var f stateFile
	found, err := m.host.LoadState(func(data []byte) error {
		var g stateFile
		if err := json.Unmarshal(data, &g); err != nil {
			return err
		}
		f = g
		return nil
	})
	if err != nil {
		return fmt.Errorf("pop: load state: %w", err)
	}
	if !found {
		return nil
	}
	queues := make(map[key]*queueState, len(f.Queues))
	for _, sq := range f.Queues {
		if sq.Group == "" || sq.Topic == "" || sq.QueueID < 0 || sq.QueueID >= MaxQueueID {
			continue
		}
		q := &queueState{next: max(sq.Next, 0), inflight: make(map[int64]*entry, len(sq.Inflight))}
		for k, e := range sq.Inflight {
			off, err := strconv.ParseInt(k, 10, 64)
			if err != nil || off < 0 || off >= q.next {
				continue
			}
			q.inflight[off] = &e
		}
		queues[key{sq.Group, sq.Topic, sq.QueueID}] = q
	}
	m.mu.Lock()
	m.queues = queues
	m.mu.Unlock()
	return nil
}

// encode returns the state as JSON and the change count it covers.
func (m *Manager) encode() ([]byte, uint64, error) {
	m.mu.Lock()
	f := stateFile{Queues: make([]stateQueue, 0, len(m.queues))}
	for k, q := range m.queues {
		if q.next < 0 {
			continue
		}
		s := stateQueue{Group: k.group, Topic: k.topic, QueueID: k.queue, Next: q.next}
		if len(q.inflight) > 0 {
			s.Inflight = make(map[string]entry, len(q.inflight))
			for off, e := range q.inflight {
				s.Inflight[strconv.FormatInt(off, 10)] = *e
			}
		}
		f.Queues = append(f.Queues, s)
	}
	changes := m.changes
	m.mu.Unlock()
	slices.SortFunc(f.Queues, func(a, b stateQueue) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.QueueID, b.QueueID))
	})
	data, err := json.Marshal(&f)
	return data, changes, err
}

// Persist writes the state file through the host when the state changed
// since the last successful write (always with force).
func (m *Manager) Persist(force bool) error {
	m.persistMu.Lock()
	defer m.persistMu.Unlock()
	m.mu.Lock()
	unchanged := m.changes == m.persisted
	m.mu.Unlock()
	if unchanged && !force {
		return nil
	}
	data, changes, err := m.encode()
	if err != nil {
		return fmt.Errorf("pop: encode state: %w", err)
	}
	if err := m.host.WriteState(data); err != nil {
		return fmt.Errorf("pop: write state: %w", err)
	}
	m.mu.Lock()
	m.persisted = changes
	m.mu.Unlock()
	return nil
}

// Start starts the persister: a goroutine that writes the state file every
// FlushInterval when it changed. Calling it again, or after Stop, does
// nothing.
func (m *Manager) Start() {
	m.runMu.Lock()
	defer m.runMu.Unlock()
	if m.started || m.stopped {
		return
	}
	m.started = true
	go m.loop()
}

func (m *Manager) loop() {
	defer close(m.done)
	t := time.NewTicker(m.cfg.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			if err := m.Persist(false); err != nil {
				m.cfg.Logger.Error("pop: persist the state failed", "err", err)
			}
		}
	}
}

// Stop stops the persister (waiting for it) and writes the state a last
// time when it changed; it returns that write's error. Call it once no
// request runs any more; later calls only write.
func (m *Manager) Stop() error {
	m.runMu.Lock()
	started, stopped := m.started, m.stopped
	m.stopped = true
	m.runMu.Unlock()
	if started && !stopped {
		close(m.stop)
		<-m.done
	}
	return m.Persist(false)
}
