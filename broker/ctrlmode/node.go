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
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/controller/client"
	"github.com/apogeemq/apogee/ha"
	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

// Options configure a Node. Zero values mean the defaults given.
type Options struct {
	// Broker is the template of every broker instance the node opens: its
	// Role, BrokerID, HAMasterAddr, HAAdvertiseAddr and controller-mode
	// fields are the node's to set. Broker.Role SYNC_MASTER makes the
	// master wait for its SyncStateSet like InSyncReplicas 2 would.
	Broker broker.Options
	// ControllerAddrs are the controllers' remoting addresses (RocketMQ's
	// controllerAddr, split at ';'). Required.
	ControllerAddrs []string
	// ControllerTLS, when set, makes the connections to the controllers
	// TLS (client.Options.TLS). Default: plain.
	ControllerTLS *tls.Config
	// Listener is the broker's remoting listener and HAListener its HA
	// listener (every broker here may become master). Required; the node
	// closes them at Shutdown.
	Listener, HAListener net.Listener
	// HAAdvertiseAddr is the HA address given to slaves. Default: the
	// broker's advertised host with HAListener's port.
	HAAdvertiseAddr string

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
	// StartTimeout bounds Start's registration with the controller.
	// Default 60 s.
	StartTimeout time.Duration
	// Logger. Default Broker.Logger, else slog.Default().
	Logger *slog.Logger
}

// Node is a broker in controller mode: it registers with the controller
// group, heartbeats, and runs a broker.Broker in the role the controller
// gives it, reopening it when that role changes (see the package doc).
type Node struct {
	opts   Options
	log    *slog.Logger
	ctl    *client.Client
	epochs *store.EpochFile
	id     int64
	pool   *remoting.Pool

	ln, haln *handoff

	mu   sync.Mutex // guards inst
	inst *instance

	changed   chan struct{} // cap 1: the controller said something new
	stop      chan struct{}
	wg        sync.WaitGroup
	truncated atomic.Int64 // bytes the handshakes truncated
	lastEnd   atomic.Int64 // the log's end as last seen (heartbeats between instances)
	closing   atomic.Bool
	closeOnce sync.Once

	// The last failure to open the broker, logged again only when it
	// changes or a minute later (run's goroutine).
	openErr   string
	openErrAt time.Time

	// The master's review of its SyncStateSet (run's goroutine).
	cu     *caughtUp
	cuInst *instance
}

// instance is one broker.Broker in one role.
type instance struct {
	b      *broker.Broker
	master bool
	epoch  atomic.Int32 // the master epoch it serves or follows (read by handshakes)
	sset   int32        // the SyncStateSet epoch it applied (a master's; run's goroutine)
	set    []int64      // the SyncStateSet it applied (a master's; run's goroutine)
	addr   string       // a slave's master (remoting address; run's goroutine)
	done   chan struct{}
}

// identity is what the node keeps in its data directory
// (controllerIdentity.json): the broker id the controller gave it and the
// token of its check code.
type identity struct {
	BrokerID int64  `json:"brokerId"`
	Token    string `json:"token"`
}

const identityFile = "controllerIdentity.json"

// Start registers with the controller, opens the broker in its role and
// serves. The caller ends it with Shutdown.
func Start(opts Options) (*Node, error) {
	if len(opts.ControllerAddrs) == 0 {
		return nil, errors.New("ctrlmode: no controller address (controllerAddr)")
	}
	if opts.Listener == nil || opts.HAListener == nil {
		return nil, errors.New("ctrlmode: Listener and HAListener are required")
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
		opts.Logger = opts.Broker.Logger
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	bo := &opts.Broker
	if bo.Logger == nil {
		bo.Logger = opts.Logger
	}
	if bo.DataDir == "" {
		return nil, errors.New("ctrlmode: Broker.DataDir is required")
	}
	if bo.AdvertiseAddr == "" {
		bo.AdvertiseAddr = opts.Listener.Addr().String()
	}
	if opts.HAAdvertiseAddr == "" {
		host, _, _ := net.SplitHostPort(bo.AdvertiseAddr)
		_, port, _ := net.SplitHostPort(opts.HAListener.Addr().String())
		opts.HAAdvertiseAddr = net.JoinHostPort(host, port)
	}
	if bo.FS == nil {
		bo.FS = vfs.Default
	}
	if err := durable.MkdirAll(bo.FS, bo.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("ctrlmode: %w", err)
	}
	ident, err := loadIdentity(bo.FS, bo.DataDir, bo.BrokerID, opts.Logger)
	if err != nil {
		return nil, err
	}
	epochs, err := store.OpenEpochFile(filepath.Join(bo.DataDir, store.EpochFileName), bo.FS, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("ctrlmode: %w", err)
	}
	n := &Node{opts: opts, log: opts.Logger.With("broker", bo.BrokerName), epochs: epochs,
		changed: make(chan struct{}, 1), stop: make(chan struct{}), pool: remoting.NewPool(&remoting.ClientOptions{TLS: bo.ClientTLS})}
	n.lastEnd.Store(-1)
	n.ctl, err = client.New(client.Options{
		Addrs: opts.ControllerAddrs, Cluster: bo.ClusterName, Broker: bo.BrokerName, Addr: bo.AdvertiseAddr,
		HeartbeatInterval: opts.HeartbeatInterval, HeartbeatTimeout: opts.HeartbeatTimeout,
		Status: n.status, OnRoleChange: func(client.State) { n.wake() }, Logger: opts.Logger, TLS: opts.ControllerTLS,
	})
	if err != nil {
		return nil, fmt.Errorf("ctrlmode: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opts.StartTimeout)
	defer cancel()
	reg, err := n.ctl.Register(ctx, ident.BrokerID, ident.Token)
	if err != nil {
		n.ctl.Close()
		return nil, fmt.Errorf("ctrlmode: register with the controller: %w", err)
	}
	n.id = reg.ID
	if ident.BrokerID != reg.ID {
		ident.BrokerID = reg.ID
		if err := saveIdentity(bo.FS, bo.DataDir, ident); err != nil {
			n.ctl.Close()
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
	n.ln, n.haln = newHandoff(opts.Listener), newHandoff(opts.HAListener)
	n.wg.Add(1)
	go n.run()
	n.wake()
	return n, nil
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

// Broker is the broker instance running now (nil between two).
func (n *Node) Broker() *broker.Broker {
	if i := n.current(); i != nil {
		return i.b
	}
	return nil
}

// IsMaster reports whether the running instance is the group's master.
func (n *Node) IsMaster() bool {
	i := n.current()
	return i != nil && i.master
}

// TruncatedBytes is what the epoch handshakes cut from this replica's log
// since Start.
func (n *Node) TruncatedBytes() int64 { return n.truncated.Load() }

func (n *Node) current() *instance {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inst
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
		if g := i.b.Core().WriteGate(); g == nil || g.Reason == core.ReasonInSyncReplicasNotEnough {
			n.log.Warn("ctrlmode: no longer master; refusing writes", "why", why)
		}
		i.b.Core().SetWriteGate(core.ReasonFenced, "this broker is no longer its group's master ("+why+"); the route will name the new one")
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
		case <-t.C:
			if i := n.current(); i != nil && i.master {
				n.reviewSyncStateSet(i)
			} else if i == nil || i.addr == "" {
				n.apply() // a failed open, or a master not found yet, is retried
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
		if cur != nil && cur.master && cur.epoch.Load() == s.MasterEpoch {
			n.applySyncStateSet(cur, s)
			return
		}
		if cur != nil && cur.master {
			// Elected again in a later epoch: a new epoch entry at the log's end.
			end := cur.b.Store().WrittenOffset()
			if err := n.appendEpoch(s.MasterEpoch, end); err != nil {
				n.log.Error("ctrlmode: epoch file", "err", err)
				n.fence("its epoch file failed")
				return
			}
			cur.epoch.Store(s.MasterEpoch)
			cur.sset, cur.set = -1, nil
			n.applySyncStateSet(cur, s)
			return
		}
		n.becomeMaster(cur, s)
	default:
		if cur != nil && cur.master {
			n.fence(fmt.Sprintf("master epoch %d elected broker %d", s.MasterEpoch, s.MasterID))
			n.close(cur)
			cur = nil
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

// brokerOptions is the template for one role.
func (n *Node) brokerOptions(master bool, epoch int32) broker.Options {
	o := n.opts.Broker
	o.ControllerMode = true
	o.StateVersion = int64(epoch)
	o.HAAdvertiseAddr = n.opts.HAAdvertiseAddr
	o.HAMasterAddr = ""
	o.ControllerNotify = n.ctl.HandleNotify
	if o.SlaveSyncInterval <= 0 {
		// A slave may be elected at any moment: it follows its master's
		// topics and offsets every second, not every 10 s.
		o.SlaveSyncInterval = time.Second
	}
	if master {
		o.BrokerID = 0 // routes name the elected master 0, as RocketMQ's
		o.Role = core.RoleAsyncMaster
		if n.syncWaits() {
			o.Role = core.RoleSyncMaster
		}
		o.HAMasterHandshake = n.masterHandshake
		o.HASlaveHandshake = nil
	} else {
		o.BrokerID = n.id
		o.Role = core.RoleSlave
		o.HAMasterHandshake = nil
		o.HASlaveHandshake = n.slaveHandshake
	}
	return o
}

// syncWaits reports whether a master's sends wait for replicas.
func (n *Node) syncWaits() bool {
	return n.allAck() || n.opts.InSyncReplicas > 1 || n.opts.Broker.Role == core.RoleSyncMaster
}

func (n *Node) open(master bool, epoch int32) (*instance, error) {
	if n.closing.Load() {
		return nil, errors.New("ctrlmode: shutting down")
	}
	b, err := broker.New(n.brokerOptions(master, epoch))
	if err != nil {
		return nil, err
	}
	inst := &instance{b: b, master: master, sset: -1, done: make(chan struct{})}
	inst.epoch.Store(epoch)
	return inst, nil
}

// serve starts serving inst on the shared listeners and makes it current.
func (n *Node) serve(inst *instance) {
	n.mu.Lock()
	n.inst = inst
	n.mu.Unlock()
	ln := n.ln.sub()
	go func() {
		defer close(inst.done)
		if err := inst.b.Serve(ln); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, remoting.ErrServerClosed) {
			n.log.Debug("ctrlmode: broker server stopped", "err", err)
		}
	}()
	if inst.master {
		hl := n.haln.sub()
		go func() {
			if err := inst.b.ServeHA(hl); err != nil && !errors.Is(err, ha.ErrMasterClosed) && !errors.Is(err, net.ErrClosed) {
				n.log.Debug("ctrlmode: HA server stopped", "err", err)
			}
		}()
	}
}

// close stops inst (writes already refused when it was a deposed master).
// It returns the log's end once the instance is closed.
func (n *Node) close(inst *instance) int64 {
	n.mu.Lock()
	if n.inst == inst {
		n.inst = nil
	}
	n.mu.Unlock()
	n.lastEnd.Store(inst.b.Store().WrittenOffset())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := inst.b.Shutdown(ctx); err != nil && !errors.Is(err, broker.ErrClosed) {
		n.log.Warn("ctrlmode: stopping the broker instance", "err", err)
	}
	end := inst.b.Store().WrittenOffset() // nothing appends any more
	n.lastEnd.Store(end)
	return end
}

// becomeMaster opens the broker as the group's master of epoch s.MasterEpoch.
func (n *Node) becomeMaster(cur *instance, s client.State) {
	began := time.Now()
	if cur == nil {
		// The epoch must begin at the log's end as it is before a master
		// instance opens: its features (delays, timers, transactions) write
		// as soon as it does. A replica instance, which writes nothing,
		// recovers the log and tells its end.
		probe, err := n.open(false, s.MasterEpoch)
		if err != nil {
			n.openFailed("master", err)
			return
		}
		cur = probe
	}
	end := n.close(cur)
	if err := n.appendEpoch(s.MasterEpoch, end); err != nil {
		n.log.Error("ctrlmode: epoch file; not taking office", "err", err)
		return
	}
	inst, err := n.open(true, s.MasterEpoch)
	if err != nil {
		n.openFailed("master", err)
		return
	}
	n.adoptStoredTopics(inst)
	n.applySyncStateSet(inst, s)
	n.serve(inst)
	n.log.Info("ctrlmode: master", "brokerId", n.id, "masterEpoch", s.MasterEpoch, "epochStart", end,
		"syncStateSet", s.SyncStateSet, "took", time.Since(began).Round(time.Millisecond))
}

// becomeSlave makes the node a slave of s's master (none: it waits).
func (n *Node) becomeSlave(cur *instance, s client.State) {
	if cur == nil || cur.master {
		inst, err := n.open(false, s.MasterEpoch)
		if err != nil {
			n.openFailed("slave", err)
			return
		}
		n.serve(inst)
		cur = inst
		n.log.Info("ctrlmode: slave", "brokerId", n.id, "masterEpoch", s.MasterEpoch, "master", s.MasterAddress)
	}
	if s.MasterID == 0 || s.MasterAddress == "" {
		cur.epoch.Store(s.MasterEpoch)
		cur.addr = ""
		cur.b.FollowMaster("", "")
		return
	}
	if cur.addr == s.MasterAddress && cur.epoch.Load() == s.MasterEpoch {
		return
	}
	newEpoch := cur.epoch.Load() != s.MasterEpoch
	cur.epoch.Store(s.MasterEpoch)
	cur.addr = s.MasterAddress
	haAddr, err := n.masterHAAddr(s.MasterAddress)
	if err != nil {
		n.log.Warn("ctrlmode: the master's HA address is unknown yet; retrying", "master", s.MasterAddress, "err", err)
		cur.addr = "" // ask again at the next tick
		return
	}
	if newEpoch {
		cur.b.FollowMaster("", "") // a new connection, and with it a new handshake
	}
	cur.b.FollowMaster(s.MasterAddress, haAddr)
}

// masterHAAddr asks the master (GET_BROKER_CONFIG) for its HA address.
func (n *Node) masterHAAddr(addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var req protocol.Command
	req.InitRequest(protocol.ReqGetBrokerConfig, 0)
	resp, err := n.pool.Invoke(ctx, addr, &req)
	if err != nil {
		return "", err
	}
	if resp.Code != protocol.RespSuccess {
		return "", fmt.Errorf("GET_BROKER_CONFIG answered %d (%s)", resp.Code, resp.Remark)
	}
	var host, port string
	for _, line := range splitLines(string(resp.Body)) {
		k, v, ok := cut(line, '=')
		switch {
		case !ok:
		case k == "haListenPort":
			port = v
		case k == "brokerIP2":
			host = v
		}
	}
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

// Shutdown stops the heartbeats and the broker (flushing and persisting as
// broker.Shutdown does), and closes the listeners.
func (n *Node) Shutdown(ctx context.Context) error {
	var err error
	n.closeOnce.Do(func() {
		n.closing.Store(true)
		close(n.stop)
		n.wg.Wait()
		n.ctl.Close()
		if i := n.current(); i != nil {
			n.mu.Lock()
			n.inst = nil
			n.mu.Unlock()
			if e := i.b.Shutdown(ctx); e != nil && !errors.Is(e, broker.ErrClosed) {
				err = e
			}
		}
		n.ln.close()
		n.haln.close()
		n.pool.Close()
	})
	return err
}

// adoptStoredTopics creates, on a new master, the topics its log holds
// messages of but its table lacks (a topic created on the old master less
// than a slave-sync interval before it died): core.AdoptStoredTopics.
func (n *Node) adoptStoredTopics(inst *instance) {
	inst.b.Core().AdoptStoredTopics()
}

// openFailed logs a failed open (retried at every review tick) without
// repeating the same error more than once a minute.
func (n *Node) openFailed(role string, err error) {
	msg := role + ": " + err.Error()
	if msg == n.openErr && time.Since(n.openErrAt) < time.Minute {
		return
	}
	n.openErr, n.openErrAt = msg, time.Now()
	n.log.Error("ctrlmode: opening the broker as "+role+" failed; retrying", "err", err)
}
