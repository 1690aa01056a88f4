package ctrlmode

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/internal/logthrottle"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/controller/client"
	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// Options configure a Node. Zero values mean the defaults given.
type Options struct {
	// DataDir is the broker's data directory: the node keeps its identity
	// (controllerIdentity.json) and the epoch file there. Required.
	DataDir string
	// FS is the file system of those files. Default vfs.Default.
	FS vfs.FS
	// ClusterName, BrokerName and AdvertiseAddr name the broker to the
	// controller (its group, and the remoting address routes give).
	// Required.
	ClusterName, BrokerName, AdvertiseAddr string
	// BrokerID is the id asked for at the first registration (brokerId);
	// the controller's answer wins and is kept in the identity file.
	BrokerID int64
	// SyncMaster (brokerRole SYNC_MASTER) makes the master wait for its
	// SyncStateSet like InSyncReplicas 2 would.
	SyncMaster bool
	// ControllerAddrs are the controllers' remoting addresses (RocketMQ's
	// controllerAddr, split at ';'). Required.
	ControllerAddrs []string
	// ControllerTLS, when set, makes the connections to the controllers
	// TLS (client.Options.TLS). Default: plain.
	ControllerTLS *tls.Config
	// ClientTLS, when set, makes the node's connections to other brokers
	// (a new master's GET_BROKER_CONFIG) TLS. Default: plain.
	ClientTLS *tls.Config
	// Signer, when set, signs every request the node sends: to the
	// controllers (client.Options.Signer) and to other brokers of its
	// group. node.New sets it from broker.Options.InnerSigner
	// (innerClientAuthenticationCredentials). Default nil: unsigned.
	Signer remoting.Signer
	// GRPCAddr is this member's gRPC address when it runs the gRPC front
	// end: the node then tracks every member's (GRPCMaster, GRPCMembers).
	GRPCAddr string
	// OnMasterChange, when set, is called when the master's gRPC endpoint
	// changes (grpcfe.Server.MasterChanged).
	OnMasterChange func()

	// InSyncReplicas is how many copies (the master's included) a message
	// needs before a send is answered SEND_OK (RocketMQ's inSyncReplicas);
	// only SyncStateSet members count. Default 1.
	InSyncReplicas int
	// MinInSyncReplicas: with fewer members in the SyncStateSet the master
	// refuses writes (SYSTEM_ERROR "in-sync replicas not enough"); above 1
	// it also makes a send wait for every member, as AllAckInSyncStateSet.
	// Default 1.
	MinInSyncReplicas int
	// AllAckInSyncStateSet: a send is answered once every SyncStateSet
	// member has it. Default false.
	AllAckInSyncStateSet bool
	// MaxTimeSlaveNotCatchup: a SyncStateSet member that has not caught up
	// with the master's log for this long (or is disconnected that long)
	// leaves the set (RocketMQ's haMaxTimeSlaveNotCatchup). Default 15 s.
	MaxTimeSlaveNotCatchup time.Duration
	// SyncStateSetCheckInterval is how often the master reviews its set.
	// Default 200 ms.
	SyncStateSetCheckInterval time.Duration
	// HeartbeatInterval and HeartbeatTimeout are the controller client's
	// (default 1 s; the controller's own timeout).
	HeartbeatInterval, HeartbeatTimeout time.Duration
	// StartTimeout bounds New's registration with the controller.
	// Default 60 s.
	StartTimeout time.Duration
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Node is a broker in controller mode: it registers with the controller
// group, heartbeats, and gives its broker.Broker the role the controller
// names, in place (see the package doc).
type Node struct {
	opts   Options
	log    *slog.Logger
	ctl    *client.Client
	epochs *store.EpochFile
	id     int64
	pool   *remoting.Pool
	b      *broker.Broker // set by Start

	mu   sync.Mutex // guards inst
	inst *instance

	changed   chan struct{} // cap 1: the controller said something new
	stop      chan struct{}
	wg        sync.WaitGroup
	truncated atomic.Int64 // bytes the handshakes truncated
	lastEnd   atomic.Int64 // the log's end as last seen (heartbeats before Start)
	closing   atomic.Bool
	closeOnce sync.Once

	// The last failed role change, logged again only for another role or
	// a minute later (run's goroutine).
	failedRole string
	failedAt   time.Time
	// When a refusal for want of permission was last logged (run's
	// goroutine).
	deniedAt time.Time

	// Role changes measured (RoleChanges), from the controller's word
	// (notifiedAt: the first unhandled one, Unix ns; 0 when none waits).
	changes    roleStats
	notifiedAt atomic.Int64

	// The master's review of its SyncStateSet (run's goroutine).
	cu     *caughtUp
	cuInst *instance

	ep endpoints // the members' gRPC endpoints (endpoints.go)
}

// instance is one term of the broker in one role: a new one begins with
// each role change (the broker stays; its role changes in place).
type instance struct {
	b      *broker.Broker
	master bool
	epoch  atomic.Int32 // the master epoch it serves or follows (read by handshakes)
	sset   int32        // the SyncStateSet epoch it applied (a master's; run's goroutine)
	set    []int64      // the SyncStateSet it applied (a master's; run's goroutine)
	addr   string       // a slave's master (remoting address; run's goroutine)
}

// identity is what the node keeps in its data directory
// (controllerIdentity.json): the broker id the controller gave it and the
// token of its check code.
type identity struct {
	BrokerID int64  `json:"brokerId"`
	Token    string `json:"token"`
}

const identityFile = "controllerIdentity.json"

// New registers with the controller (asking for an election when the
// group has no master) and starts the heartbeats. The broker it runs is
// opened next, with BrokerOptions, and handed to Start. The caller ends it
// with Shutdown.
func New(opts Options) (*Node, error) {
	if len(opts.ControllerAddrs) == 0 {
		return nil, errors.New("ctrlmode: no controller address (controllerAddr)")
	}
	if opts.DataDir == "" || opts.AdvertiseAddr == "" || opts.BrokerName == "" {
		return nil, errors.New("ctrlmode: DataDir, BrokerName and AdvertiseAddr are required")
	}
	if opts.InSyncReplicas <= 0 {
		opts.InSyncReplicas = 1
	}
	if opts.MinInSyncReplicas <= 0 {
		opts.MinInSyncReplicas = 1
	}
	if opts.MaxTimeSlaveNotCatchup <= 0 {
		opts.MaxTimeSlaveNotCatchup = 15 * time.Second
	}
	if opts.SyncStateSetCheckInterval <= 0 {
		opts.SyncStateSetCheckInterval = 200 * time.Millisecond
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if err := durable.MkdirAll(opts.FS, opts.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("ctrlmode: %w", err)
	}
	ident, err := loadIdentity(opts.FS, opts.DataDir, opts.BrokerID, opts.Logger)
	if err != nil {
		return nil, err
	}
	epochs, err := store.OpenEpochFile(filepath.Join(opts.DataDir, store.EpochFileName), opts.FS, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("ctrlmode: %w", err)
	}
	n := &Node{opts: opts, log: opts.Logger.With("broker", opts.BrokerName), epochs: epochs,
		changed: make(chan struct{}, 1), stop: make(chan struct{}), pool: remoting.NewPool(&remoting.ClientOptions{TLS: opts.ClientTLS, Signer: opts.Signer})}
	n.lastEnd.Store(-1)
	n.ep.own = opts.GRPCAddr
	n.ctl, err = client.New(client.Options{
		Addrs: opts.ControllerAddrs, Cluster: opts.ClusterName, Broker: opts.BrokerName, Addr: opts.AdvertiseAddr,
		HeartbeatInterval: opts.HeartbeatInterval, HeartbeatTimeout: opts.HeartbeatTimeout,
		Status: n.status, OnRoleChange: func(client.State) { n.notified(); n.wake() }, Logger: opts.Logger, TLS: opts.ControllerTLS, Signer: opts.Signer,
	})
	if err != nil {
		n.pool.Close()
		return nil, fmt.Errorf("ctrlmode: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	defer cancel()
	reg, err := n.ctl.Register(ctx, ident.BrokerID, ident.Token)
	if err != nil {
		n.ctl.Close()
		n.pool.Close()
		if client.Code(err) == protocol.RespNoPermission {
			return nil, fmt.Errorf("ctrlmode: register with the controller: %w: the controller runs with access control and %s", err, n.innerHint())
		}
		return nil, fmt.Errorf("ctrlmode: register with the controller: %w", err)
	}
	n.id = reg.ID
	if ident.BrokerID != reg.ID {
		ident.BrokerID = reg.ID
		if err := saveIdentity(opts.FS, opts.DataDir, ident); err != nil {
			n.ctl.Close()
			n.pool.Close()
			return nil, err
		}
	}
	n.log.Info("ctrlmode: registered with the controller", "brokerId", n.id, "master", reg.State.MasterID,
		"masterEpoch", reg.State.MasterEpoch, "controller", n.ctl.Leader())
	if reg.State.MasterID == 0 {
		// No live master: ask for an election (the first broker of a new
		// group becomes its master; otherwise the controller picks from
		// the SyncStateSet).
		if _, err := n.ctl.ElectMaster(ctx, n.id, false); err != nil {
			n.log.Info("ctrlmode: election not won; waiting for the controller's choice", "err", err)
		}
	}
	n.ctl.StartHeartbeats(n.id)
	return n, nil
}

// BrokerOptions returns o made fit for the broker this node runs: every
// member opens as a slave (a replica's store, writes refused) with the
// node's broker id, and becomes master in place when the controller says
// so; the HA stream's handshakes, the controller's pushes and the
// following interval are the node's.
func (n *Node) BrokerOptions(o broker.Options) broker.Options {
	o.ControllerMode = true
	o.Core.Role = core.RoleSlave
	o.Core.BrokerID = n.id
	o.HAMasterAddr = ""
	o.ControllerNotify = n.ctl.HandleNotify
	o.ControllerInfo = n.runtimeInfo
	o.ControllerEpochCache = n.epochCache
	o.HAMasterHandshake = n.masterHandshake
	o.HASlaveHandshake = n.slaveHandshake
	if o.Core.FS == nil {
		o.Core.FS = n.opts.FS
	}
	if o.SlaveSyncInterval <= 0 {
		// A slave may be elected at any moment: it follows its master's
		// topics and offsets every second, not every 10 s.
		o.SlaveSyncInterval = time.Second
	}
	return o
}

// Start gives b (opened with BrokerOptions) the role the controller names
// and keeps it in step from then on. The broker is its caller's: the node
// changes its role, never closes it.
func (n *Node) Start(b *broker.Broker) {
	n.b = b
	n.mu.Lock()
	n.inst = &instance{b: b, sset: -1} // a slave of no master yet
	n.mu.Unlock()
	n.wg.Add(1)
	go n.run()
	n.wake()
}

// loadIdentity reads the identity file through fsys (falling back to its
// previous version, identityFile.bak, when it is missing or damaged; see
// durable.LoadWithBackup), or makes a new identity and writes it when
// there is neither.
func loadIdentity(fsys vfs.FS, dir string, want int64, log *slog.Logger) (identity, error) {
	p := filepath.Join(dir, identityFile)
	id, found, fellBack, err := durable.LoadWithBackup(fsys, p, log, func(b []byte) (identity, error) {
		var id identity
		if err := json.Unmarshal(b, &id); err != nil {
			return id, err
		}
		if id.Token == "" {
			return id, errors.New("no token")
		}
		return id, nil
	})
	switch {
	case err != nil:
		return id, fmt.Errorf("ctrlmode: %w", err)
	case fellBack:
		return id, saveIdentity(fsys, dir, id) // recreate the file from its previous version
	case found:
		return id, nil
	}
	var t [8]byte
	if _, err := rand.Read(t[:]); err != nil {
		return id, err
	}
	id = identity{BrokerID: max(want, 0), Token: hex.EncodeToString(t[:])}
	return id, saveIdentity(fsys, dir, id)
}

// saveIdentity replaces the identity file durably (durable.WriteFile: a
// temporary file, fsync, rename, directory fsync), keeping the previous
// version as identityFile.bak: once it returns, a power loss leaves the new
// identity; a crash during it leaves the old one or the new one, whole.
func saveIdentity(fsys vfs.FS, dir string, id identity) error {
	b, _ := json.Marshal(id)
	if err := durable.WriteFile(fsys, filepath.Join(dir, identityFile), b, durable.Backup(durable.BakSuffix)); err != nil {
		return fmt.Errorf("ctrlmode: %w", err)
	}
	return nil
}

// ID is the broker id the controller gave this node.
func (n *Node) ID() int64 { return n.id }

// Controller is the node's controller client.
func (n *Node) Controller() *client.Client { return n.ctl }

// Broker is the broker the node runs (nil before Start).
func (n *Node) Broker() *broker.Broker { return n.b }

// IsMaster reports whether the broker is the group's master now (its
// core takes writes as master).
func (n *Node) IsMaster() bool {
	i := n.current()
	return i != nil && i.master && n.b.Role() != core.RoleSlave
}

// Epochs returns a copy of this replica's epoch file entries (each master
// epoch it served or followed and the log offset it began at).
func (n *Node) Epochs() []store.EpochEntry { return n.epochs.Entries() }

// ControllerAddrs are the controller addresses the node was given.
func (n *Node) ControllerAddrs() []string { return slices.Clone(n.opts.ControllerAddrs) }

// TruncatedBytes is what the epoch handshakes cut from this replica's log
// since Start.
func (n *Node) TruncatedBytes() int64 { return n.truncated.Load() }

func (n *Node) current() *instance {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inst
}

func (n *Node) setCurrent(i *instance) {
	n.mu.Lock()
	n.inst = i
	n.mu.Unlock()
}

// notified records when the controller's state last changed (the first
// change not yet acted on).
func (n *Node) notified() { n.notifiedAt.CompareAndSwap(0, time.Now().UnixNano()) }

// since is how long ago the controller's word that began a role change
// came (began, when none was recorded).
func (n *Node) since(began time.Time) time.Duration {
	if at := n.notifiedAt.Swap(0); at != 0 && at < began.UnixNano() {
		return time.Since(time.Unix(0, at))
	}
	return time.Since(began)
}

func (n *Node) wake() {
	select {
	case n.changed <- struct{}{}:
	default:
	}
}

// status is the heartbeat's figures.
func (n *Node) status() client.HeartbeatStatus {
	st := client.HeartbeatStatus{Epoch: n.epochs.LastEpoch(), MaxOffset: n.lastEnd.Load(), ConfirmOffset: -1}
	if i := n.current(); i != nil {
		st.MaxOffset = i.b.Store().WrittenOffset()
		n.lastEnd.Store(st.MaxOffset)
		if i.master {
			st.ConfirmOffset = i.b.Store().DurableOffset()
		}
	}
	return st
}

// refresh asks the controller for the group's state (a handshake found the
// node's view stale); the answer reaches run through OnRoleChange.
func (n *Node) refresh() {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := n.ctl.GetReplicaInfo(ctx, ""); err != nil {
			n.log.Warn("ctrlmode: reading the group's state from the controller failed", "err", err)
		}
	}()
}

// fence closes the running master's write gate at once.
func (n *Node) fence(why string) {
	if i := n.current(); i != nil && i.master {
		if g := i.b.Core().Replication().WriteGate(); g == nil || g.Reason == core.ReasonInSyncReplicasNotEnough {
			n.log.Warn("ctrlmode: no longer master; refusing writes", "why", why)
		}
		i.b.Core().Replication().SetWriteGate(core.ReasonFenced, "this broker is no longer its group's master ("+why+"); the route will name the new one")
	}
}

// run applies what the controller says, one change at a time.
func (n *Node) run() {
	defer n.wg.Done()
	t := time.NewTicker(n.opts.SyncStateSetCheckInterval)
	defer t.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.changed:
			n.apply()
			n.refreshEndpoints(true)
		case <-t.C:
			n.refreshEndpoints(false)
			if i := n.current(); i != nil && i.master {
				n.reviewSyncStateSet(i)
			} else if i == nil || i.addr == "" {
				n.apply() // a failed change, or a master not found yet, is retried
			}
		}
	}
}

// apply brings the node to the role of the latest state.
func (n *Node) apply() {
	s, ok := n.ctl.State()
	if !ok {
		return
	}
	cur := n.current()
	switch {
	case s.MasterID == n.id:
		if cur.master && cur.epoch.Load() == s.MasterEpoch {
			n.applySyncStateSet(cur, s)
			return
		}
		if cur.master {
			// Elected again in a later epoch: a new epoch entry at the log's end.
			end := cur.b.Store().WrittenOffset()
			if err := n.appendEpoch(s.MasterEpoch, end); err != nil {
				n.log.Error("ctrlmode: epoch file", "err", err)
				n.fence("its epoch file failed")
				return
			}
			cur.epoch.Store(s.MasterEpoch)
			cur.sset, cur.set = -1, nil
			n.b.SetRole(broker.RoleChange{Role: n.masterRole(), BrokerID: 0, StateVersion: int64(s.MasterEpoch)})
			n.applySyncStateSet(cur, s)
			return
		}
		n.becomeMaster(s)
	default:
		if cur.master {
			n.fence(fmt.Sprintf("master epoch %d elected broker %d", s.MasterEpoch, s.MasterID))
		}
		n.becomeSlave(cur, s)
	}
}

func (n *Node) appendEpoch(epoch int32, end int64) error {
	// Entries beyond the log's end describe bytes this broker never
	// received: they go before its own epoch begins at the end.
	if err := n.epochs.TruncateFrom(end + 1); err != nil {
		return err
	}
	return n.epochs.Append(epoch, end)
}

// masterRole is the core's role as master: SYNC_MASTER when sends wait for
// replicas.
func (n *Node) masterRole() core.Role {
	if n.syncWaits() {
		return core.RoleSyncMaster
	}
	return core.RoleAsyncMaster
}

// syncWaits reports whether a master's sends wait for replicas.
func (n *Node) syncWaits() bool {
	return n.allAck() || n.opts.InSyncReplicas > 1 || n.opts.SyncMaster
}

// becomeMaster makes the broker the group's master of epoch s.MasterEpoch,
// in place: the HA slave stops, the epoch's entry is written at the log's
// end, then the store takes writes (broker.SetRole).
func (n *Node) becomeMaster(s client.State) {
	began := time.Now()
	if n.closing.Load() {
		return
	}
	inst := &instance{b: n.b, master: true, sset: -1}
	inst.epoch.Store(s.MasterEpoch)
	prev := n.current()
	var epochStart int64
	err := n.b.SetRole(broker.RoleChange{Role: n.masterRole(), BrokerID: 0, StateVersion: int64(s.MasterEpoch),
		BeforeMaster: func(end int64) error {
			// The epoch must begin at the log's end as it is before the
			// master takes a write: its features (delays, timers,
			// transactions) write as soon as it does.
			if err := n.appendEpoch(s.MasterEpoch, end); err != nil {
				return fmt.Errorf("epoch file: %w", err)
			}
			epochStart = end
			n.lastEnd.Store(end)
			n.b.Core().Replication().SetWriteGate(core.ReasonNone, "") // a fence from an earlier term as master
			n.setCurrent(inst)                                         // handshakes of slaves now answer as master
			// The SyncStateSet's policy (the store's count, the write
			// gate) before the first write is taken.
			n.applySyncStateSet(inst, s)
			return nil
		}})
	if err != nil {
		n.setCurrent(prev)
		n.changeFailed("master", err)
		return
	}
	took := n.since(began) // serving writes as master from here
	n.setMaster(n.ep.own, true)
	n.changes.record(true, took)
	n.log.Info("ctrlmode: master", "brokerId", n.id, "masterEpoch", s.MasterEpoch, "epochStart", epochStart,
		"syncStateSet", s.SyncStateSet, "took", took.Round(time.Microsecond))
}

// becomeSlave makes the node a slave of s's master (none: it waits).
func (n *Node) becomeSlave(cur *instance, s client.State) {
	if cur.master {
		began := time.Now()
		inst := &instance{b: n.b, sset: -1}
		inst.epoch.Store(s.MasterEpoch)
		n.setCurrent(inst)
		n.setMaster("", false) // until the new master's is read
		if err := n.b.SetRole(broker.RoleChange{Role: core.RoleSlave, BrokerID: n.id, StateVersion: int64(s.MasterEpoch)}); err != nil {
			n.setCurrent(cur)
			n.changeFailed("slave", err)
			return
		}
		n.lastEnd.Store(n.b.Store().WrittenOffset())
		cur = inst
		took := n.since(began)
		n.changes.record(false, took)
		n.log.Info("ctrlmode: slave", "brokerId", n.id, "masterEpoch", s.MasterEpoch, "master", s.MasterAddress,
			"took", took.Round(time.Microsecond))
	} else if int64(s.MasterEpoch) != n.b.StateVersion() {
		// Registered as a slave of this epoch from now on.
		if err := n.b.SetRole(broker.RoleChange{Role: core.RoleSlave, BrokerID: n.id, StateVersion: int64(s.MasterEpoch)}); err != nil {
			n.changeFailed("slave", err)
			return
		}
	}
	if s.MasterID == 0 || s.MasterAddress == "" {
		cur.epoch.Store(s.MasterEpoch)
		cur.addr = ""
		n.b.FollowMaster("", "")
		return
	}
	if cur.addr == s.MasterAddress && cur.epoch.Load() == s.MasterEpoch {
		return
	}
	newEpoch := cur.epoch.Load() != s.MasterEpoch
	cur.epoch.Store(s.MasterEpoch)
	cur.addr = s.MasterAddress
	haAddr, err := n.masterHAAddr(s.MasterAddress)
	var re *refusedError
	haKey := n.opts.AdvertiseAddr + "|master HA address|" + s.MasterAddress
	switch {
	case errors.As(err, &re) && re.code == protocol.RespNoPermission:
		if time.Since(n.deniedAt) >= time.Minute {
			n.deniedAt = time.Now()
			n.log.Error("ctrlmode: the master refuses this broker's requests (NO_PERMISSION): it runs with ACL and "+n.innerHint()+
				"; retrying (logged again after a minute)", "master", s.MasterAddress, "remark", re.remark)
		}
	case err != nil:
		// Asked again at every review tick (200 ms): logged once a minute.
		loopLogs.Warn(n.log, haKey, "ctrlmode: the master's HA address is unknown yet (is the master reachable?); retrying",
			"master", s.MasterAddress, "err", err)
	}
	if err != nil {
		cur.addr = "" // ask again at the next tick
		return
	}
	if missed := loopLogs.Clear(haKey); missed > 0 {
		n.log.Info("ctrlmode: the master's HA address is known now", "master", s.MasterAddress, "haAddr", haAddr, "failures_not_logged", missed)
	}
	if newEpoch {
		n.b.FollowMaster("", "") // a new connection, and with it a new handshake
	}
	n.b.FollowMaster(s.MasterAddress, haAddr)
}

// loopLogs throttles the WARNs of the review loop (one per cause a
// minute, with the count of the ones held back).
var loopLogs = logthrottle.New(time.Minute)

// masterHAAddr asks the master (GET_BROKER_CONFIG) for its HA address.
func (n *Node) masterHAAddr(addr string) (string, error) {
	cfg, err := n.brokerConfig(addr)
	if err != nil {
		return "", err
	}
	port, host := cfg["haListenPort"], cfg["brokerIP2"]
	if port == "" {
		return "", errors.New("the master reports no haListenPort")
	}
	if _, err := strconv.Atoi(port); err != nil {
		return "", fmt.Errorf("haListenPort %q", port)
	}
	if host == "" {
		host, _, _ = net.SplitHostPort(addr)
	}
	return net.JoinHostPort(host, port), nil
}

// brokerConfig asks the broker at addr for its configuration
// (GET_BROKER_CONFIG).
func (n *Node) brokerConfig(addr string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var req protocol.Command
	req.InitRequest(protocol.ReqGetBrokerConfig, 0)
	resp, err := n.pool.Invoke(ctx, addr, &req)
	if err != nil {
		return nil, err
	}
	if resp.Code != protocol.RespSuccess {
		return nil, &refusedError{code: resp.Code, remark: string(resp.Remark)}
	}
	m := map[string]string{}
	for _, line := range splitLines(string(resp.Body)) {
		if k, v, ok := cut(line, '='); ok {
			m[k] = v
		}
	}
	return m, nil
}

// Shutdown stops the role changes and the heartbeats, and leaves the
// controller's connections. The broker is its owner's to shut down (after
// this: a role change cannot begin meanwhile).
func (n *Node) Shutdown(ctx context.Context) error {
	n.closeOnce.Do(func() {
		n.closing.Store(true)
		close(n.stop)
		n.wg.Wait()
		n.ctl.Close()
		n.pool.Close()
	})
	return nil
}

// runtimeInfo adds controller mode's figures to the broker's runtime info:
// the broker id the controller gave it, the group's master and epoch as
// this node last heard them, and, on the master, the SyncStateSet it
// applied (ids, comma-separated) and its epoch.
func (n *Node) runtimeInfo(m map[string]string) {
	m["controllerMode"] = "true"
	m["controllerBrokerId"] = strconv.FormatInt(n.id, 10)
	m["controllerLeader"] = n.ctl.Leader()
	if s, ok := n.ctl.State(); ok {
		m["masterBrokerId"] = strconv.FormatInt(s.MasterID, 10)
		m["masterEpoch"] = strconv.Itoa(int(s.MasterEpoch))
		set := make([]string, len(s.SyncStateSet))
		for i, id := range s.SyncStateSet {
			set[i] = strconv.FormatInt(id, 10)
		}
		m["syncStateSet"] = strings.Join(set, ",")
		m["syncStateSetEpoch"] = strconv.Itoa(int(s.SyncStateSetEpoch))
	}
}

// RoleChanges returns how long the role changes since Start took, from
// the moment the node acted on the controller's state to the broker
// serving in its new role: to master and to slave.
func (n *Node) RoleChanges() (toMaster, toSlave []time.Duration) {
	return n.changes.snapshot()
}

// roleStats records the role changes' durations.
type roleStats struct {
	mu                sync.Mutex
	toMaster, toSlave []time.Duration
}

const roleStatsKept = 1024

func (r *roleStats) record(master bool, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := &r.toSlave
	if master {
		l = &r.toMaster
	}
	if len(*l) >= roleStatsKept {
		*l = (*l)[1:]
	}
	*l = append(*l, d)
}

func (r *roleStats) snapshot() (toMaster, toSlave []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.toMaster), slices.Clone(r.toSlave)
}

// changeFailed logs a failed role change (retried at every review tick)
// once a minute at most per role (the retries in between at DEBUG).
func (n *Node) changeFailed(role string, err error) {
	if role == n.failedRole && time.Since(n.failedAt) < time.Minute {
		n.log.Debug("ctrlmode: becoming "+role+" failed again; retrying", "err", err)
		return
	}
	n.failedRole, n.failedAt = role, time.Now()
	n.log.Error("ctrlmode: becoming "+role+" failed; retrying (failures logged again after a minute)", "err", err)
}

// refusedError is another broker's answer other than SUCCESS to
// GET_BROKER_CONFIG.
type refusedError struct {
	code   int32
	remark string
}

func (e *refusedError) Error() string {
	return fmt.Sprintf("GET_BROKER_CONFIG answered %d (%s)", e.code, e.remark)
}

// innerHint tells an operator what to do about a peer refusing the
// broker's own requests for want of permission.
func (n *Node) innerHint() string {
	if n.opts.Signer == nil {
		return "this broker signs nothing: set innerClientAuthenticationCredentials in broker.conf " +
			`({"accessKey":"...","secretKey":"..."}) to a user with admin rights (a Super user) in the ACL of every broker and controller`
	}
	return "refuses this broker's innerClientAuthenticationCredentials: give their user admin rights (a Super user) " +
		"in the ACL of every broker and controller, or fix the keys in broker.conf"
}
