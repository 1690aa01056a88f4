// Command apogee-controller runs one member of a controller group: RocketMQ
// 5's controller (controller mode's elections of a broker group's master
// from its in-sync replicas, fenced by epochs), replicated by Raft
// (hashicorp/raft, its log in bbolt through raft-boltdb). Run three or five.
//
// Flags (docs/failover.md has them all, and how to run three on one
// machine):
//
//	--id ID                 this node's id in --peers
//	--peers LIST            id=host:port,... the Raft group's addresses (a
//	                        group of one may give port 0)
//	--join LIST             instead of --peers: join the group whose
//	                        controllers listen there (host:port;host:port)
//	--raft-listen ADDR      where Raft listens (default: this node's --peers
//	                        address; port 0: any)
//	--listen ADDR           where brokers reach it (default 0.0.0.0:9878)
//	--advertise-addr ADDR   the remoting address named to brokers
//	--data-dir DIR          default ./apogee-controller-data
//	--heartbeat-timeout D   a broker silent this long is dead (default 3s)
//	--scan-interval D       the leader's look for dead masters (default 500ms)
//	--enable-elect-unclean-master
//	--tls-mode, --tls-cert, --tls-key, --tls-client-ca, --tls-client-auth
//	                        TLS on --listen, as the broker's (docs/security.md)
//	--raft-tls              Raft between controllers over TLS (mutual with
//	                        --tls-client-ca, --tls-ca, --tls-client-cert/-key)
//	--notify-tls            role-change pushes to brokers over TLS
//	--acl, --acl-file FILE  obey only signed requests of admin users of the
//	                        file, and only authenticated Raft peers
//	-c, --config FILE       RocketMQ controller properties; flags win
//	--log-level LEVEL       debug, info, warn or error (default info)
//	--log-format FORMAT     text (default) or json, Raft's lines too
//	--pprof ADDR            serve net/http/pprof (loopback only unless
//	                        --pprof-allow-remote; under --acl a Super user)
//	--ready-file PATH       once listening, write the bound addresses there (JSON)
//	--version
//
// A new data directory bootstraps the group from --peers; an existing one
// keeps the membership it recorded. With --join a node bootstraps nothing:
// it asks the group's leader to add it (docs/failover.md, "Members on any
// port"). At start it locks the data directory, starts its Raft member,
// listens, prints one line with its id and addresses, then logs a "ready"
// line with every bound address (and --ready-file). SIGINT or SIGTERM
// hands leadership over (when it leads), stops, and exits 0 after a
// "stopped cleanly" log line.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/controller"
	"github.com/apogeemq/apogee/internal/logsetup"
	"github.com/apogeemq/apogee/internal/opauth"
	"github.com/apogeemq/apogee/internal/readyfile"
	"github.com/apogeemq/apogee/internal/version"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/remoting"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "apogee-controller:", err)
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
		fmt.Println(build.String("apogee-controller"))
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
	if err := os.MkdirAll(cfg.dataDir, 0o755); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	// The data directory's lock (<dir>/lock) is held for as long as the
	// process runs (the kernel drops it when the process exits, however it
	// exits).
	lock, err := vfs.Default.Lock(filepath.Join(cfg.dataDir, "lock"))
	if errors.Is(err, vfs.ErrLocked) {
		return fmt.Errorf("data directory %s is in use by another running controller", cfg.dataDir)
	}
	if err != nil {
		return fmt.Errorf("lock the data directory: %w", err)
	}
	defer lock.Close()

	tlsParts, err := openTLS(cfg.tls, logger)
	if err != nil {
		return err
	}
	defer tlsParts.close()
	cfg.limits.Apply(logger)
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w (the controller's remoting address: move it with --listen, or the properties' listenPort)", cfg.listen, err)
	}
	defer ln.Close()
	// Raft's listener is bound here too, so that a port in use names what
	// moves it; the node serves Raft on it.
	raftBind := cfg.raftListen
	for _, p := range cfg.peers {
		if raftBind == "" && p.ID == cfg.id {
			raftBind = p.Addr
		}
	}
	raftLn, err := net.Listen("tcp", raftBind)
	if err != nil {
		return fmt.Errorf("listen %s: %w (the Raft listener: move it with --raft-listen, or this node's --peers address)", raftBind, err)
	}
	ready := readyfile.File{Command: "apogee-controller", PID: os.Getpid(), Listen: ln.Addr().String(), Raft: raftLn.Addr().String()}
	adv, err := cfg.advertiseAddr(ln.Addr())
	if err != nil {
		raftLn.Close()
		return fmt.Errorf("advertise address: %w", err)
	}
	ready.Advertise = adv
	var pprofLn net.Listener
	if cfg.pprof != "" {
		pl, err := net.Listen("tcp", cfg.pprof)
		if err != nil {
			raftLn.Close()
			return fmt.Errorf("listen %s: %w (move it with --pprof)", cfg.pprof, err)
		}
		defer pl.Close()
		if err := opauth.CheckPprofAddr(pl.Addr(), cfg.pprofAllowRemote); err != nil {
			raftLn.Close()
			return err
		}
		pprofLn = remoting.LimitListener(pl, "pprof", nil, logger) // served once the access control is open
		ready.Pprof = pl.Addr().String()
	}
	nodeOpts := controller.Options{
		ID: cfg.id, Peers: cfg.peers, Join: len(cfg.join) > 0, DataDir: cfg.dataDir, RaftListener: remoting.LimitListener(raftLn, "Raft", nil, logger), Advertise: adv, Group: cfg.group,
		HeartbeatTimeout: cfg.heartbeatTimeout, ScanInterval: cfg.scanInterval, CloseGrace: cfg.closeGrace,
		ElectUncleanMaster: cfg.unclean, DisableNotify: !cfg.notify, Raft: cfg.raft,
		SnapshotThreshold: cfg.snapshotThreshold, SnapshotInterval: cfg.snapshotInterval, TrailingLogs: cfg.trailingLogs,
		Logger: logger, RaftLogOutput: os.Stderr, RaftLogLevel: cfg.raftLogLevel, RaftLogJSON: cfg.logFormat == "json",
		RaftTLS: tlsParts.raft, NotifyTLS: tlsParts.notify,
	}
	if tlsParts.remoting != nil {
		nodeOpts.Handshake = tlsParts.remoting.Handshake
	}
	sec, err := openSecurity(cfg, &nodeOpts, cfg.tls.raft && cfg.tls.clientCA != "", logger)
	if err != nil {
		raftLn.Close()
		return err
	}
	defer sec.close()
	if pprofLn != nil {
		var supers opauth.Supers // nil without access control
		if sec.guard != nil {
			supers = sec.guard
		}
		if err := opauth.ServePprof(pprofLn, cfg.pprofAllowRemote, supers, logger); err != nil {
			raftLn.Close()
			return err
		}
		logger.Info("pprof", "addr", ready.Pprof)
	}
	node, err := controller.New(nodeOpts)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sig)
	served := make(chan error, 1)
	go func() { served <- node.Serve(ln) }()
	fmt.Printf("apogee-controller %s listening on %s, raft %s, data %s, version %s\n", cfg.id, ln.Addr(), node.RaftAddr(), cfg.dataDir, build.Short())
	if err := readyfile.Publish(cfg.readyFile, ready, logger); err != nil {
		if cerr := node.Close(); cerr != nil {
			logger.Error("stopping the Raft member", "err", cerr)
		}
		<-served
		return err
	}
	if cfg.readyFile != "" {
		defer readyfile.Remove(cfg.readyFile) // the process is going: the file would describe nothing
	}
	joinCtx, stopJoin := context.WithCancel(context.Background())
	defer stopJoin()
	if len(cfg.join) > 0 {
		// In the background: the node serves meanwhile (brokers are told
		// who leads), and a group without a leader now may have one later.
		go func() {
			if _, err := node.Join(joinCtx, cfg.join, tlsParts.join); err != nil && joinCtx.Err() == nil {
				logger.Error("joining the controller group failed", "err", err)
			}
		}()
	}

	var serveErr error
	select {
	case s := <-sig:
		logger.Info("shutting down", "signal", s.String())
	case serveErr = <-served:
		logger.Error("server stopped", "err", serveErr)
	}
	stopJoin()
	if err := node.Close(); err != nil {
		logger.Error("stopping the Raft member", "err", err)
		if serveErr == nil {
			serveErr = err
		}
	}
	if serveErr != nil {
		return serveErr
	}
	logger.Info("stopped cleanly")
	return nil
}
