package controller

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	"go.etcd.io/bbolt"

	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/internal/durable"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Defaults of Options (docs/failover.md has the failover budget they add
// up to).
const (
	// DefaultHeartbeatTimeout: a broker not heard from for this long is
	// dead (RocketMQ's controllerHeartBeatTimeoutMills is 10 s; brokers
	// send every second).
	DefaultHeartbeatTimeout = 3 * time.Second
	// DefaultScanInterval: how often the leader looks for dead masters
	// (RocketMQ's scanInactiveMasterInterval is 5 s).
	DefaultScanInterval = 500 * time.Millisecond
	// DefaultCloseGrace: a broker whose connection to the leader closed is
	// dead this long after, unless it is heard from again meanwhile.
	DefaultCloseGrace = 500 * time.Millisecond
	// DefaultGroup is the name GET_METADATA_INFO reports.
	DefaultGroup = "apogee-controller"
)

// Peer is one member of the Raft group: its id and its Raft address.
type Peer struct {
	ID, Addr string
}

// ParsePeers reads "id=host:port,id=host:port" (commas or semicolons).
func ParsePeers(s string) ([]Peer, error) {
	var peers []Peer
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ';' }) {
		id, addr, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("peer %q: want id=host:port", f)
		}
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return nil, fmt.Errorf("peer %q: %w", f, err)
		}
		if slices.ContainsFunc(peers, func(p Peer) bool { return p.ID == id || p.Addr == addr }) {
			return nil, fmt.Errorf("peer %q: id or address given twice", f)
		}
		peers = append(peers, Peer{ID: id, Addr: addr})
	}
	if len(peers) == 0 {
		return nil, errors.New("no peers")
	}
	return peers, nil
}

// FormatPeers writes peers as ParsePeers reads them.
func FormatPeers(peers []Peer) string {
	parts := make([]string, len(peers))
	for i, p := range peers {
		parts[i] = p.ID + "=" + p.Addr
	}
	return strings.Join(parts, ",")
}

// RaftTiming are the Raft library's timeouts (zero: hashicorp/raft's
// defaults, which the failover budget assumes: heartbeat and election 1 s,
// leader lease 500 ms, commit 50 ms). Tests shorten them.
type RaftTiming struct {
	HeartbeatTimeout, ElectionTimeout, LeaderLeaseTimeout, CommitTimeout time.Duration
}

// Options configure a Node. Zero values mean the defaults given.
type Options struct {
	// ID is this node's Raft id; it must be one of Peers. Required.
	ID string
	// Peers is the Raft group, this node included (3 or 5 nodes; 1 for a
	// test). It bootstraps a new data directory; an existing one keeps the
	// membership it has (a difference is logged). A group of one may give
	// its own address with port 0: the node's Raft address is then the
	// host with the port its listener bound (the seed of a group that
	// grows by Join).
	Peers []Peer
	// Join, instead of Peers, starts a node that is in no group yet: a new
	// data directory is not bootstrapped, and the node waits for a group's
	// leader to add it (Node.Join asks for that). Its Raft address is the
	// address its listener bound (RaftBind or RaftListener, port 0 allowed),
	// an unspecified host replaced by Advertise's host.
	Join bool
	// DataDir holds raft.db (the log and the Raft metadata, in bbolt
	// through raft-boltdb) and snapshots/. Required.
	DataDir string
	// FS is the file system DataDir, snapshots/ and the snapshots go
	// through (raft.db does not: bbolt does its own I/O; see
	// docs/crash-safety.md). Default vfs.Default; tests wrap it.
	FS vfs.FS
	// RaftListener, if set, is where Raft accepts its peers; otherwise the
	// node listens on RaftBind (default: its own peer address).
	RaftListener net.Listener
	RaftBind     string
	// Advertise is the remoting address brokers reach this node at: the
	// leader announces it through the log so that followers can name it in
	// their CONTROLLER_NOT_LEADER answers. Required.
	Advertise string
	// Group is the name GET_METADATA_INFO reports. Default DefaultGroup.
	Group string
	// HeartbeatTimeout, ScanInterval, CloseGrace: see their defaults.
	HeartbeatTimeout, ScanInterval, CloseGrace time.Duration
	// ElectUncleanMaster lets an election choose a replica outside the
	// SyncStateSet when none inside is alive (RocketMQ's
	// enableElectUncleanMaster): what it may lose is logged and answered
	// (uncleanLossBytes). Off by default.
	ElectUncleanMaster bool
	// DisableNotify stops the NOTIFY_BROKER_ROLE_CHANGED pushes after an
	// election (RocketMQ's notifyBrokerRoleChanged=false); brokers then
	// learn from heartbeat answers. Off by default (pushes are sent).
	DisableNotify bool
	// Raft timeouts; zero fields are the library's defaults.
	Raft RaftTiming
	// SnapshotThreshold and SnapshotInterval: a snapshot is taken when this
	// many entries were applied since the last, checked at this interval
	// (defaults 8192 and 120 s, the library's); TrailingLogs entries stay
	// in the log after a snapshot (default 10240).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	TrailingLogs      uint64
	// Handshake, when set, prepares each connection Serve accepts
	// (remoting.Options.Handshake): cmd/apogee-controller passes its
	// tlsconf server's, so that brokers and admin tools reach the
	// controller under --tls-mode. Default: none (plain TCP).
	Handshake func(context.Context, net.Conn) (net.Conn, error)
	// NotifyTLS, when set, makes the NOTIFY_BROKER_ROLE_CHANGED pushes to
	// brokers TLS with this configuration (brokers in enforcing mode need
	// it). Default: plain TCP.
	NotifyTLS *tls.Config
	// RaftTLS, when set, makes Raft's transport between controllers TLS
	// (RaftTLS describes it). Every member of the group must use it or
	// none. Default: plain TCP.
	RaftTLS *RaftTLS
	// Authorize, when set, decides every request Serve receives before
	// anything else looks at it: a refused request is answered with the
	// code and remark it gives (NO_PERMISSION) and changes nothing.
	// cmd/apogee-controller passes its ACL guard's Check (acl.Guard), so
	// that under --acl only signed requests of users with admin rights on
	// the cluster (or Super users) are obeyed. Default: every request.
	Authorize func(remote net.Addr, req *protocol.Command) (ok bool, code int32, remark string)
	// Signer, when set, signs the requests this node sends: the
	// NOTIFY_BROKER_ROLE_CHANGED pushes (brokers under ACL refuse unsigned
	// ones) and Join's requests. Default: unsigned.
	Signer remoting.Signer
	// RaftAuth, when set, makes every Raft connection between controllers
	// begin with a signed preamble (RaftAuth describes it): peers that are
	// not authenticated are dropped before Raft reads them. Every member
	// must use it or none. Default: none (RaftTLS with client
	// certificates is the other way to keep strangers out).
	RaftAuth *RaftAuth
	// Logger receives the controller's events. Default slog.Default().
	Logger *slog.Logger
	// RaftLogOutput and RaftLogLevel are for the Raft library's own log
	// lines (hclog). Defaults os.Stderr and "warn". RaftLogJSON writes them
	// as one JSON object per line, as the process's --log-format json.
	RaftLogOutput io.Writer
	RaftLogLevel  string
	RaftLogJSON   bool
}

func (o Options) withDefaults() (Options, error) {
	if o.ID == "" {
		return o, errors.New("controller: Options.ID is required")
	}
	if o.DataDir == "" {
		return o, errors.New("controller: Options.DataDir is required")
	}
	if o.Advertise == "" {
		return o, errors.New("controller: Options.Advertise is required")
	}
	if o.Join {
		if len(o.Peers) > 0 {
			return o, errors.New("controller: Options.Join and Options.Peers exclude each other")
		}
		if o.RaftBind == "" && o.RaftListener == nil {
			return o, errors.New("controller: a joining node needs Options.RaftBind or Options.RaftListener")
		}
	} else {
		self := slices.IndexFunc(o.Peers, func(p Peer) bool { return p.ID == o.ID })
		if self < 0 {
			return o, fmt.Errorf("controller: id %q is not among the peers %s", o.ID, FormatPeers(o.Peers))
		}
		for _, p := range o.Peers {
			if _, port, _ := net.SplitHostPort(p.Addr); port == "0" && len(o.Peers) > 1 {
				return o, fmt.Errorf("controller: peer %s=%s: port 0 only for a group of one (the others could not reach it); "+
					"start one node alone and let the others join it", p.ID, p.Addr)
			}
		}
		if o.RaftBind == "" {
			o.RaftBind = o.Peers[self].Addr
		}
	}
	if o.Group == "" {
		o.Group = DefaultGroup
	}
	if o.HeartbeatTimeout <= 0 {
		o.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	if o.ScanInterval <= 0 {
		o.ScanInterval = DefaultScanInterval
	}
	if o.CloseGrace <= 0 {
		o.CloseGrace = DefaultCloseGrace
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.RaftLogOutput == nil {
		o.RaftLogOutput = os.Stderr
	}
	if o.RaftLogLevel == "" {
		o.RaftLogLevel = "warn"
	}
	return o, nil
}

// Node is one controller: a member of the Raft group, and the remoting
// handler brokers talk to (ServeRemoting). Only the leader decides; the
// others answer CONTROLLER_NOT_LEADER naming it (heartbeats and metadata
// are answered by every node).
type Node struct {
	opts Options
	log  *slog.Logger
	// raftAddr is this node's Raft address as its peers dial it.
	raftAddr string
	fsm      *fsm
	raft     *raft.Raft
	trans    *raft.NetworkTransport
	store    *raftboltdb.BoltStore

	live  liveness
	pool  *remoting.Pool // NOTIFY_BROKER_ROLE_CHANGED pushes
	srvMu sync.Mutex
	srv   *remoting.Server

	// leading is set once this node, leader, has applied its first entry of
	// the term (its state is then current) and cleared when it steps down.
	leading     atomic.Bool
	leaderSince atomic.Int64 // unix nanos of leading's last set
	electMu     sync.Mutex   // one election at a time (scan and requests)

	rt runtimeConfig // UPDATE_CONTROLLER_CONFIG's changes (config.go)

	notifyCh chan bool
	stop     chan struct{}
	wg       sync.WaitGroup
	closed   atomic.Bool
}

// New opens the data directory, starts the Raft member (bootstrapping the
// group from Options.Peers in a new directory) and its leadership watch. It
// does not serve brokers: call Serve.
func New(opts Options) (*Node, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := durable.MkdirAll(o.FS, o.DataDir, 0o755); err != nil {
		return nil, fmt.Errorf("controller: data directory: %w", err)
	}
	n := &Node{opts: o, log: o.Logger.With("controller", o.ID), fsm: newFSM(), stop: make(chan struct{}),
		notifyCh: make(chan bool, 16)}
	n.live.init()
	n.pool = remoting.NewPool(&remoting.ClientOptions{DialTimeout: time.Second, TLS: o.NotifyTLS, Signer: o.Signer, Options: remoting.Options{Logger: o.Logger}})
	if err := n.startRaft(); err != nil {
		n.closeParts()
		return nil, err
	}
	n.wg.Add(1)
	go n.watchLeadership()
	return n, nil
}

func (n *Node) startRaft() error {
	o := n.opts
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Output: o.RaftLogOutput, Level: hclog.LevelFromString(o.RaftLogLevel), JSONFormat: o.RaftLogJSON})
	store, err := raftboltdb.New(raftboltdb.Options{
		Path:        filepath.Join(o.DataDir, "raft.db"),
		BoltOptions: &bbolt.Options{Timeout: time.Second},
	})
	if err != nil {
		return fmt.Errorf("controller: open %s: %w", filepath.Join(o.DataDir, "raft.db"), err)
	}
	n.store = store
	// bbolt syncs its pages but not the directory entry of a new raft.db:
	// without this, a power loss could take the file (the group's log and
	// its vote) with it.
	if err := durable.SyncDir(o.FS, o.DataDir); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	logs, err := raft.NewLogCache(512, store)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	snaps, err := newSnapshotStore(o.FS, o.DataDir, n.log)
	if err != nil {
		return err
	}
	ln := o.RaftListener
	if ln == nil {
		if ln, err = net.Listen("tcp", o.RaftBind); err != nil {
			return fmt.Errorf("controller: raft listen %s: %w", o.RaftBind, err)
		}
	}
	raftAddr, err := o.raftAdvertise(ln.Addr())
	if err != nil {
		ln.Close()
		return err
	}
	adv, err := net.ResolveTCPAddr("tcp", raftAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("controller: own Raft address %s: %w", raftAddr, err)
	}
	n.raftAddr = raftAddr
	var stream raft.StreamLayer = &streamLayer{Listener: ln, adv: adv}
	if o.RaftTLS != nil {
		if stream, err = newTLSStreamLayer(ln, adv, *o.RaftTLS); err != nil {
			ln.Close()
			return err
		}
	}
	if o.RaftAuth != nil {
		if stream, err = newAuthStreamLayer(stream, *o.RaftAuth, o.ID, n.log); err != nil {
			ln.Close()
			return err
		}
	}
	// MaxRPCsInFlight 1: no pipelined replication. hashicorp/raft's
	// pipeline (the default, 2 in flight) can hang a leader's replication
	// to a follower for good: when the follower refuses an append, the
	// pipeline's consumer returns, its decoder then blocks handing over
	// the next response, and the sender blocks handing the decoder its
	// next request, inside the call that would have noticed (seen in CI as
	// a Close that never returned, both goroutines parked for 19 minutes).
	// The controller's log is a few small entries a second: synchronous
	// appends cost it nothing that matters.
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: stream, MaxPool: 3, MaxRPCsInFlight: 1, Timeout: 5 * time.Second, Logger: hl,
	})

	conf := raft.DefaultConfig()
	conf.LocalID = raft.ServerID(o.ID)
	conf.Logger = hl
	conf.NotifyCh = n.notifyCh
	if t := o.Raft.HeartbeatTimeout; t > 0 {
		conf.HeartbeatTimeout = t
	}
	if t := o.Raft.ElectionTimeout; t > 0 {
		conf.ElectionTimeout = t
	}
	if t := o.Raft.LeaderLeaseTimeout; t > 0 {
		conf.LeaderLeaseTimeout = t
	}
	if t := o.Raft.CommitTimeout; t > 0 {
		conf.CommitTimeout = t
	}
	if o.SnapshotThreshold > 0 {
		conf.SnapshotThreshold = o.SnapshotThreshold
	}
	if o.SnapshotInterval > 0 {
		conf.SnapshotInterval = o.SnapshotInterval
	}
	if o.TrailingLogs > 0 {
		conf.TrailingLogs = o.TrailingLogs
	}
	if err := raft.ValidateConfig(conf); err != nil {
		return fmt.Errorf("controller: raft configuration: %w", err)
	}
	existing, err := raft.HasExistingState(logs, store, snaps)
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	r, err := raft.NewRaft(conf, n.fsm, logs, store, snaps, n.trans)
	if err != nil {
		return fmt.Errorf("controller: start raft: %w", err)
	}
	n.raft = r
	want := raft.Configuration{}
	seed := false // a group of one at port 0: the seed of a group that grows by joins
	for _, p := range o.Peers {
		addr := p.Addr
		if p.ID == o.ID {
			addr = raftAddr
			_, port, _ := net.SplitHostPort(p.Addr)
			seed = port == "0"
		}
		want.Servers = append(want.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(addr)})
	}
	switch {
	case !existing && o.Join:
		n.log.Info("controller: waiting to be added to a group (join)", "raft", raftAddr, "dataDir", o.DataDir)
		return nil
	case !existing:
		if err := r.BootstrapCluster(want).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("controller: bootstrap: %w", err)
		}
		n.log.Info("controller: new Raft group bootstrapped", "peers", describeConfig(want), "dataDir", o.DataDir)
		return nil
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return nil
	}
	recorded := f.Configuration()
	if !o.Join && !seed && !sameMembers(recorded, want) {
		n.log.Warn("controller: --peers differs from the membership recorded in the data directory; the recorded one is used",
			"recorded", describeConfig(recorded), "peers", FormatPeers(o.Peers))
	}
	for _, s := range recorded.Servers {
		if string(s.ID) == o.ID && string(s.Address) != raftAddr {
			n.log.Warn("controller: this node's Raft address changed; its peers reach it only once the group records the new one (--join)",
				"recorded", s.Address, "now", raftAddr)
		}
	}
	return nil
}

// raftAdvertise is the Raft address peers dial this node at, given the
// address its listener bound: its --peers address (port 0 replaced by the
// bound port), or, for a joining node, the bound address with an
// unspecified host replaced by Advertise's host.
func (o Options) raftAdvertise(bound net.Addr) (string, error) {
	_, boundPort, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", fmt.Errorf("controller: raft listener %s: %w", bound, err)
	}
	if !o.Join {
		self := o.Peers[slices.IndexFunc(o.Peers, func(p Peer) bool { return p.ID == o.ID })]
		host, port, err := net.SplitHostPort(self.Addr)
		if err != nil {
			return "", fmt.Errorf("controller: own peer address %s: %w", self.Addr, err)
		}
		if port == "0" {
			port = boundPort
		}
		return net.JoinHostPort(host, port), nil
	}
	host, _, _ := net.SplitHostPort(bound.String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		h, _, err := net.SplitHostPort(o.Advertise)
		if ip := net.ParseIP(h); err != nil || h == "" || ip != nil && ip.IsUnspecified() {
			return "", fmt.Errorf("controller: the Raft listener %s is on every interface and Advertise %q names no host: "+
				"give the Raft listener a host peers can dial", bound, o.Advertise)
		}
		host = h
	}
	return net.JoinHostPort(host, boundPort), nil
}

// RaftAddr is this node's Raft address as its peers dial it.
func (n *Node) RaftAddr() string { return n.raftAddr }

// Members is the group's membership as this node's Raft configuration
// holds it ("id=raftAddress,...", FormatPeers' form).
func (n *Node) Members() string {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return ""
	}
	return describeConfig(f.Configuration())
}

func sameMembers(a, b raft.Configuration) bool {
	if len(a.Servers) != len(b.Servers) {
		return false
	}
	for _, s := range a.Servers {
		if !slices.ContainsFunc(b.Servers, func(t raft.Server) bool { return t.ID == s.ID && t.Address == s.Address }) {
			return false
		}
	}
	return true
}

func describeConfig(c raft.Configuration) string {
	parts := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		parts[i] = string(s.ID) + "=" + string(s.Address)
	}
	return strings.Join(parts, ",")
}

// streamLayer is Raft's transport on a listener the node was given (tests
// listen on port 0 before they know every peer's address).
type streamLayer struct {
	net.Listener
	adv net.Addr
}

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	return net.DialTimeout("tcp", string(addr), timeout)
}

func (s *streamLayer) Addr() net.Addr { return s.adv }

// watchLeadership follows the Raft library's leadership signals: on
// becoming leader it commits an entry of its own (RocketMQ's initial
// proposal: the state machine is then current, and the entry announces the
// node's remoting address), then serves as leader and scans for dead
// masters until it steps down.
func (n *Node) watchLeadership() {
	defer n.wg.Done()
	var term *leaderTerm
	stepDown := func() {
		if term != nil {
			term.cancel()
			<-term.done
			term = nil
		}
		n.leading.Store(false)
	}
	defer stepDown()
	for {
		select {
		case <-n.stop:
			return
		case leader := <-n.notifyCh:
			stepDown()
			if !leader {
				n.log.Info("controller: no longer the leader")
				continue
			}
			term = n.startTerm()
		}
	}
}

// leaderTerm is one run of lead.
type leaderTerm struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (n *Node) startTerm() *leaderTerm {
	ctx, cancel := context.WithCancel(context.Background())
	t := &leaderTerm{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		n.lead(ctx)
	}()
	return t
}

// lead runs while this node is the Raft leader.
func (n *Node) lead(ctx context.Context) {
	for {
		res, err := n.propose(&command{Op: opAnnounce, Node: n.opts.ID, Addr: n.opts.Advertise}, true)
		if err == nil && res.Code == 0 {
			break
		}
		n.log.Warn("controller: leader's first entry failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		if n.raft.State() != raft.Leader {
			return
		}
	}
	n.leaderSince.Store(time.Now().UnixNano())
	n.leading.Store(true)
	n.log.Info("controller: leading", "advertise", n.opts.Advertise)
	// A first scan at once: a master whose connection closed while this
	// node followed is known dead already (liveness.go).
	n.scan()
	t := time.NewTicker(n.opts.ScanInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n.scan()
		}
	}
}

// errNotLeader: a proposal on a node that is not (or no longer) the
// leader; the outcome of one that lost leadership while in flight is not
// known (a retry on the new leader decides it).
var errNotLeader = errors.New("controller: not the leader")

// propose appends c to the Raft log and returns its result once applied
// here. Unless initial, it is refused before the leader is ready.
func (n *Node) propose(c *command, initial bool) (*result, error) {
	if !initial && !n.leading.Load() {
		return nil, errNotLeader
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("controller: encode command: %w", err)
	}
	f := n.raft.Apply(b, 5*time.Second)
	if err := f.Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			return nil, fmt.Errorf("%w: %w", errNotLeader, err)
		}
		return nil, fmt.Errorf("controller: raft apply: %w", err)
	}
	res, _ := f.Response().(*result)
	if res == nil {
		return nil, errors.New("controller: raft apply returned no result")
	}
	return res, nil
}

// verifyLeader confirms, with a round of the Raft group, that this node is
// still the leader: a read answered after it reflects every write
// acknowledged before it.
func (n *Node) verifyLeader() error {
	if !n.leading.Load() {
		return errNotLeader
	}
	if err := n.raft.VerifyLeader().Error(); err != nil {
		return fmt.Errorf("%w: %w", errNotLeader, err)
	}
	return nil
}

// leader returns the current leader's id and remoting address as this
// node knows them ("" unknown).
func (n *Node) leader() (id, addr string) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	if string(lid) == n.opts.ID {
		return n.opts.ID, n.opts.Advertise
	}
	return string(lid), n.fsm.nodeAddr(string(lid))
}

// Status describes the node for tests and operators.
type Status struct {
	ID            string
	Leader        bool // leading: the leader, with a current state
	LeaderID      string
	LeaderAddress string
	AppliedIndex  uint64
}

// Status reports the node's view of the group.
func (n *Node) Status() Status {
	id, addr := n.leader()
	return Status{ID: n.opts.ID, Leader: n.leading.Load(), LeaderID: id, LeaderAddress: addr, AppliedIndex: n.raft.AppliedIndex()}
}

// Group returns a copy of a broker group's replicated state as this node
// has applied it (nil if unknown).
func (n *Node) Group(name string) *Group { return n.fsm.group(name) }

// Snapshot asks the Raft library for a snapshot now (and so compacts the
// log up to it, keeping TrailingLogs entries).
func (n *Node) Snapshot() error { return n.raft.Snapshot().Error() }

// Serve answers brokers' remoting requests on ln until Close.
func (n *Node) Serve(ln net.Listener) error {
	srv := remoting.NewServer(n, &remoting.Options{Logger: n.opts.Logger, Handshake: n.opts.Handshake})
	srv.OnClose(n.connClosed)
	n.srvMu.Lock()
	if n.closed.Load() {
		n.srvMu.Unlock()
		ln.Close()
		return remoting.ErrServerClosed
	}
	n.srv = srv
	n.srvMu.Unlock()
	err := srv.Serve(ln)
	if n.closed.Load() {
		return nil
	}
	return err
}

// Close stops serving, hands leadership to another node when it leads (so
// the group elects no later than it must), and stops the Raft member.
func (n *Node) Close() error {
	if n.closed.Swap(true) {
		return nil
	}
	n.srvMu.Lock()
	if n.srv != nil {
		n.srv.Close()
	}
	n.srvMu.Unlock()
	if n.raft != nil && n.raft.State() == raft.Leader && n.groupSize() > 1 {
		if err := n.raft.LeadershipTransfer().Error(); err != nil {
			n.log.Warn("controller: leadership transfer before stopping failed", "err", err)
		}
	}
	close(n.stop)
	n.wg.Wait()
	return n.closeParts()
}

// groupSize is the number of members in this node's configuration.
func (n *Node) groupSize() int {
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	return len(f.Configuration().Servers)
}

func (n *Node) closeParts() error {
	var errs []error
	if n.raft != nil {
		errs = append(errs, n.raft.Shutdown().Error())
	}
	if n.trans != nil {
		errs = append(errs, n.trans.Close())
	}
	if n.store != nil {
		errs = append(errs, n.store.Close())
	}
	n.pool.Close()
	return errors.Join(errs...)
}

// groupInfo answers for a group as the wire carries it.
func syncStateSetOf(g *Group) wire.SyncStateSet {
	return wire.SyncStateSet{Set: g.SyncStateSet, Epoch: g.SyncStateSetEpoch}
}
