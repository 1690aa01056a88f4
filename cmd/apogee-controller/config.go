package main

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/controller"
	"github.com/apogeemq/apogee/internal/javaprops"
	"github.com/apogeemq/apogee/internal/limitflags"
)

// config is the controller's configuration after the file and the flags.
type config struct {
	id, listen, advertise, raftListen, dataDir, group, logLevel, logFormat, raftLogLevel, pprof string
	readyFile                                                                                   string // --ready-file ("" none)
	peers                                                                                       []controller.Peer
	join                                                                                        []string // --join: members' remoting addresses
	heartbeatTimeout, scanInterval, closeGrace                                                  time.Duration
	unclean, notify, showVersion                                                                bool
	pprofAllowRemote                                                                            bool // --pprof-allow-remote
	raft                                                                                        controller.RaftTiming
	snapshotThreshold, trailingLogs                                                             uint64
	snapshotInterval                                                                            time.Duration
	tls                                                                                         tlsSettings
	sec                                                                                         securitySettings
	notes                                                                                       []note
	limits                                                                                      limitflags.Config // package limitflags
}

type note struct {
	msg   string
	attrs []any
}

func parseConfig(args []string) (*config, error) {
	fs := pflag.NewFlagSet("apogee-controller", pflag.ContinueOnError)
	id := fs.String("id", "", "this controller's id in the Raft group (one of --peers)")
	peers := fs.String("peers", "", "the Raft group: id=host:port,id=host:port (Raft addresses, this node included); a group of one may give port 0")
	join := fs.String("join", "", `instead of --peers: join the group whose controllers (remoting addresses, "host:port;host:port") are given; needs --raft-listen`)
	raftListen := fs.String("raft-listen", "", "address Raft listens on (default: this node's address in --peers; port 0: any)")
	listen := fs.String("listen", "0.0.0.0:9878", "address brokers reach the controller on (RocketMQ remoting)")
	advertise := fs.String("advertise-addr", "", "remoting address other controllers name to brokers (default: --listen, with an unspecified host replaced by this node's --peers host)")
	dataDir := fs.String("data-dir", "./apogee-controller-data", "data directory: raft.db (the Raft log and metadata) and snapshots/")
	group := fs.String("group", controller.DefaultGroup, "the controller group's name (GET_METADATA_INFO)")
	hbTimeout := fs.Duration("heartbeat-timeout", controller.DefaultHeartbeatTimeout, "a broker not heard from for this long is dead (a heartbeat's own heartbeatTimeoutMills wins)")
	scan := fs.Duration("scan-interval", controller.DefaultScanInterval, "how often the leader looks for dead masters")
	grace := fs.Duration("conn-close-grace", controller.DefaultCloseGrace, "a broker whose connection to the leader closed is dead this long after unless heard from again")
	unclean := fs.Bool("enable-elect-unclean-master", false, "let an election choose a replica outside the SyncStateSet when none inside is alive (may lose acknowledged messages)")
	notify := fs.Bool("notify-broker-role-changed", true, "push NOTIFY_BROKER_ROLE_CHANGED to a group's brokers after an election")
	rHB := fs.Duration("raft-heartbeat-timeout", 0, "Raft heartbeat timeout (default 1s, the library's)")
	rEl := fs.Duration("raft-election-timeout", 0, "Raft election timeout (default 1s)")
	rLease := fs.Duration("raft-leader-lease-timeout", 0, "Raft leader lease (default 500ms; at most the heartbeat timeout)")
	rCommit := fs.Duration("raft-commit-timeout", 0, "Raft commit timeout (default 50ms)")
	snapThreshold := fs.Uint64("snapshot-threshold", 0, "take a snapshot after this many applied entries (default 8192)")
	snapInterval := fs.Duration("snapshot-interval", 0, "how often the snapshot threshold is checked (default 120s)")
	trailing := fs.Uint64("trailing-logs", 0, "entries kept in the log after a snapshot (default 10240)")
	configFile := fs.StringP("config", "c", "", "RocketMQ controller properties (Java properties); flags win over the file")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text (logfmt key=value lines) or json (one JSON object per line)")
	raftLogLevel := fs.String("raft-log-level", "warn", "the Raft library's log level: trace, debug, info, warn or error")
	pprof := fs.String("pprof", "", "serve net/http/pprof on this address (loopback unless --pprof-allow-remote; under --acl a Super user only)")
	pprofRemote := fs.Bool("pprof-allow-remote", false, "serve --pprof on an address that is not loopback (refused otherwise)")
	readyFile := fs.String("ready-file", "", "once listening, write the bound addresses here as one JSON object (written atomically; removed when the process exits)")
	showVersion := fs.Bool("version", false, "print the version and the commit, and exit")
	tlsF := addTLSFlags(fs)
	secF := addSecurityFlags(fs)
	limF := limitflags.Add(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c := &config{id: *id, listen: *listen, advertise: *advertise, raftListen: *raftListen, dataDir: *dataDir, group: *group,
		logLevel: *logLevel, logFormat: *logFormat, raftLogLevel: *raftLogLevel, pprof: *pprof, pprofAllowRemote: *pprofRemote, readyFile: *readyFile, heartbeatTimeout: *hbTimeout, scanInterval: *scan,
		closeGrace: *grace, unclean: *unclean, notify: *notify, showVersion: *showVersion,
		raft:              controller.RaftTiming{HeartbeatTimeout: *rHB, ElectionTimeout: *rEl, LeaderLeaseTimeout: *rLease, CommitTimeout: *rCommit},
		snapshotThreshold: *snapThreshold, snapshotInterval: *snapInterval, trailingLogs: *trailing, tls: tlsF.settings(), sec: secF.settings()}
	if c.showVersion {
		return c, nil
	}
	var err error
	if c.limits, err = limF.Config(); err != nil {
		return nil, err
	}
	peerText := *peers
	if *configFile != "" {
		props, err := javaprops.ReadFile(*configFile)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		if err := c.applyFile(props, fs, &peerText); err != nil {
			return nil, fmt.Errorf("%s: %w", *configFile, err)
		}
	}
	if c.id == "" {
		return nil, fmt.Errorf("--id is required")
	}
	c.join = strings.FieldsFunc(*join, func(r rune) bool { return r == ';' || r == ',' })
	switch {
	case len(c.join) > 0 && peerText != "":
		return nil, fmt.Errorf("--peers (a new group) and --join (an existing one) exclude each other")
	case len(c.join) > 0:
		for _, a := range c.join {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("--join %q: %w", a, err)
			}
		}
		if c.raftListen == "" {
			return nil, fmt.Errorf("--join needs --raft-listen (host:port, port 0 for any)")
		}
	case peerText == "":
		return nil, fmt.Errorf("--peers or --join is required")
	default:
		var err error
		if c.peers, err = controller.ParsePeers(peerText); err != nil {
			return nil, fmt.Errorf("--peers: %w", err)
		}
		if !slices.ContainsFunc(c.peers, func(p controller.Peer) bool { return p.ID == c.id }) {
			return nil, fmt.Errorf("--id %q is not among --peers %s", c.id, controller.FormatPeers(c.peers))
		}
	}
	for name, d := range map[string]time.Duration{"--heartbeat-timeout": c.heartbeatTimeout, "--scan-interval": c.scanInterval,
		"--conn-close-grace": c.closeGrace} {
		if d <= 0 {
			return nil, fmt.Errorf("%s: want a positive duration", name)
		}
	}
	return c, nil
}

// applyFile applies a RocketMQ controller configuration (ControllerConfig
// keys, and listenPort): a key honoured here is applied unless its flag was
// given; a ControllerConfig key Apogee has no use for is noted for a WARN;
// anything else is an error.
func (c *config) applyFile(props []javaprops.Property, fs *pflag.FlagSet, peers *string) error {
	for _, p := range props {
		for _, r := range p.Replaced {
			c.notes = append(c.notes, note{"controller properties: a key given twice; the last line wins (as Java's Properties): remove the other line",
				[]any{"key", p.Key, "line", r.Line, "value", r.Value, "winning_line", p.Line, "winning_value", p.Value}})
		}
		k, ok := honoured[p.Key]
		if ok {
			if fs.Changed(k.flag) {
				continue
			}
			if err := k.apply(c, p.Value, peers); err != nil {
				return fmt.Errorf("line %d: %s=%s: %w", p.Line, p.Key, p.Value, err)
			}
			continue
		}
		if slices.Contains(ignoredKeys, p.Key) {
			c.notes = append(c.notes, note{"controller properties: key ignored", []any{"key", p.Key, "value", p.Value}})
			continue
		}
		msg := fmt.Sprintf("line %d: unknown key %q", p.Line, p.Key)
		if s := javaprops.Closest(p.Key, allKeys()); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return fmt.Errorf("%s; the keys the controller reads are listed in docs/failover.md", msg)
	}
	return nil
}

type confKey struct {
	flag  string
	apply func(c *config, v string, peers *string) error
}

// honoured are the keys of RocketMQ's ControllerConfig (and its
// NettyServerConfig's listenPort) that Apogee applies.
var honoured = map[string]confKey{
	"controllerDLegerSelfId": {"id", func(c *config, v string, _ *string) error {
		if v == "" {
			return fmt.Errorf("want an id")
		}
		c.id = v
		return nil
	}},
	// RocketMQ's "n0-127.0.0.1:9877;n1-127.0.0.1:9878": Raft addresses here.
	"controllerDLegerPeers": {"peers", func(_ *config, v string, peers *string) error {
		var parts []string
		for _, f := range strings.Split(v, ";") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			id, addr, ok := strings.Cut(f, "-")
			if !ok {
				return fmt.Errorf("want id-host:port;id-host:port")
			}
			parts = append(parts, id+"="+addr)
		}
		*peers = strings.Join(parts, ",")
		return nil
	}},
	"controllerDLegerGroup": {"group", func(c *config, v string, _ *string) error { c.group = v; return nil }},
	"controllerStorePath": {"data-dir", func(c *config, v string, _ *string) error {
		if v == "" {
			return fmt.Errorf("want a directory")
		}
		c.dataDir = v
		return nil
	}},
	"listenPort": {"listen", func(c *config, v string, _ *string) error {
		port, err := strconv.Atoi(v)
		if err != nil || port < 0 || port > 65535 {
			return fmt.Errorf("want a port number")
		}
		host := "0.0.0.0"
		if h, _, e := net.SplitHostPort(c.listen); e == nil {
			host = h
		}
		c.listen = net.JoinHostPort(host, strconv.Itoa(port))
		return nil
	}},
	"enableElectUncleanMaster": {"enable-elect-unclean-master", func(c *config, v string, _ *string) (err error) {
		c.unclean, err = strconv.ParseBool(v)
		return err
	}},
	"notifyBrokerRoleChanged": {"notify-broker-role-changed", func(c *config, v string, _ *string) (err error) {
		c.notify, err = strconv.ParseBool(v)
		return err
	}},
	"scanInactiveMasterInterval": {"scan-interval", func(c *config, v string, _ *string) (err error) {
		c.scanInterval, err = positiveMillis(v)
		return err
	}},
}

func positiveMillis(v string) (time.Duration, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > int64(time.Duration(1<<62)/time.Millisecond) {
		return 0, fmt.Errorf("want a positive number of milliseconds")
	}
	return time.Duration(n) * time.Millisecond, nil
}

// ignoredKeys are RocketMQ ControllerConfig keys Apogee accepts without
// using (thread pools, DLedger's and JRaft's own settings, metrics export,
// the run-time configuration store).
var ignoredKeys = []string{
	"rocketmqHome", "configStorePath", "controllerType", "scanNotActiveBrokerInterval", "controllerThreadPoolNums",
	"controllerRequestThreadPoolQueueCapacity", "mappedFileSize", "electMasterMaxRetryCount", "isProcessReadEvent",
	"metricsExporterType", "metricsGrpcExporterTarget", "metricsGrpcExporterHeader", "metricGrpcExporterTimeOutInMills",
	"metricGrpcExporterIntervalInMills", "metricLoggingExporterIntervalInMills", "metricsPromExporterPort",
	"metricsPromExporterHost", "metricsLabel", "metricsInDelta", "configBlackList", "jRaftGroupId", "jRaftServerId",
	"jRaftAddress", "jRaftInitConf", "jRaftControllerRPCAddr", "jRaftElectionTimeoutMs", "jRaftScanWaitTimeoutMs",
	"jRaftSnapshotIntervalSecs",
}

func allKeys() []string {
	keys := slices.Clone(ignoredKeys)
	for k := range honoured {
		keys = append(keys, k)
	}
	return keys
}

// advertiseAddr is the remoting address to announce: --advertise-addr, or
// the bound listen address with an unspecified host replaced by the host of
// this node's Raft address (its --peers address, or with --join its
// --raft-listen host).
func (c *config) advertiseAddr(bound net.Addr) (string, error) {
	if c.advertise != "" {
		return c.advertise, nil
	}
	host, port, err := net.SplitHostPort(bound.String())
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		for _, p := range c.peers {
			if p.ID == c.id {
				host, _, _ = net.SplitHostPort(p.Addr)
			}
		}
		if len(c.join) > 0 {
			host, _, _ = net.SplitHostPort(c.raftListen)
		}
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			return "", fmt.Errorf("--listen %s is on every interface and no other address names a host brokers can reach: give --advertise-addr", bound)
		}
	}
	return net.JoinHostPort(host, port), nil
}
