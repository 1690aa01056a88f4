package txn

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/store"
)

// System topics and names (RocketMQ's TopicValidator and file names).
const (
	// HalfTopic holds the half messages, in queue 0. It is dispatched (half
	// messages get a queue offset, the transaction state table offset of
	// the protocol), but no consumer subscribes to it.
	HalfTopic = "RMQ_SYS_TRANS_HALF_TOPIC"
	// OpHalfTopic holds the op records, in queue 0: tag "d", body the
	// resolved half messages' queue offsets (decimal, comma-separated).
	OpHalfTopic = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
	// CheckMaxTopic receives the half messages checked Config.CheckMax
	// times without an answer.
	CheckMaxTopic = "TRANS_CHECK_MAX_TIME_TOPIC"
	// CheckpointFileName is the checker's progress file (the Host decides
	// where it lives: the broker keeps it in DataDir/config).
	CheckpointFileName = "transactionCheckpoint.json"

	opTagRemoved = "d" // the tag of op records
)

// Defaults of Config (RocketMQ's transactionTimeOut, transactionCheckInterval
// and transactionCheckMax; RocketMQ's interval is a fixed tick).
const (
	DefaultTimeout       = 6 * time.Second
	DefaultCheckInterval = 30 * time.Second
	DefaultCheckMax      = 15
)

// retryAfter is how long the checker waits after a failure (reading its
// queues, or moving a half message to CheckMaxTopic).
const retryAfter = time.Second

// Errors of End. The broker answers each with SYSTEM_ERROR and the remark
// RocketMQ's EndTransactionProcessor gives.
var (
	// ErrHalfNotFound: the commit-log offset holds no readable half message.
	ErrHalfNotFound = errors.New("txn: no half message at the commit-log offset")
	// ErrWrongGroup: the half message's PGROUP is not the request's group.
	ErrWrongGroup = errors.New("txn: the half message belongs to another producer group")
	// ErrWrongTableOffset: the half message's queue offset is not the
	// request's transaction state table offset.
	ErrWrongTableOffset = errors.New("txn: the half message's queue offset is not the request's")
	// ErrWrongCommitLogOffset: the record found does not sit at the
	// request's commit-log offset.
	ErrWrongCommitLogOffset = errors.New("txn: the half message's commit-log offset is not the request's")
	// ErrNoRealTopic: a commit found no valid REAL_TOPIC / REAL_QID in the
	// half message, so there is nowhere to store the committed message.
	ErrNoRealTopic = errors.New("txn: the half message has no valid REAL_TOPIC/REAL_QID")
)

// ErrNoProducer is what Host.SendCheck returns when the producer group has
// no live connection: the check is not counted, and it is sent as soon as
// ProducerJoined reports a producer of the group.
var ErrNoProducer = errors.New("txn: no live producer connection of the group")

// Config configures a Manager. Zero values mean the defaults given.
type Config struct {
	// Timeout: a half message younger than this is not checked back; its
	// CHECK_IMMUNITY_TIME_IN_SECONDS property overrides it. Default 6 s.
	Timeout time.Duration
	// CheckInterval is the time between two checks of one half message.
	// Default 30 s.
	CheckInterval time.Duration
	// CheckMax is how many checks a half message gets before it is moved
	// to CheckMaxTopic. Default 15.
	CheckMax int
	// BornHost is the born host of the op records (the broker's address).
	BornHost netip.AddrPort
	// Logger receives the checker's log lines. Default slog.Default().
	Logger *slog.Logger
}

// Check is one CHECK_TRANSACTION_STATE to send to a producer: the header
// fields (the Host adds the broker's name) and the body.
type Check struct {
	TranStateTableOffset int64  // the half message's queue offset
	CommitLogOffset      int64  // the half message's commit-log offset
	MsgID                string // its UNIQ_KEY
	TransactionID        string // __transactionId__, else its UNIQ_KEY
	OffsetMsgID          string // the offset message id of the half message
	Topic                string // the real topic
	// Record is the half message's record with its real topic and queue
	// restored (PGROUP and UNIQ_KEY kept) and TRANSACTION_CHECK_TIMES set,
	// as the Go client needs it. It is the Host's to keep (a connection may
	// write it after SendCheck returned).
	Record []byte
}

// Host is what the transaction manager needs from the broker. Its methods
// are called from the checker's goroutine and from End's callers
// concurrently, never with the manager's mu held (WriteState is called with
// persistMu held: it must not call back into the manager).
type Host interface {
	// ReadEntries, MinOffset, MaxOffset and ReadMessage read the store
	// (store.Store's methods of the same names): the half and op queues'
	// entries, and the records at commit-log offsets.
	ReadEntries(topic string, queueID int32, offset int64, dst []store.QueueEntry) ([]store.QueueEntry, error)
	MinOffset(topic string, queueID int32) int64
	MaxOffset(topic string, queueID int32) int64
	ReadMessage(commitLogOffset int64) (store.View, error)
	// Put stores msgs in one commit-log append (the broker's inner put) and
	// returns without waiting for them to be durable. It may change the
	// messages' NoWait field.
	Put(msgs []store.Message, res []store.PutResult) ([]store.PutResult, error)
	// WaitDurable returns once everything below end is durable
	// (store.Store.WaitDurable).
	WaitDurable(end int64) error
	// TopicName returns the topic table's name for name (without
	// allocating when the topic exists), or string(name).
	TopicName(name []byte) string
	// EnsureTopic returns the name of the topic, created with queues queues
	// when it does not exist.
	EnsureTopic(name string, queues int32) (string, error)
	// RouteDelay applies, to a committed message about to be stored, the
	// delay level or timer its properties props[start:] ask for, as the
	// broker's send path does: it may append to props (and returns props)
	// and change m's topic and queue. Otherwise it returns props as they are.
	RouteDelay(m *store.Message, props []byte, start int) []byte
	// SendCheck sends c to one live connection of the producer group
	// (CHECK_TRANSACTION_STATE, oneway). It returns ErrNoProducer when the
	// group has none, or the error of the send.
	SendCheck(group string, c *Check) error
	// LoadState reads the state file name and passes its contents to parse;
	// found is false when there is none. parse may be called again with an
	// older version when it fails, and must not keep its argument.
	LoadState(name string, parse func([]byte) error) (found bool, err error)
	// WriteState replaces the state file name with data, durably.
	WriteState(name string, data []byte) error
}

// Stats are the manager's counters.
type Stats struct {
	HalfMessages int64 // half messages routed to HalfTopic (HalfProps)
	Commits      int64 // transactions committed (End)
	Rollbacks    int64 // transactions rolled back (End)
	Checks       int64 // CHECK_TRANSACTION_STATE handed to a producer connection
	CheckMaxed   int64 // half messages moved to CheckMaxTopic
	Pending      int   // unresolved half messages loaded
	Waiting      int   // pending half messages whose last check found no live producer
}

// checkpoint is the checker's persisted state: every half message below
// HalfOffset is resolved; every op record naming a half message at or above
// HalfOffset sits at or above OpOffset in the op queue; Checks counts the
// checks already sent for pending half messages (by half queue offset).
type checkpoint struct {
	HalfOffset int64            `json:"halfOffset"`
	OpOffset   int64            `json:"opOffset"`
	Checks     map[string]int32 `json:"checks,omitempty"`
}

// half is a pending half message.
type half struct {
	qoff   int64  // half queue offset
	off    int64  // commit-log offset
	group  string // PGROUP
	checks int32  // checks sent so far
	next   int64  // ms: when to check it next
	orphan bool   // the last check found no live producer of its group
	joined bool   // a producer of its group joined since its current check began (ProducerJoined)
}

// Manager keeps the pending half messages of transactions, ends them
// (End) and checks them back. See the package documentation.
type Manager struct {
	cfg  Config
	host Host
	log  *slog.Logger

	wake     chan struct{} // cap 1: the half or op queue grew, or a producer joined
	stop     chan struct{}
	done     chan struct{} // closed when the checker returns
	started  atomic.Bool
	stopOnce sync.Once

	mu         sync.Mutex
	pending    map[int64]*half   // by half queue offset
	resolved   map[int64]int64   // half queue offset -> op queue offset (-1: op not loaded yet), for halves not below the pending floor
	halfLoaded int64             // next half queue offset to load
	opLoaded   int64             // next op queue offset to load
	restored   map[int64]int32   // check counts from the checkpoint, until their halves are loaded
	halfFree   []half            // newHalf's current chunk
	groups     map[string]string // internGroup's table
	groupBuf   []byte            // loadHalf's copy of a producer group (the checker goroutine's, or Start's)
	changes    uint64

	persistMu sync.Mutex // taken before mu
	persisted uint64

	sc      scratch   // the checker's (its goroutine only, and Start before it)
	endPool sync.Pool // *scratch for End

	halfMessages, commits, rollbacks, checks, checkMaxed atomic.Int64
}

// New returns a manager that reads and stores through host. Load its
// checkpoint, then Start it once the store is open.
func New(cfg Config, host Host) *Manager {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = DefaultCheckInterval
	}
	if cfg.CheckMax <= 0 {
		cfg.CheckMax = DefaultCheckMax
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Manager{
		cfg: cfg, host: host, log: cfg.Logger,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
		pending: make(map[int64]*half), resolved: make(map[int64]int64), restored: make(map[int64]int32), groups: make(map[string]string),
	}
}

// Load reads the checkpoint (Host.LoadState), if there is one. Call it
// before Start.
func (m *Manager) Load() error {
	var ck checkpoint
	found, err := m.host.LoadState(CheckpointFileName, func(data []byte) error {
		var c checkpoint
		if err := json.Unmarshal(data, &c); err != nil {
			return err
		}
		ck = c
		return nil
	})
	if err != nil || !found {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.halfLoaded, m.opLoaded = max(ck.HalfOffset, 0), max(ck.OpOffset, 0)
	for k, n := range ck.Checks {
		if q, err := strconv.ParseInt(k, 10, 64); err == nil && n > 0 {
			m.restored[q] = n
		}
	}
	return nil
}

// Start loads the half and op queues up to their ends and starts the
// checker. Loading before serving matters: an END_TRANSACTION arriving
// right after a restart must find the half messages resolved before it
// resolved. Call it once, after Load, with the store open.
func (m *Manager) Start() {
	halfEnd, opEnd := m.host.MaxOffset(HalfTopic, 0), m.host.MaxOffset(OpHalfTopic, 0)
	m.mu.Lock()
	m.halfLoaded = min(m.halfLoaded, halfEnd)
	m.opLoaded = min(m.opLoaded, opEnd)
	m.mu.Unlock()
	if err := m.loadHalves(); err != nil {
		m.log.Error("broker: transaction checker cannot load its queues at start", "err", err)
	}
	if err := m.loadOps(); err != nil {
		m.log.Error("broker: transaction checker cannot load its queues at start", "err", err)
	}
	m.started.Store(true)
	go m.run()
}

// Stop stops the checker and waits for it. End may still be called (the
// broker stops serving first); nothing is checked back any more. Persist
// afterwards to keep the latest state.
func (m *Manager) Stop() {
	m.stopOnce.Do(func() { close(m.stop) })
	if m.started.Load() {
		<-m.done
	}
}

// Arrived tells the checker that the half or op queue grew (the store's
// arrival callback for HalfTopic and OpHalfTopic). It never blocks.
func (m *Manager) Arrived() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// ProducerJoined checks at once the due half messages of a producer group
// that had no live connection when their check came (the broker calls it
// for each producer group a heartbeat adds). A check of the group under way
// that finds no producer (it looked before the producer was registered) is
// repeated at once too: checkDue sees the half's joined flag.
func (m *Manager) ProducerJoined(group string) {
	woke := false
	m.mu.Lock()
	for _, h := range m.pending {
		if h.group != group {
			continue
		}
		h.joined = true
		if h.orphan {
			h.next = 0
			woke = true
		}
	}
	m.mu.Unlock()
	if woke {
		m.Arrived()
	}
}

// Stats returns the counters and the number of pending half messages.
func (m *Manager) Stats() Stats {
	s := Stats{
		HalfMessages: m.halfMessages.Load(), Commits: m.commits.Load(), Rollbacks: m.rollbacks.Load(),
		Checks: m.checks.Load(), CheckMaxed: m.checkMaxed.Load(),
	}
	m.mu.Lock()
	s.Pending = len(m.pending)
	for _, h := range m.pending {
		if h.orphan {
			s.Waiting++
		}
	}
	m.mu.Unlock()
	return s
}

// snapshot returns the state to persist and drops what it makes useless.
func (m *Manager) snapshot() (checkpoint, uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	floor := m.halfLoaded
	for q := range m.pending {
		floor = min(floor, q)
	}
	for q, op := range m.resolved {
		if op < 0 { // claimed, its op record not read back yet: it may still be lost
			floor = min(floor, q)
		}
	}
	ck := checkpoint{HalfOffset: floor, OpOffset: m.opLoaded}
	for q, op := range m.resolved {
		switch {
		case q < floor && op >= 0:
			delete(m.resolved, q)
		case op >= 0:
			ck.OpOffset = min(ck.OpOffset, op)
		}
	}
	for q, h := range m.pending {
		if h.checks > 0 {
			if ck.Checks == nil {
				ck.Checks = make(map[string]int32)
			}
			ck.Checks[strconv.FormatInt(q, 10)] = h.checks
		}
	}
	for q, n := range m.restored {
		if ck.Checks == nil {
			ck.Checks = make(map[string]int32)
		}
		ck.Checks[strconv.FormatInt(q, 10)] = n
	}
	return ck, m.changes
}

// Persist writes the checkpoint (Host.WriteState) if anything changed since
// the last successful write, or always with force.
func (m *Manager) Persist(force bool) error {
	m.persistMu.Lock()
	defer m.persistMu.Unlock()
	ck, changes := m.snapshot()
	if changes == m.persisted && !force {
		return nil
	}
	data, err := json.Marshal(ck)
	if err != nil {
		return fmt.Errorf("txn: encode the transaction checkpoint: %w", err)
	}
	if err := m.host.WriteState(CheckpointFileName, data); err != nil {
		return fmt.Errorf("txn: write the transaction checkpoint: %w", err)
	}
	m.persisted = changes
	return nil
}
