package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/broker/ctrlmode"
	"github.com/apogeemq/apogee/internal/readyfile"
	"github.com/apogeemq/apogee/internal/version"
	"github.com/apogeemq/apogee/store"
)

// runControllerMode runs the broker in controller mode (--enable-controller-mode):
// package broker/ctrlmode registers it with the controllers and opens the
// broker in the role they give it, on the listeners bound here.
func runControllerMode(cfg *config, bopts broker.Options, ctlTLS *tls.Config, brokerRes, haRes *reservation, haAdvertise string,
	ready readyfile.File, logger *slog.Logger) error {
	if len(bopts.NamesrvAddrs) == 0 {
		logger.Warn("controller mode without --namesrv: clients find no route to this group")
	}
	ln, err := brokerRes.Listen()
	if err != nil {
		return err
	}
	haln, err := haRes.Listen()
	if err != nil {
		ln.Close()
		return fmt.Errorf("--ha-listen: %w", err)
	}
	if cfg.role == roleSyncMaster {
		bopts.Role = core.RoleSyncMaster
	} else {
		bopts.Role = core.RoleAsyncMaster
	}
	bopts.BrokerID = max(cfg.brokerID, 0)
	n, err := ctrlmode.Start(ctrlmode.Options{
		Broker:                 bopts,
		ControllerAddrs:        cfg.controllerAddrs,
		ControllerTLS:          ctlTLS,
		Listener:               ln,
		HAListener:             haln,
		HAAdvertiseAddr:        haAdvertise,
		InSyncReplicas:         cfg.inSyncReplicas,
		MinInSyncReplicas:      cfg.minInSyncReplicas,
		AllAckInSyncStateSet:   cfg.allAckInSyncStateSet,
		MaxTimeSlaveNotCatchup: cfg.maxTimeSlaveNotCatchup,
		HeartbeatInterval:      cfg.controllerHeartbeatInterval,
		HeartbeatTimeout:       cfg.controllerHeartbeatTimeout,
		Logger:                 logger,
	})
	if err != nil {
		ln.Close()
		haln.Close()
		if errors.Is(err, store.ErrLocked) {
			return fmt.Errorf("data directory %s is in use by another running broker (%w)", cfg.dataDir, err)
		}
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Printf("apogee-broker %s listening on %s (advertised %s), controller mode (broker id %d, controllers %s), HA %s, data %s, flush %s, version %s\n",
		cfg.brokerName, brokerRes.Addr(), bopts.AdvertiseAddr, n.ID(), joinAddrs(cfg.controllerAddrs), haAdvertise,
		cfg.dataDir, cfg.store.FlushMode, version.Get().Short())
	if err := readyfile.Publish(cfg.readyFile, ready, logger); err != nil {
		stop()
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if serr := n.Shutdown(sctx); serr != nil {
			logger.Warn("shutdown", "err", serr)
		}
		return err
	}
	if cfg.readyFile != "" {
		defer readyfile.Remove(cfg.readyFile) // the process is going: the file would describe nothing
	}
	<-ctx.Done()
	logger.Info("shutting down")
	stop()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	logger.Info("stopped cleanly")
	return nil
}

func joinAddrs(a []string) string {
	out := ""
	for i, s := range a {
		if i > 0 {
			out += ";"
		}
		out += s
	}
	return out
}
