// Command apogee-broker runs an Apogee broker: a RocketMQ-compatible message
// broker with its name server embedded, so one process is a whole deployment.
//
// Flags (see docs/operations.md):
//
//	--listen ADDR           broker address (default 0.0.0.0:10911); it answers name-server requests too
//	--namesrv-listen ADDR   the embedded name server's own listener (default 0.0.0.0:9876; "" disables)
//	--namesrv LIST          external name servers "host:port;host:port" to register with
//	--advertise-addr H:P    the address put in routes (default: the listen address, or the
//	                        host's primary IPv4 when listening on 0.0.0.0)
//	--data-dir DIR          default ./apogee-data
//	--flush async|sync      default async
//	--broker-name, --cluster
//	--pprof ADDR            serve net/http/pprof (loopback only unless
//	                        --pprof-allow-remote; under ACL a Super user)
//	-c, --config FILE       a RocketMQ broker.conf; flags win over the file
//	--log-level LEVEL       debug, info, warn or error
//	--log-format FORMAT     text (default) or json: one structured line per event
//	--slow-request D        log requests that held their connection longer (default 500ms; 0 off)
//	--version               print the version and the commit, and exit
//	--recover-accept-loss   start even when commit-log segment files are missing
//	                        between others (the older ones are set aside)
//	--scrub-rate BYTES/S    the background scrubber's pace (default 8 MiB/s; 0 disables)
//	--recycle-segments N    retired commit-log files kept for reuse (default 1; 0 disables)
//	--receive-budget BYTES  memory all connections may hold for requests being
//	                        received (default 128 MiB)
//	--grpc-listen ADDR      RocketMQ 5's gRPC MessagingService (default 0.0.0.0:8081; "" disables)
//	--broker-role ROLE      ASYNC_MASTER (default), SYNC_MASTER or SLAVE
//	--broker-id N           0 for a master, 1 or more for a slave
//	--ha-listen ADDR        a master's listener for its slaves (default: the
//	                        listen host, the listen port + 1)
//	--ha-master-addr H:P    a slave's master HA address (default: learnt from
//	                        the name servers; a slave needs --namesrv)
//	--slave-read-enable     suggest the slave to consumers that read far behind
//	--metrics-listen ADDR   serve Prometheus metrics at /metrics and the dashboard
//	                        at / (off by default)
//	--metrics-auth          under ACL /metrics needs basic authentication with
//	                        an ACL user (default true; false opens it, WARN)
//	--dashboard-hosts LIST  names the dashboard answers under besides the
//	                        machine's own (DNS rebinding: any other is refused)
//	--trace-topic-enable    create the trace topic at start (traceTopicEnable)
//	--trace-topic NAME      the clients' trace topic (default RMQ_SYS_TRACE_TOPIC)
//	--fd-headroom N         file descriptors kept free for the store beyond those
//	                        the process holds (default: RLIMIT_NOFILE/4, 64 to 1024)
//	--ready-file PATH       once every listener is open, write their bound
//	                        addresses there as one JSON object
//
// At start it binds its addresses, opens the store (recovering it), and only
// then listens and prints one line with its addresses and version, then a
// "ready" log line with every listener's bound address (and --ready-file):
// until the store is open, connections are refused. Each listener accepts
// port 0; one that cannot be bound stops the start with an error naming the
// flag and the broker.conf key that move it. A listener not given an
// address of its own takes the listen host (--listen's, or bindAddress).
// Every listener's connections count against one process-wide limit (in
// all, per source, and below RLIMIT_NOFILE less what the store holds and a
// headroom; see limits.go). SIGINT or SIGTERM stops accepting,
// finishes in-flight requests, flushes, persists offsets and exits 0.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/ctrlmode"
	"github.com/apogeemq/apogee/broker/grpcfe"
	"github.com/apogeemq/apogee/broker/metrics"
	"github.com/apogeemq/apogee/internal/logsetup"
	"github.com/apogeemq/apogee/internal/opauth"
	"github.com/apogeemq/apogee/internal/readyfile"
	"github.com/apogeemq/apogee/internal/version"
	"github.com/apogeemq/apogee/node"
	"github.com/apogeemq/apogee/remoting"
	"github.com/apogeemq/apogee/store"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return // usage was printed; asking for it is not a failure
		}
		fmt.Fprintln(os.Stderr, "apogee-broker:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cfg, err := parseConfig(args)
	if err != nil {
		return err
	}
	build := version.Get()
	if cfg.showVersion {
		fmt.Println(build.String("apogee-broker"))
		return nil
	}
	logger, err := logsetup.New(os.Stderr, cfg.logLevel, cfg.logFormat)
	if err != nil {
		return err
	}
	slog.SetDefault(logger)
	for _, n := range cfg.notes {
		logger.Warn(n.msg, n.attrs...)
	}

	// A ready file left by an earlier run must not describe this one.
	if cfg.readyFile != "" {
		if err := readyfile.Remove(cfg.readyFile); err != nil {
			return fmt.Errorf("--ready-file: %w", err)
		}
	}
	// Bind the addresses now, so that a port in use is reported before the
	// store's recovery, but listen only once the store is open: until then
	// connections are refused rather than left waiting (see reservation).
	// A listener that cannot be bound is a listenError naming the flag and
	// the broker.conf key that move it.
	brokerRes, err := reserve(cfg.listen)
	if err != nil {
		return remotingListener.fail(cfg.listen, howChosen(cfg.listen, defaultListen), err)
	}
	defer brokerRes.Close()
	ready := readyfile.File{Command: "apogee-broker", PID: os.Getpid(), Listen: brokerRes.Addr().String()}
	advertise, err := advertiseAddr(cfg.advertise, cfg.brokerIP, brokerRes.Addr())
	if err != nil {
		return err
	}
	role, err := core.ParseRole(cfg.role)
	if err != nil {
		return err
	}
	// A master binds its HA listener now too (a slave has none).
	var haRes *reservation
	haAdvertise := ""
	if role != core.RoleSlave || cfg.controllerMode { // in controller mode any broker may become master
		addr, err := haListenAddr(cfg.haListen, cfg.listen, brokerRes.Addr())
		if err != nil {
			return err
		}
		if haRes, err = reserve(addr); err != nil {
			return haListener.fail(addr, haHow(cfg.haListen, cfg.listen), err)
		}
		defer haRes.Close()
		ready.HA = haRes.Addr().String()
		host, _, _ := net.SplitHostPort(advertise)
		if cfg.brokerIP2 != "" {
			host = cfg.brokerIP2
		}
		haAdvertise = net.JoinHostPort(host, fmt.Sprint(haRes.Addr().Port))
	}
	var nsRes *reservation
	if cfg.namesrvListen != "" {
		if nsRes, err = reserve(cfg.namesrvListen); err != nil {
			return namesrvListener.fail(cfg.namesrvListen, howChosen(cfg.namesrvListen, cfg.defaultNamesrv), err)
		}
		defer nsRes.Close()
		ready.Namesrv = nsRes.Addr().String()
	}
	var grpcRes *reservation
	if cfg.grpcListen != "" {
		if grpcRes, err = reserve(cfg.grpcListen); err != nil {
			return grpcListener.fail(cfg.grpcListen, howChosen(cfg.grpcListen, cfg.defaultGRPC), err)
		}
		defer grpcRes.Close()
		ready.GRPC = grpcRes.Addr().String()
	}
	own := []*net.TCPAddr{brokerRes.Addr()}
	if nsRes != nil {
		own = append(own, nsRes.Addr())
	}
	var namesrvs []string
	for _, a := range cfg.namesrvs {
		if reachesSelf(a, own, localIPs()) {
			logger.Info("not registering with a name server that is this broker's own", "namesrv", a)
			continue
		}
		namesrvs = append(namesrvs, a)
	}
	var remotingOpts *remoting.Options
	if cfg.idleTimeout > 0 {
		remotingOpts = &remoting.Options{IdleTimeout: cfg.idleTimeout}
	}
	applyLimits(cfg, logger)
	tlsServer, err := openTLS(cfg, logger)
	if err != nil {
		return err
	}
	if tlsServer != nil {
		defer tlsServer.Close()
		if remotingOpts == nil {
			remotingOpts = &remoting.Options{}
		}
		remotingOpts.Handshake = tlsServer.Handshake
	}
	if cfg.receiveBudget > 0 {
		// Shared by every listener of the process.
		remoting.SharedReceiveBudget().SetLimit(cfg.receiveBudget)
	}

	guard, err := openGuard(cfg, logger)
	if err != nil {
		return err
	}
	var security broker.Security
	if guard != nil {
		defer guard.Close()
		security = guard
	}

	// The metrics listener is bound before the store opens, as the others
	// are, so that a port in use is reported at once.
	var metricsLn net.Listener
	var rpc *metrics.RPCLatency
	var grpcLat *metrics.GRPCLatency
	if cfg.metricsListen != "" {
		if metricsLn, err = net.Listen("tcp", cfg.metricsListen); err != nil {
			return metricsListener.fail(cfg.metricsListen, "as configured", err)
		}
		defer metricsLn.Close()
		ready.Metrics = metricsLn.Addr().String()
		rpc = metrics.NewRPCLatency("remoting", prometheus.Labels{"cluster": cfg.cluster, "node_type": "broker", "node_id": cfg.brokerName})
		grpcLat = metrics.NewGRPCLatency(prometheus.Labels{"cluster": cfg.cluster, "node_type": "broker", "node_id": cfg.brokerName})
	}
	// pprof serves at once: it profiles a slow recovery too.
	if cfg.pprof != "" {
		pl, err := net.Listen("tcp", cfg.pprof)
		if err != nil {
			return pprofListener.fail(cfg.pprof, "as configured", err)
		}
		defer pl.Close()
		var supers opauth.Supers // nil without access control
		if guard != nil {
			supers = guard
		}
		if err := opauth.ServePprof(remoting.LimitListener(pl, "pprof", nil, logger), cfg.op.pprofAllowRemote, supers, logger); err != nil {
			return err
		}
		ready.Pprof = pl.Addr().String()
		logger.Info("pprof", "addr", ready.Pprof)
	}
	bopts := broker.Options{Core: core.Options{DataDir: cfg.dataDir, Store: cfg.store, BrokerName: cfg.brokerName, ClusterName: cfg.cluster, AdvertiseAddr: advertise, DisableAutoCreateTopic: !cfg.autoCreate, DefaultTopicQueues: cfg.defaultQueues, MaxMessageSize: cfg.maxMessageSize, OffsetFlushInterval: cfg.offsetFlush, BusyTimeout: cfg.busyTimeout, DelayLevels: cfg.delayLevels, TransactionTimeout: cfg.txTimeout, TransactionCheckInterval: cfg.txCheckInterval, TransactionCheckMax: cfg.txCheckMax, DisablePropertyFilter: !cfg.propertyFilter, PriorityQueueZeroHighest: cfg.priorityZeroHighest, PriorityRetryFirstPercent: cfg.priorityRetryFirst, TimerMaxDelay: cfg.timerMaxDelay, Logger: logger, MaxAutoCreateTopics: cfg.sec.autoTopics, MaxAutoCreateGroups: cfg.sec.autoGroups, MaxAutoCreatePerSource: cfg.sec.autoPerSource, Role: role, BrokerID: cfg.brokerID, SlaveReadEnable: cfg.slaveReadEnable, AccessMessageInMemoryMaxRatio: cfg.memoryRatio}, NamesrvAddrs: namesrvs, RegisterInterval: cfg.registerInterval, Remoting: remotingOpts, SlowRequest: cfg.slowRequest, Security: security, NamesrvSign: namesrvSigner(cfg), InnerSigner: innerSigner(cfg), HAAdvertiseAddr: haAdvertise, HAMasterAddr: cfg.haMasterAddr, ObserveRequest: observeRequest(rpc)}
	bopts.Core.TraceTopic = cfg.op.traceTopicAtStart()
	bopts.Core.LiteMaxSubscriptions, bopts.Core.LiteMaxClientEvents = cfg.liteMaxSubs, cfg.liteMaxEvents
	bopts.Core.LiteMinTTL, bopts.Core.LiteTTLCheckInterval = cfg.liteMinTTL, cfg.liteTTLCheck
	ctlTLS, err := clientTLS(cfg, tlsServer, &bopts, logger)
	if err != nil {
		return err
	}
	haAuth(cfg, guard, &bopts)
	ready.Advertise = advertise

	// Every listener is bound: hand them to the node (package node), which
	// opens the broker and attaches the front ends and services.
	ln, err := brokerRes.Listen()
	if err != nil {
		return err
	}
	nopts := node.Options{Broker: bopts, Listener: ln, Logger: logger}
	closeAll := func() {
		for _, l := range []net.Listener{nopts.Listener, nopts.HAListener} {
			if l != nil {
				l.Close()
			}
		}
		if nopts.Namesrv != nil {
			nopts.Namesrv.Listener.Close()
		}
		if nopts.GRPC != nil {
			nopts.GRPC.Listener.Close()
		}
	}
	if haRes != nil {
		if nopts.HAListener, err = haRes.Listen(); err != nil {
			closeAll()
			return fmt.Errorf("--ha-listen: %w", err)
		}
	}
	if nsRes != nil {
		nsln, err := nsRes.Listen()
		if err != nil {
			closeAll()
			return fmt.Errorf("--namesrv-listen: %w", err)
		}
		nopts.Namesrv = &node.Namesrv{Listener: nsln, Remoting: remotingOpts}
	}
	grpcShown := "disabled"
	if grpcRes != nil {
		grpcTLS, err := openGRPCTLS(cfg, logger)
		if err != nil {
			closeAll()
			return err
		}
		if grpcTLS != nil {
			defer grpcTLS.Close()
		}
		gl, err := grpcRes.Listen()
		if err != nil {
			closeAll()
			return fmt.Errorf("--grpc-listen: %w", err)
		}
		nopts.GRPC = &node.GRPC{Listener: gl, Options: grpcfe.Options{Addr: grpcAdvertise(advertise, grpcRes.Addr()),
			Logger: logger, Guard: guard, TLSServer: grpcTLS, ServerOptions: grpcServerOptions(grpcLat),
			Budget: remoting.SharedReceiveBudget()}}
		cfg.renew.apply(&nopts.GRPC.Options)
		if bopts.ClientTLS != nil {
			// A member forwards to its master's gRPC port (node): with the
			// broker's own client TLS (--tls-enable), as its other
			// connections to brokers.
			nopts.GRPC.Options.ForwardTLS = bopts.ClientTLS.Clone()
		}
		grpcShown = grpcRes.Addr().String()
	}
	if metricsLn != nil {
		op := &node.Operator{Listener: metricsLn, Handler: func(n *node.Node) (http.Handler, error) {
			return operatorHandler(n.Broker(), n.Controller(), rpc, grpcLat, dashboardConfig{guard: guard, hosts: cfg.dashboardHosts, plain: tlsServer == nil, addr: metricsLn.Addr(), metricsAuth: cfg.op.metricsAuth, traceTopic: cfg.op.traceTopic}, logger, grpcMetrics(n))
		}}
		if tlsServer != nil {
			// --tls-mode applies here too: permissive serves https and
			// http on the one port (a scraper may keep plain http).
			op.Wrap = tlsServer.Listener
		}
		nopts.Operator = op
	}
	if cfg.controllerMode {
		if len(namesrvs) == 0 {
			logger.Warn("controller mode without --namesrv: clients find no route to this group")
		}
		nopts.Controller = &ctrlmode.Options{
			DataDir: cfg.dataDir, ClusterName: cfg.cluster, BrokerName: cfg.brokerName, AdvertiseAddr: advertise,
			BrokerID: max(cfg.brokerID, 0), SyncMaster: cfg.role == roleSyncMaster,
			ControllerAddrs: cfg.controllerAddrs, ControllerTLS: ctlTLS, ClientTLS: bopts.ClientTLS,
			InSyncReplicas: cfg.inSyncReplicas, MinInSyncReplicas: cfg.minInSyncReplicas,
			AllAckInSyncStateSet: cfg.allAckInSyncStateSet, MaxTimeSlaveNotCatchup: cfg.maxTimeSlaveNotCatchup,
			HeartbeatInterval: cfg.controllerHeartbeatInterval, HeartbeatTimeout: cfg.controllerHeartbeatTimeout,
			Logger: logger,
		}
	}
	n, err := node.Start(nopts)
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			return fmt.Errorf("data directory %s is in use by another running broker (%w)", cfg.dataDir, err)
		}
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	shutdown := func() error {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return n.Shutdown(sctx)
	}
	if metricsLn != nil {
		logger.Info("metrics and dashboard", "addr", metricsLn.Addr().String())
	}
	ns := "disabled"
	if nsRes != nil {
		ns = nsRes.Addr().String()
	}
	if cfg.controllerMode {
		// Scripts and tests read the broker id and the HA address here.
		// (The name server's and gRPC's addresses are in the ready file.)
		fmt.Printf("apogee-broker %s listening on %s (advertised %s), controller mode (broker id %d, controllers %s), HA %s, data %s, flush %s, version %s\n",
			cfg.brokerName, brokerRes.Addr(), advertise, n.Controller().ID(), strings.Join(cfg.controllerAddrs, ";"), haAdvertise,
			cfg.dataDir, cfg.store.FlushMode, build.Short())
	} else {
		fmt.Printf("apogee-broker %s listening on %s (advertised %s), name server on %s, data %s, grpc on %s, flush %s, version %s\n",
			cfg.brokerName, brokerRes.Addr(), advertise, ns, cfg.dataDir, grpcShown, cfg.store.FlushMode, build.Short())
	}
	// Every listener is open: say where (the log line, and --ready-file).
	if err := readyfile.Publish(cfg.readyFile, ready, logger); err != nil {
		stop()
		if serr := shutdown(); serr != nil {
			logger.Warn("shutdown", "err", serr)
		}
		return err
	}
	if cfg.readyFile != "" {
		defer readyfile.Remove(cfg.readyFile) // the process is going: the file would describe nothing
	}

	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case err := <-n.Err():
		logger.Error("server stopped", "err", err)
	}
	stop()
	if err := shutdown(); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	logger.Info("stopped cleanly")
	return nil
}

// advertiseAddr picks the address put in routes: the flag, else brokerIP1
// from the config file with the listen port, else the listen address, or the
// host's primary IPv4 when listening on all interfaces.
func advertiseAddr(flag, brokerIP string, listen *net.TCPAddr) (string, error) {
	if flag != "" {
		if _, _, err := net.SplitHostPort(flag); err != nil {
			return "", fmt.Errorf("--advertise-addr %q: %w", flag, err)
		}
		return flag, nil
	}
	port := fmt.Sprint(listen.Port)
	if brokerIP != "" {
		return net.JoinHostPort(brokerIP, port), nil
	}
	if !listen.IP.IsUnspecified() {
		return net.JoinHostPort(listen.IP.String(), port), nil
	}
	return net.JoinHostPort(primaryIPv4(), port), nil
}

// haListenAddr is the HA listener's address: the flag (or haListenPort's
// ":port", on the listen host), or the listen host with its port + 1; when
// --listen asked for any port (0), any port too.
func haListenAddr(flag, listenFlag string, listen *net.TCPAddr) (string, error) {
	host := listen.IP.String()
	if listen.IP == nil || listen.IP.IsUnspecified() {
		host = ""
	}
	if flag == "" {
		if _, p, err := net.SplitHostPort(listenFlag); err == nil && (p == "0" || p == "") {
			return net.JoinHostPort(host, "0"), nil
		}
		if listen.Port >= 65535 {
			return "", fmt.Errorf("--ha-listen: the listen port %d has no port + 1; give --ha-listen", listen.Port)
		}
		return net.JoinHostPort(host, fmt.Sprint(listen.Port+1)), nil
	}
	h, p, err := net.SplitHostPort(flag)
	if err != nil {
		return "", fmt.Errorf("--ha-listen %q: %w", flag, err)
	}
	if h == "" {
		h = host
	}
	return net.JoinHostPort(h, p), nil
}

// primaryIPv4 returns the first IPv4 address of an interface that is up and
// not loopback, or 127.0.0.1 when there is none.
func primaryIPv4() string {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "127.0.0.1"
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// splitNamesrvs parses "host:port;host:port".
func splitNamesrvs(s string) []string {
	var out []string
	for _, a := range strings.Split(s, ";") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}
