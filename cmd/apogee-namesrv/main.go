// Command apogee-namesrv runs a standalone name server: RocketMQ's route
// registry, for clusters where brokers register with one or more name servers
// of their own (apogee-broker --namesrv "host:port;host:port") instead of the
// one each broker embeds.
//
// Flags (see docs/operations.md):
//
//	--listen ADDR           address to serve on (default 0.0.0.0:9876)
//	--data-dir DIR          default ./apogee-namesrv-data; holds kvConfig.json
//	--broker-timeout D      a broker silent this long is dropped (default 120s)
//	--scan-interval D       how often silent brokers are looked for (default 5s)
//	-c, --config FILE       a RocketMQ namesrv.properties; flags win over the file
//	--log-level LEVEL       debug, info, warn or error
//	--log-format FORMAT     text (default) or json
//	--pprof ADDR            serve net/http/pprof (loopback only unless
//	                        --pprof-allow-remote; under --acl a Super user)
//	--ready-file PATH       once listening, write the bound addresses there (JSON)
//	--version               print the version and the commit, and exit
//	--tls-mode MODE         disabled (default), permissive or enforcing; with
//	--tls-cert, --tls-key   the certificate and key (PEM, reloaded on change),
//	--tls-client-ca FILE    and for mutual TLS the CAs of client certificates
//	--tls-client-auth WHAT  none, optional or require a client certificate
//	--max-connections N     connections accepted in all (default 10000)
//	--max-connections-per-source N   from one source address (default 1000)
//	--fd-headroom N         file descriptors kept free beyond those the process
//	                        holds (default: RLIMIT_NOFILE/4, 64 to 1024): the
//	                        connection bound stays below RLIMIT_NOFILE
//
// Routes live in memory: brokers register every 30 s and after a restart of
// the name server. The KV config (PUT/DELETE_KV_CONFIG) is kept in
// DATA/kvConfig.json, each change written before it is answered. At start it
// locks the data directory, loads the KV config, listens, and prints one line
// with its address and version; then it logs a "ready" line with the bound
// addresses and, with --ready-file, writes them there. SIGINT or SIGTERM stops accepting, finishes
// the requests in flight, and exits 0 after a "stopped cleanly" log line.
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

	"github.com/apogeemq/apogee/internal/logsetup"
	"github.com/apogeemq/apogee/internal/opauth"
	"github.com/apogeemq/apogee/internal/readyfile"
	"github.com/apogeemq/apogee/internal/version"
	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/namesrv"
	"github.com/apogeemq/apogee/remoting"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return // usage was printed; asking for it is not a failure
		}
		fmt.Fprintln(os.Stderr, "apogee-namesrv:", err)
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
		fmt.Println(build.String("apogee-namesrv"))
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
		return fmt.Errorf("data directory %s is in use by another running name server", cfg.dataDir)
	}
	if err != nil {
		return fmt.Errorf("lock the data directory: %w", err)
	}
	defer lock.Close()
	reg, err := namesrv.OpenRegistry(namesrv.Options{
		BrokerTimeout: cfg.brokerTimeout,
		ScanInterval:  cfg.scanInterval,
		Logger:        logger,
		KVConfigPath:  cfg.kvPath,
	})
	if err != nil {
		return err
	}
	defer reg.Close()

	cfg.limits.Apply(logger)
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w (the name server's address: move it with --listen, or namesrv.properties' listenPort and bindAddress)", cfg.listen, err)
	}
	ready := readyfile.File{Command: "apogee-namesrv", PID: os.Getpid(), Listen: ln.Addr().String()}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ropts := &remoting.Options{IdleTimeout: cfg.idleTimeout, Logger: logger}
	tlsServer, err := openTLS(cfg.tls, logger)
	if err != nil {
		ln.Close()
		return err
	}
	if tlsServer != nil {
		defer tlsServer.Close()
		ropts.Handshake = tlsServer.Handshake
	}
	guard, err := openGuard(cfg.acl, logger)
	if err != nil {
		ln.Close()
		return err
	}
	var handler remoting.Handler = reg
	if guard != nil {
		defer guard.Close()
		handler = guarded{g: guard, reg: reg}
	}
	if cfg.pprof != "" {
		// After the guard: under access control pprof needs a Super user.
		pl, err := net.Listen("tcp", cfg.pprof)
		if err != nil {
			ln.Close()
			return fmt.Errorf("listen %s: %w (move it with --pprof)", cfg.pprof, err)
		}
		defer pl.Close()
		var supers opauth.Supers // nil without access control
		if guard != nil {
			supers = guard
		}
		if err := opauth.ServePprof(remoting.LimitListener(pl, "pprof", nil, logger), cfg.pprofAllowRemote, supers, logger); err != nil {
			ln.Close()
			return err
		}
		ready.Pprof = pl.Addr().String()
		logger.Info("pprof", "addr", ready.Pprof)
	}
	served := make(chan error, 1)
	go func() {
		served <- namesrv.ServeHandler(ctx, ln, handler, reg, ropts)
	}()
	fmt.Printf("apogee-namesrv listening on %s, data %s, version %s\n", ln.Addr(), cfg.dataDir, build.Short())
	if err := readyfile.Publish(cfg.readyFile, ready, logger); err != nil {
		stop()
		<-served
		reg.Close()
		return err
	}
	if cfg.readyFile != "" {
		defer readyfile.Remove(cfg.readyFile) // the process is going: the file would describe nothing
	}

	// Serve returns nil once ctx ended and the server stopped (accepting at
	// once, then the requests in flight, within 5 s), or the error that
	// stopped it from serving.
	var serveErr error
	select {
	case <-ctx.Done():
		logger.Info("shutting down")
		serveErr = <-served
	case serveErr = <-served:
		logger.Error("server stopped", "err", serveErr)
	}
	stop()
	// Every KV change is written before it is answered; Close waits for one
	// still being written, so nothing acknowledged is left unwritten.
	reg.Close()
	if serveErr != nil {
		return fmt.Errorf("serve: %w", serveErr)
	}
	logger.Info("stopped cleanly")
	return nil
}
