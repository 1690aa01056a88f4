// Package client is a broker's side of the controller (RocketMQ 5's
// controller mode): it registers the broker with the controller group,
// sends its heartbeats, asks for elections and SyncStateSet changes, reads
// a group's replica info, and follows the controller leader from node to
// node. It imports neither the broker nor the store: the broker wires it
// (heartbeat figures in through Options.Status, role changes out through
// Options.OnRoleChange).
//
// # Following the leader
//
// Requests go to the leader the client last found. A node that is not the
// leader answers CONTROLLER_NOT_LEADER, naming the leader when it knows it:
// the client goes there next; without a name, or when a node cannot be
// reached, it tries the next address of Options.Addrs, round after round
// (with a pause of RetryInterval between rounds) until the request's
// context ends.
//
// # Heartbeats and role changes
//
// StartHeartbeats sends BROKER_HEARTBEAT to every controller address
// every HeartbeatInterval, each on its own connection and goroutine, and at
// once after a connection was lost: every node then knows the broker is
// alive, so a newly elected controller leader does not mistake it for dead.
// Each answer carries the group's master and epochs (Apogee's controller
// adds them); so do registrations, elections, replica-info answers and the
// controller's NOTIFY_BROKER_ROLE_CHANGED pushes (HandleNotify). Whenever
// one of them shows a later (master epoch, SyncStateSet epoch) than the
// client knew, OnRoleChange is told, on a goroutine of the client's, one
// call at a time, with the latest state (a burst of changes may be told as
// its last one).
package client

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apogeemq/apogee/internal/logthrottle"

	"github.com/apogeemq/apogee/controller/wire"
	"github.com/apogeemq/apogee/protocol"
	"github.com/apogeemq/apogee/remoting"
)

// Error is an answer of the controller other than success: its response
// code (wire.Resp* or protocol.Resp*) and remark.
type Error struct {
	Op     string
	Code   int32
	Remark string
}

func (e *Error) Error() string {
	return fmt.Sprintf("controller: %s: %s (%d): %s", e.Op, wire.RespName(e.Code), e.Code, e.Remark)
}

// Code returns the controller's response code in err (0 if err is not an
// *Error).
func Code(err error) int32 {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// IsFenced reports whether err is the controller refusing a request made
// with a stale view: another master, or older epochs (re-read the replica
// info and decide again).
func IsFenced(err error) bool {
	switch Code(err) {
	case wire.RespFencedMasterEpoch, wire.RespFencedSyncStateSetEpoch, wire.RespInvalidMaster:
		return true
	}
	return false
}

// ErrNoController: no controller answered (every address failed or
// answered CONTROLLER_NOT_LEADER) before the context ended.
var ErrNoController = errors.New("controller: no controller leader reachable")

// HeartbeatStatus is what a heartbeat reports about the broker's log.
type HeartbeatStatus struct {
	// Epoch is the last epoch of the broker's epoch file (-1 none);
	// MaxOffset its commit log's end; ConfirmOffset what it knows to be
	// replicated (-1 unknown).
	Epoch                    int32
	MaxOffset, ConfirmOffset int64
}

// State is a group's master, epochs and SyncStateSet as the client last
// learned them.
type State struct {
	wire.MasterInfo
	// SyncStateSet, ascending; nil when the source carried none.
	SyncStateSet []int64
}

// newer reports whether s is later than t.
func (s State) newer(t State) bool {
	if s.MasterEpoch != t.MasterEpoch {
		return s.MasterEpoch > t.MasterEpoch
	}
	return s.SyncStateSetEpoch > t.SyncStateSetEpoch
}

// Options configure a Client. Zero values mean the defaults given.
type Options struct {
	// Addrs are the controllers' remoting addresses (RocketMQ's
	// controllerAddr, "host:port;host:port", split). Required.
	Addrs []string
	// Cluster and Broker name the broker's group; Addr is the broker's own
	// remoting address (where NOTIFY_BROKER_ROLE_CHANGED arrives). Required.
	Cluster, Broker, Addr string
	// HeartbeatInterval: default 1 s (RocketMQ's brokerHeartbeatInterval).
	HeartbeatInterval time.Duration
	// HeartbeatTimeout, when set, is sent with every heartbeat: the
	// controller then declares the broker dead after it instead of its own
	// timeout.
	HeartbeatTimeout time.Duration
	// ElectionPriority: lower wins among candidates with the same epoch
	// and offset (0: none).
	ElectionPriority int32
	// RequestTimeout bounds one attempt at one controller. Default 3 s.
	RequestTimeout time.Duration
	// RetryInterval is the pause after a round of every address failed.
	// Default 200 ms.
	RetryInterval time.Duration
	// Status supplies each heartbeat's figures. Default: epoch -1 and
	// offsets -1.
	Status func() HeartbeatStatus
	// OnRoleChange is told of every later state the client learns (see the
	// package doc). It must not block for long.
	OnRoleChange func(State)
	// TLS, when set, makes the connections to the controllers TLS with
	// this configuration (a controller run with --tls-mode enforcing
	// refuses plain ones). Without a ServerName the controller's
	// certificate is verified for the host of its address. Default: plain.
	TLS *tls.Config
	// Signer, when set, signs every request (RocketMQ's AccessKey and
	// Signature): a controller with access control on refuses unsigned
	// ones with NO_PERMISSION. Default nil: unsigned.
	Signer remoting.Signer
	// Logger. Default slog.Default().
	Logger *slog.Logger
}

// Client talks to a controller group on a broker's behalf. Its methods are
// safe for concurrent use.
type Client struct {
	opts Options
	pool *remoting.Pool
	log  *slog.Logger

	leader atomic.Pointer[string] // the address that last answered as leader

	mu      sync.Mutex
	state   State
	haveAny bool
	changed chan struct{} // cap 1: the deliverer has something to tell

	hbStarted atomic.Bool
	brokerID  atomic.Int64
	stop      chan struct{}
	wg        sync.WaitGroup
	closed    atomic.Bool
}

// New returns a client; it connects lazily.
func New(opts Options) (*Client, error) {
	if len(opts.Addrs) == 0 {
		return nil, errors.New("controller client: no controller addresses")
	}
	if opts.Broker == "" || opts.Addr == "" {
		return nil, errors.New("controller client: Broker and Addr are required")
	}
	if opts.HeartbeatInterval <= 0 {
		opts.HeartbeatInterval = time.Second
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 3 * time.Second
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 200 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Client{opts: opts, log: opts.Logger.With("broker", opts.Broker), changed: make(chan struct{}, 1), stop: make(chan struct{}),
		pool: remoting.NewPool(&remoting.ClientOptions{DialTimeout: opts.RequestTimeout, TLS: opts.TLS, Signer: opts.Signer, Options: remoting.Options{Logger: opts.Logger}})}
	c.state.MasterEpoch, c.state.SyncStateSetEpoch = -1, -1
	c.wg.Add(1)
	go c.deliver()
	return c, nil
}

// Close stops the heartbeats and closes the connections.
func (c *Client) Close() error {
	if c.closed.Swap(true) {
		return nil
	}
	close(c.stop)
	c.pool.Close()
	c.wg.Wait()
	return nil
}

// Leader is the address of the controller that last answered as leader
// ("" none yet).
func (c *Client) Leader() string {
	if p := c.leader.Load(); p != nil {
		return *p
	}
	return ""
}

// State returns what the client last learned of its group (ok false before
// anything was learned).
func (c *Client) State() (State, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state, c.haveAny
}

// observe records s if it is later than what the client knew.
func (c *Client) observe(s State) {
	c.mu.Lock()
	if c.haveAny && !s.newer(c.state) {
		if s.MasterEpoch == c.state.MasterEpoch && s.SyncStateSetEpoch == c.state.SyncStateSetEpoch &&
			c.state.SyncStateSet == nil && s.SyncStateSet != nil {
			c.state.SyncStateSet = s.SyncStateSet // same state, now with its set
		}
		c.mu.Unlock()
		return
	}
	c.state, c.haveAny = s, true
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *Client) deliver() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case <-c.changed:
		}
		s, _ := c.State()
		if c.opts.OnRoleChange != nil {
			c.opts.OnRoleChange(s)
		}
	}
}

// do sends the request build encodes to the leader, following it, until an
// answer other than CONTROLLER_NOT_LEADER arrives or ctx ends.
func (c *Client) do(ctx context.Context, op string, build func(*protocol.Command)) (*protocol.Command, error) {
	var last error
	for {
		tried := map[string]bool{}
		next := c.Leader()
		for i := 0; ; {
			addr := next
			next = ""
			if addr == "" || tried[addr] {
				for i < len(c.opts.Addrs) && tried[c.opts.Addrs[i]] {
					i++
				}
				if i == len(c.opts.Addrs) {
					break
				}
				addr = c.opts.Addrs[i]
			}
			tried[addr] = true
			resp, err := c.invoke(ctx, addr, build)
			if err != nil {
				last = err
				if ctx.Err() != nil {
					return nil, fmt.Errorf("%w: %s: %w", ErrNoController, op, errors.Join(last, ctx.Err()))
				}
				continue
			}
			if resp.Code == wire.RespNotLeader {
				_, hint := wire.LeaderHint(resp)
				last = &Error{Op: op, Code: resp.Code, Remark: string(resp.Remark)}
				next = hint
				continue
			}
			c.leader.Store(&addr)
			return resp, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %s: %w", ErrNoController, op, errors.Join(last, ctx.Err()))
		case <-c.stop:
			return nil, fmt.Errorf("%w: %s: client closed", ErrNoController, op)
		case <-time.After(c.opts.RetryInterval):
		}
	}
}

func (c *Client) invoke(ctx context.Context, addr string, build func(*protocol.Command)) (*protocol.Command, error) {
	actx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	cl, err := c.pool.Get(actx, addr)
	if err != nil {
		return nil, err
	}
	var req protocol.Command
	build(&req)
	return cl.Invoke(actx, &req)
}

func answerError(op string, resp *protocol.Command) error {
	if resp.Code == protocol.RespSuccess {
		return nil
	}
	return &Error{Op: op, Code: resp.Code, Remark: string(resp.Remark)}
}

// stateFrom reads the master info in resp's header and, when body is set,
// the SyncStateSet in its body.
func stateFrom(resp *protocol.Command, body bool) (State, error) {
	var s State
	if err := s.MasterInfo.Decode(&resp.Ext); err != nil {
		return s, err
	}
	if body && len(resp.Body) > 0 {
		set, err := wire.DecodeSyncStateSet(resp.Body)
		if err != nil {
			return s, err
		}
		s.SyncStateSet = set.Set
		s.SyncStateSetEpoch = set.Epoch
	}
	return s, nil
}

// Registration is what Register learned.
type Registration struct {
	// ID is the broker id the group gave this broker.
	ID int64
	// State is the group's: its master only while that master is alive
	// (MasterID 0 otherwise: ask for an election).
	State State
}

// Register gives the broker an id in its group and registers it
// (RocketMQ's GET_NEXT_BROKER_ID, APPLY_BROKER_ID, REGISTER_BROKER). With
// id 0 the controller assigns the next free id; otherwise the broker claims
// id, which must be free or already its own. token tells this broker from
// another that claims the same id: keep it with the broker's data (its
// check code is "address;token").
func (c *Client) Register(ctx context.Context, id int64, token string) (Registration, error) {
	check := c.opts.Addr + ";" + token
	assigned := id == 0
	for tries := 0; ; tries++ {
		if assigned {
			resp, err := c.do(ctx, "get next broker id", func(cmd *protocol.Command) {
				r := wire.BrokerIDRequest{ClusterName: c.opts.Cluster, BrokerName: c.opts.Broker}
				r.EncodeNext(cmd)
			})
			if err != nil {
				return Registration{}, err
			}
			if err := answerError("get next broker id", resp); err != nil {
				return Registration{}, err
			}
			v, _ := resp.Ext.GetString("nextBrokerId")
			if id, err = strconv.ParseInt(v, 10, 64); err != nil || id < wire.FirstBrokerID {
				return Registration{}, fmt.Errorf("controller: get next broker id: bad answer %q", v)
			}
		}
		resp, err := c.do(ctx, "apply broker id", func(cmd *protocol.Command) {
			r := wire.BrokerIDRequest{ClusterName: c.opts.Cluster, BrokerName: c.opts.Broker, AppliedID: id, CheckCode: check}
			r.EncodeApply(cmd)
		})
		if err != nil {
			return Registration{}, err
		}
		if err := answerError("apply broker id", resp); err != nil {
			// Another broker took the offered id meanwhile: ask again.
			if assigned && Code(err) == wire.RespBrokerIDInvalid && tries < 5 {
				continue
			}
			return Registration{}, err
		}
		break
	}
	resp, err := c.do(ctx, "register broker", func(cmd *protocol.Command) {
		r := wire.RegisterBrokerRequest{ClusterName: c.opts.Cluster, BrokerName: c.opts.Broker, BrokerID: id, BrokerAddress: c.opts.Addr}
		r.Encode(cmd)
	})
	if err != nil {
		return Registration{}, err
	}
	if err := answerError("register broker", resp); err != nil {
		return Registration{}, err
	}
	s, err := stateFrom(resp, true)
	if err != nil {
		return Registration{}, err
	}
	c.brokerID.Store(id)
	if s.MasterID != 0 {
		c.observe(s)
	}
	return Registration{ID: id, State: s}, nil
}

// ElectResult is an election's answer.
type ElectResult struct {
	// Code is protocol.RespSuccess (a master was elected) or
	// wire.RespMasterStillExist (the master is alive; State is the current
	// one).
	Code  int32
	State State
	// Members are the group's brokers by id (on success).
	Members map[int64]string
	// UncleanLossBytes is set when the controller chose a master outside
	// the SyncStateSet (an option of the controller): how far behind the
	// best in-sync replica's last report the new master was.
	UncleanLossBytes int64
	Unclean          bool
}

// ElectMaster asks for an election in the client's group: brokerID asks for
// itself (it becomes the first master of a group that never had one);
// designate asks for brokerID whatever the policy prefers (an
// administrator's request: it must be an alive candidate).
func (c *Client) ElectMaster(ctx context.Context, brokerID int64, designate bool) (ElectResult, error) {
	resp, err := c.do(ctx, "elect master", func(cmd *protocol.Command) {
		r := wire.ElectMasterRequest{ClusterName: c.opts.Cluster, BrokerName: c.opts.Broker, BrokerID: brokerID, Designate: designate}
		r.Encode(cmd)
	})
	if err != nil {
		return ElectResult{}, err
	}
	if resp.Code != protocol.RespSuccess && resp.Code != wire.RespMasterStillExist {
		return ElectResult{}, answerError("elect master", resp)
	}
	s, err := stateFrom(resp, false)
	if err != nil {
		return ElectResult{}, err
	}
	out := ElectResult{Code: resp.Code}
	var body wire.ElectMasterBody
	if len(resp.Body) > 0 {
		if err := json.Unmarshal(resp.Body, &body); err != nil {
			return ElectResult{}, fmt.Errorf("controller: elect master: body: %w", err)
		}
		s.SyncStateSet = body.SyncStateSet
		if body.BrokerMemberGroup != nil {
			out.Members = body.BrokerMemberGroup.BrokerAddrs
		}
	}
	if v, ok := resp.Ext.GetString("uncleanLossBytes"); ok {
		out.Unclean = true
		out.UncleanLossBytes, _ = strconv.ParseInt(v, 10, 64)
	}
	out.State = s
	c.observe(s)
	return out, nil
}

// AlterSyncStateSet asks, as master masterID at masterEpoch, to replace
// the SyncStateSet whose epoch is set.Epoch by set.Set. It returns the new
// set and its epoch; a stale view is refused (IsFenced).
func (c *Client) AlterSyncStateSet(ctx context.Context, masterID int64, masterEpoch int32, set wire.SyncStateSet) (wire.SyncStateSet, error) {
	resp, err := c.do(ctx, "alter SyncStateSet", func(cmd *protocol.Command) {
		r := wire.AlterSyncStateSetRequest{BrokerName: c.opts.Broker, MasterID: masterID, MasterEpoch: masterEpoch, Set: set}
		r.Encode(cmd)
	})
	if err != nil {
		return wire.SyncStateSet{}, err
	}
	if err := answerError("alter SyncStateSet", resp); err != nil {
		return wire.SyncStateSet{}, err
	}
	out, err := wire.DecodeSyncStateSet(resp.Body)
	if err != nil {
		return wire.SyncStateSet{}, err
	}
	c.mu.Lock()
	s := c.state
	c.mu.Unlock()
	if s.MasterEpoch == masterEpoch && s.MasterID == masterID {
		s.SyncStateSet, s.SyncStateSetEpoch = out.Set, out.Epoch
		c.observe(s)
	}
	return out, nil
}

// GetReplicaInfo reads a group's master, epochs and SyncStateSet (broker
// "" is the client's own group).
func (c *Client) GetReplicaInfo(ctx context.Context, broker string) (State, error) {
	if broker == "" {
		broker = c.opts.Broker
	}
	resp, err := c.do(ctx, "get replica info", func(cmd *protocol.Command) {
		cmd.InitRequest(wire.ReqGetReplicaInfo, 0)
		cmd.Ext.SetString("brokerName", broker)
	})
	if err != nil {
		return State{}, err
	}
	if err := answerError("get replica info", resp); err != nil {
		return State{}, err
	}
	s, err := stateFrom(resp, true)
	if err == nil && broker == c.opts.Broker {
		c.observe(s)
	}
	return s, err
}

// GetSyncStateData reads the replicas of the named groups
// (CONTROLLER_GET_SYNC_STATE_DATA).
func (c *Client) GetSyncStateData(ctx context.Context, brokers ...string) (wire.BrokerReplicasInfo, error) {
	body, _ := json.Marshal(brokers)
	resp, err := c.do(ctx, "get sync state data", func(cmd *protocol.Command) {
		cmd.InitRequest(wire.ReqGetSyncStateData, 0)
		cmd.Body = body
	})
	var out wire.BrokerReplicasInfo
	if err != nil {
		return out, err
	}
	if err := answerError("get sync state data", resp); err != nil {
		return out, err
	}
	if err := json.Unmarshal(resp.Body, &out); err != nil {
		return out, fmt.Errorf("controller: get sync state data: body: %w", err)
	}
	return out, nil
}

// Metadata asks the controller at addr for its view of the Raft group.
func (c *Client) Metadata(ctx context.Context, addr string) (wire.Metadata, error) {
	resp, err := c.invoke(ctx, addr, func(cmd *protocol.Command) { cmd.InitRequest(wire.ReqGetMetadataInfo, 0) })
	var m wire.Metadata
	if err != nil {
		return m, err
	}
	if err := answerError("get metadata", resp); err != nil {
		return m, err
	}
	return m, m.Decode(&resp.Ext)
}

// HandleNotify takes a NOTIFY_BROKER_ROLE_CHANGED request the broker's
// remoting server received (the broker routes code
// wire.ReqNotifyBrokerRoleChanged here).
func (c *Client) HandleNotify(req *protocol.Command) error {
	var rc wire.RoleChange
	if err := rc.Decode(req); err != nil {
		return err
	}
	c.observe(State{MasterInfo: rc.MasterInfo, SyncStateSet: rc.SyncStateSet})
	return nil
}

// ServeRemoting makes the client a remoting.Handler for a listener of its
// own (tests, or a broker that gives the controller a separate address):
// it takes NOTIFY_BROKER_ROLE_CHANGED and refuses everything else.
func (c *Client) ServeRemoting(_ *remoting.Conn, req *protocol.Command, resp *remoting.Response) remoting.Action {
	if req.Code != wire.ReqNotifyBrokerRoleChanged {
		resp.Cmd.Code = protocol.RespRequestCodeNotSupported
		return remoting.Reply
	}
	if err := c.HandleNotify(req); err != nil {
		resp.Cmd.Code = wire.RespInvalidRequest
		resp.Cmd.SetRemark(err.Error())
	}
	return remoting.Reply
}

// StartHeartbeats starts sending BROKER_HEARTBEAT for broker id to every
// controller, until Close (a second call does nothing).
func (c *Client) StartHeartbeats(id int64) {
	if c.hbStarted.Swap(true) {
		return
	}
	c.brokerID.Store(id)
	for _, addr := range c.opts.Addrs {
		c.wg.Add(1)
		go c.heartbeatLoop(addr)
	}
}

func (c *Client) heartbeatLoop(addr string) {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.HeartbeatInterval)
	defer t.Stop()
	var resp protocol.Command
	denied := false // the last answer was NO_PERMISSION (logged once per run of them)
	for {
		var lost <-chan struct{}
		ctx, cancel := context.WithTimeout(context.Background(), min(c.opts.RequestTimeout, c.opts.HeartbeatInterval*3))
		cl, err := c.pool.Get(ctx, addr)
		if err == nil {
			lost = cl.Done()
			var req protocol.Command
			c.heartbeatRequest().Encode(&req)
			if err = cl.InvokeInto(ctx, &req, &resp); err == nil {
				switch {
				case resp.Code == protocol.RespNoPermission && !denied:
					denied = true
					c.log.Error("controller client: the controller refuses this broker's heartbeats (NO_PERMISSION): it runs with access control; "+
						c.signHint(), "controller", addr, "remark", string(resp.Remark))
				case resp.Code == protocol.RespNoPermission:
				default:
					denied = false
					c.heartbeatAnswer(addr, &resp)
				}
			}
		}
		cancel()
		if err != nil {
			c.log.Debug("controller client: heartbeat failed", "controller", addr, "err", err)
		}
		select {
		case <-c.stop:
			return
		case <-t.C:
		case <-lost:
			// The connection went: reconnect and tell the controller at
			// once that the broker is still here.
			select {
			case <-c.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

// signHint tells an operator what to do about a controller refusing the
// broker's requests for want of permission.
func (c *Client) signHint() string {
	if c.opts.Signer == nil {
		return "the broker signs nothing: set innerClientAuthenticationCredentials in broker.conf " +
			`({"accessKey":"...","secretKey":"..."}) to a user with admin rights (a Super user) in the controllers' ACL file`
	}
	return "give the user of the broker's innerClientAuthenticationCredentials admin rights (a Super user) in the controllers' ACL file, or fix the keys in broker.conf"
}

func (c *Client) heartbeatRequest() *wire.HeartbeatRequest {
	st := HeartbeatStatus{Epoch: -1, MaxOffset: -1, ConfirmOffset: -1}
	if c.opts.Status != nil {
		st = c.opts.Status()
	}
	return &wire.HeartbeatRequest{ClusterName: c.opts.Cluster, BrokerName: c.opts.Broker, BrokerAddr: c.opts.Addr,
		BrokerID: c.brokerID.Load(), Epoch: st.Epoch, MaxOffset: st.MaxOffset, ConfirmOffset: st.ConfirmOffset,
		HeartbeatTimeoutMillis: c.opts.HeartbeatTimeout.Milliseconds(), ElectionPriority: c.opts.ElectionPriority}
}

// heartbeatLogs throttles refused heartbeats (one a second per
// controller): one line per client, controller and code a minute, with
// the count of the ones held back.
var heartbeatLogs = logthrottle.New(time.Minute)

func (c *Client) heartbeatAnswer(addr string, resp *protocol.Command) {
	if resp.Code != protocol.RespSuccess {
		heartbeatLogs.Warn(c.log, fmt.Sprintf("%p|%s|%d", c, addr, resp.Code), "controller client: heartbeat refused", "controller", addr,
			"code", wire.RespName(resp.Code), "remark", string(resp.Remark))
		return
	}
	if _, ok := resp.Ext.Get("masterEpoch"); ok {
		if s, err := stateFrom(resp, true); err == nil {
			c.observe(s)
		}
	}
	if a, ok := resp.Ext.GetString("leaderAddress"); ok && a != "" && c.Leader() == "" {
		c.leader.Store(&a)
	}
}
