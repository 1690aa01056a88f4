// Package node is the broker process's composition root: a Node owns the
// broker (the store, the messaging core and the remoting front end, package
// broker) and attaches, as its Options ask, every other front end and
// service on that one core: the HA stream's listener, the gRPC front end
// (broker/grpcfe), the embedded name server, the operator's HTTP port
// (Prometheus metrics and the dashboard) and, in controller mode, the
// controller client (broker/ctrlmode), which changes the broker's role in
// place. Each attachment starts and stops on its own and reports its own
// errors; the node's owner (cmd/apogee-broker) binds the listeners, which
// lets it name the flag that moves a port in use.
//
// # Invariants
//
//  1. One core for the node's life: a role change (controller mode) never
//     replaces it, so every front end and service keeps serving, in every
//     role, and no client connection is closed by a role change.
//  2. Start opens the broker, then attaches in order (the HA listener, the
//     embedded name server, the gRPC front end, the operator's port, the
//     remoting listener, the controller client); a failure stops what was
//     attached, in reverse, and closes every listener the options gave.
//  3. Shutdown stops the attachments in reverse order (the controller client
//     first: no role change begins after it), then the broker; it returns
//     every error met, each wrapped with its attachment's name.
//  4. Every connection any listener of the node accepts counts against the
//     process's connection limit (remoting.SharedConnLimit: in all, per
//     source, and the file-descriptor reserve once the owner called its
//     ReserveFDs) before anything is read from it: the remoting and the
//     embedded name server's servers count their own, and the node wraps
//     the HA, gRPC and operator listeners with remoting.LimitListener (so
//     their Accept also backs off when descriptors run out).
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/ctrlmode"
	"github.com/apogeemq/apogee/broker/grpcfe"
	"github.com/apogeemq/apogee/ha"
	"github.com/apogeemq/apogee/namesrv"
	"github.com/apogeemq/apogee/remoting"
)

// Options configure a Node: one struct per attachment; a nil one is not
// attached.
type Options struct {
	// Broker configures the store, the core and the remoting front end.
	// In controller mode the role fields are the controller client's.
	Broker broker.Options
	// Listener is the remoting listener. Required.
	Listener net.Listener
	// HAListener serves the HA stream (a master's slaves connect there; in
	// controller mode every member has one, for when it is master).
	HAListener net.Listener
	// Namesrv attaches the embedded name server.
	Namesrv *Namesrv
	// GRPC attaches RocketMQ 5's gRPC front end.
	GRPC *GRPC
	// Operator attaches the operator's HTTP port (metrics and dashboard).
	Operator *Operator
	// Controller runs the broker in controller mode: the controller group
	// names its role, which changes in place.
	Controller *ctrlmode.Options
	// Logger. Default Broker.Logger, else slog.Default().
	Logger *slog.Logger
}

// Namesrv is the embedded name server's attachment.
type Namesrv struct {
	Listener net.Listener
	// Remoting configures its server (TLS handshake, limits); nil: defaults.
	Remoting *remoting.Options
}

// GRPC is the gRPC front end's attachment.
type GRPC struct {
	Listener net.Listener
	// Options are the front end's; Routes, when nil, gives the routes the
	// embedded name server knows (each other broker of the topic at its host, with this member's gRPC port).
	Options grpcfe.Options
}

// Operator is the operator port's attachment.
type Operator struct {
	Listener net.Listener
	// Handler makes what the port serves from the running node (called
	// once, after the front ends are attached). A handler that is an
	// io.Closer is closed at shutdown, after the port stops serving.
	Handler func(*Node) (http.Handler, error)
	// Wrap, when set, wraps the listener (TLS in the broker's mode).
	Wrap func(net.Listener) net.Listener
}

// Node is a running broker with its attachments.
type Node struct {
	opts Options
	log  *slog.Logger

	b       *broker.Broker
	ctl     *ctrlmode.Node
	grpc    *grpcfe.Server
	classic classicEndpoints // a classic member's gRPC endpoints (classic.go)

	mu       sync.Mutex
	attached []attachment // in start order
	errc     chan error   // a listener that stopped serving
	nsCancel context.CancelFunc
	closed   bool
}

// attachment is one started front end or service.
type attachment struct {
	name string
	stop func(context.Context) error
}

// Start opens the broker and attaches what opts asks for (see the
// package doc's invariants for the order). On an error every listener in
// opts is closed.
func Start(opts Options) (_ *Node, err error) {
	if opts.Listener == nil {
		return nil, errors.New("node: Listener is required")
	}
	if opts.Logger == nil {
		opts.Logger = opts.Broker.Core.Logger
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Broker.Core.Logger == nil {
		opts.Broker.Core.Logger = opts.Logger
	}
	n := &Node{opts: opts, log: opts.Logger, errc: make(chan error, 8)}
	defer func() {
		if err != nil {
			n.closeListeners()
		}
	}()
	bo := opts.Broker
	if opts.GRPC != nil && bo.GRPCAdvertiseAddr == "" {
		bo.GRPCAdvertiseAddr = grpcAddr(opts.GRPC)
	}
	if opts.Controller != nil {
		co := *opts.Controller
		if co.Signer == nil {
			// The broker's own credentials sign its requests to the
			// controllers and to its master too.
			co.Signer = bo.InnerSigner
		}
		if co.Logger == nil {
			co.Logger = opts.Logger
		}
		if opts.GRPC != nil {
			// Every member is a gRPC endpoint: it forwards to the master
			// what only the master serves, and routes name every member.
			co.GRPCAddr = bo.GRPCAdvertiseAddr
			co.OnMasterChange = func() {
				if gs := n.grpcServer(); gs != nil {
					gs.MasterChanged()
				}
			}
		}
		if n.ctl, err = ctrlmode.New(co); err != nil {
			return nil, err
		}
		bo = n.ctl.BrokerOptions(bo)
	}
	if n.b, err = broker.New(bo); err != nil {
		if n.ctl != nil {
			n.ctl.Shutdown(context.Background())
		}
		return nil, err
	}
	fail := func(e error) (*Node, error) {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if serr := n.Shutdown(ctx); serr != nil {
			n.log.Warn("node: stopping after a failed start", "err", serr)
		}
		return nil, e
	}
	if opts.HAListener != nil {
		n.attachHA(opts.HAListener)
	}
	if opts.Namesrv != nil {
		n.attachNamesrv(opts.Namesrv)
	}
	if opts.GRPC != nil {
		if err := n.attachGRPC(opts.GRPC); err != nil {
			return fail(err)
		}
	}
	if opts.Operator != nil {
		if err := n.attachOperator(opts.Operator); err != nil {
			return fail(err)
		}
	}
	n.attachRemoting(opts.Listener)
	if n.ctl != nil {
		n.ctl.Start(n.b)
		n.attach("controller client", n.ctl.Shutdown)
	}
	return n, nil
}

// stopTimeout bounds the stop of a node whose start failed.
const stopTimeout = 30 * time.Second

func (n *Node) attach(name string, stop func(context.Context) error) {
	n.mu.Lock()
	n.attached = append(n.attached, attachment{name: name, stop: stop})
	n.mu.Unlock()
}

// serve runs fn on its own goroutine and reports its failure on Err,
// unless the node is stopping.
func (n *Node) serve(name string, fn func() error) {
	go func() {
		err := fn()
		n.mu.Lock()
		closed := n.closed
		n.mu.Unlock()
		if err == nil || closed || errors.Is(err, net.ErrClosed) || errors.Is(err, remoting.ErrServerClosed) ||
			errors.Is(err, ha.ErrMasterClosed) || errors.Is(err, http.ErrServerClosed) {
			return
		}
		select {
		case n.errc <- fmt.Errorf("node: %s: %w", name, err):
		default:
		}
	}()
}

// limit wraps a listener the node serves without a remoting server
// (invariant 4).
func (n *Node) limit(ln net.Listener, name string) net.Listener {
	return remoting.LimitListener(ln, name, nil, n.log)
}

func (n *Node) attachHA(ln net.Listener) {
	ln = n.limit(ln, "HA")
	n.serve("HA listener", func() error { return n.b.ServeHA(ln) })
	// The broker's Shutdown closes it.
}

func (n *Node) attachNamesrv(ns *Namesrv) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	n.nsCancel = cancel
	n.serve("embedded name server", func() error {
		defer close(done)
		return namesrv.ServeHandler(ctx, ns.Listener, n.b.NamesrvHandler(), n.b.Registry(), ns.Remoting)
	})
	n.attach("embedded name server", func(ctx context.Context) error {
		cancel()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
}

func (n *Node) attachGRPC(g *GRPC) error {
	o := g.Options
	if o.Logger == nil {
		o.Logger = n.log
	}
	if o.Addr == "" {
		o.Addr = grpcAddr(g)
	}
	if o.Routes == nil {
		o.Routes = clusterRoutes(n.b, g.Listener.Addr())
	}
	if n.ctl != nil {
		o.Master, o.Members = n.ctl.GRPCMaster, n.ctl.GRPCMembers
	} else if o.Master == nil {
		// A classic group: a slave forwards to its master.
		n.classic.own = o.Addr
		o.Master, o.Members = n.grpcMaster, n.grpcMembers
	}
	gs, err := grpcfe.New(n.b.Core(), o)
	if err != nil {
		g.Listener.Close()
		return fmt.Errorf("node: gRPC front end: %w", err)
	}
	n.mu.Lock()
	n.grpc = gs
	n.mu.Unlock()
	n.b.SetFrontEndInfo(gs.RuntimeInfo)
	ln := n.limit(g.Listener, "gRPC")
	n.serve("gRPC front end", func() error { return gs.Serve(ln) })
	n.attach("gRPC front end", gs.Shutdown)
	if n.ctl == nil && n.b.Core().IsSlave() {
		n.followClassicMaster(&remoting.ClientOptions{TLS: n.opts.Broker.ClientTLS, Signer: n.opts.Broker.InnerSigner})
		n.attach("classic master's gRPC address", n.stopClassic)
	}
	return nil
}

func (n *Node) attachOperator(op *Operator) error {
	h, err := op.Handler(n)
	if err != nil {
		op.Listener.Close()
		return fmt.Errorf("node: operator port: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout,
		ErrorLog: slog.NewLogLogger(n.log.Handler(), slog.LevelWarn)}
	ln := n.limit(op.Listener, "operator")
	if op.Wrap != nil {
		ln = op.Wrap(ln)
	}
	if c, ok := h.(io.Closer); ok {
		// Stopped after the server (attachments stop in reverse).
		n.attach("operator port's handler", func(context.Context) error { return c.Close() })
	}
	n.serve("operator port", func() error { return srv.Serve(ln) })
	n.attach("operator port", srv.Shutdown)
	return nil
}

// readHeaderTimeout bounds a request's headers on the operator port.
const readHeaderTimeout = 10 * time.Second

func (n *Node) attachRemoting(ln net.Listener) {
	n.serve("remoting listener", func() error { return n.b.Serve(ln) })
	// The broker's Shutdown stops it.
}

// closeListeners closes every listener of the options (a failed Start).
func (n *Node) closeListeners() {
	o := n.opts
	for _, ln := range []net.Listener{o.Listener, o.HAListener} {
		if ln != nil {
			ln.Close()
		}
	}
	if o.Namesrv != nil && o.Namesrv.Listener != nil {
		o.Namesrv.Listener.Close()
	}
	if o.GRPC != nil && o.GRPC.Listener != nil {
		o.GRPC.Listener.Close()
	}
	if o.Operator != nil && o.Operator.Listener != nil {
		o.Operator.Listener.Close()
	}
}

// Broker is the node's broker (its core: Broker().Core()).
func (n *Node) Broker() *broker.Broker { return n.b }

// GRPC is the gRPC front end (nil when not attached).
func (n *Node) GRPC() *grpcfe.Server { return n.grpcServer() }

func (n *Node) grpcServer() *grpcfe.Server {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.grpc
}

// grpcAddr is the gRPC address put in routes: Options.Addr, else the
// listener's.
func grpcAddr(g *GRPC) string {
	if g.Options.Addr != "" {
		return g.Options.Addr
	}
	return g.Listener.Addr().String()
}

// Controller is the controller-mode client (nil outside controller mode).
func (n *Node) Controller() *ctrlmode.Node { return n.ctl }

// Err reports a listener that stopped serving for a reason other than the
// node's Shutdown.
func (n *Node) Err() <-chan error { return n.errc }

// Shutdown stops the attachments in reverse order, then the broker
// (flushing and persisting, as broker.Broker.Shutdown). It returns every
// error met, each named by its attachment.
func (n *Node) Shutdown(ctx context.Context) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return broker.ErrClosed
	}
	n.closed = true
	attached := n.attached
	n.mu.Unlock()
	var errs []error
	for i := len(attached) - 1; i >= 0; i-- {
		if err := attached[i].stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("node: stop the %s: %w", attached[i].name, err))
		}
	}
	if err := n.b.Shutdown(ctx); err != nil && !errors.Is(err, broker.ErrClosed) {
		errs = append(errs, fmt.Errorf("node: stop the broker: %w", err))
	}
	return errors.Join(errs...)
}

// clusterRoutes gives the gRPC front end the other brokers of a topic that
// registered with the node's embedded name server: each at its master's
// host with the port of grpcAddr (a cluster's brokers listen for gRPC on
// the same port, as RocketMQ's proxies in local mode do).
func clusterRoutes(b *broker.Broker, grpcAddr net.Addr) func(topic string) []grpcfe.Route {
	port := ""
	if ta, ok := grpcAddr.(*net.TCPAddr); ok {
		port = strconv.Itoa(ta.Port)
	} else if _, p, err := net.SplitHostPort(grpcAddr.String()); err == nil {
		port = p
	}
	return func(topic string) []grpcfe.Route {
		rd, ok := b.Registry().Route(topic)
		if !ok {
			return nil
		}
		var out []grpcfe.Route
		for _, q := range rd.QueueDatas {
			for _, bd := range rd.BrokerDatas {
				if bd.BrokerName != q.BrokerName {
					continue
				}
				addr, ok := bd.BrokerAddrs[0]
				if !ok {
					continue
				}
				host, _, err := net.SplitHostPort(addr)
				if err != nil {
					continue
				}
				out = append(out, grpcfe.Route{BrokerName: q.BrokerName, Addr: net.JoinHostPort(host, port),
					ReadQueues: q.ReadQueueNums, WriteQueues: q.WriteQueueNums, Perm: q.Perm})
			}
		}
		return out
	}
}
