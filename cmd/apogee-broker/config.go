package main

import (
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/internal/javaprops"
	"github.com/apogeemq/apogee/store"
)

// config is the broker's configuration after the file and the flags.
type config struct {
	listen, namesrvListen, advertise, brokerIP string
	namesrvs                                   []string
	dataDir, brokerName, cluster               string
	pprof, logLevel                            string
	readyFile                                  string        // --ready-file ("" none)
	logFormat                                  string        // text or json
	slowRequest                                time.Duration // 0: off
	// renew: the gRPC front end's renewal of auto_renew receives
	// (grpcfe.Options' Renew fields; zero: their defaults).
	renew                         grpcRenew
	showVersion                   bool
	autoCreate                    bool
	defaultQueues, maxMessageSize int
	store                         store.Options
	// features: broker.Options fields set from broker.conf
	delayLevels                string
	txTimeout, txCheckInterval time.Duration
	txCheckMax                 int
	propertyFilter             bool
	priorityZeroHighest        bool // !priorityOrderAsc
	priorityRetryFirst         int  // popFromRetryProbabilityForPriority
	timerMaxDelay              time.Duration
	// lite topics (core.Options.Lite*; 0: their default)
	liteMaxSubs, liteMaxEvents int
	liteMinTTL, liteTTLCheck   time.Duration
	// tuning: broker.Options and remoting.Options fields (0: their default)
	offsetFlush, registerInterval, busyTimeout, idleTimeout time.Duration
	receiveBudget                                           int64

	// role and brokerID are brokerRole and brokerId as the file or the
	// flags give them; commitLogPath is storePathCommitLog. finish checks
	// them.
	role          string
	brokerID      int64
	commitLogPath string
	// grpcListen is --grpc-listen ("" disables the gRPC front end).
	grpcListen string
	// Replication (docs/replication.md): the HA listener (haListen: ""
	// means the listen port + 1; a master's only), the host registered for
	// it (brokerIP2), a slave's explicit master (haMasterAddress), reads
	// from slaves and the memory window.
	haListen, brokerIP2, haMasterAddr string
	slaveReadEnable                   bool
	memoryRatio                       float64
	// Controller mode (docs/failover.md): the controllers' addresses, the
	// in-sync replica settings, the SyncStateSet's shrink delay and the
	// controller heartbeats.
	controllerMode                    bool
	controllerAddrs                   []string
	inSyncReplicas, minInSyncReplicas int
	allAckInSyncStateSet              bool
	maxTimeSlaveNotCatchup            time.Duration
	controllerHeartbeatTimeout        time.Duration
	controllerHeartbeatInterval       time.Duration
	// notes are the WARN lines the file calls for (ignored keys, settings
	// Apogee reads differently), logged once the logger exists.
	notes []note
	// sec is access control and TLS (security.go).
	sec securityConfig
	// metricsListen is --metrics-listen: Prometheus text at /metrics and
	// the dashboard at /; "" (the default) is off. The file's
	// metricsExporterType=PROM sets it from metricsPromExporterHost and
	// metricsPromExporterPort (finish), as RocketMQ 5 configures its
	// Prometheus exporter.
	metricsListen      string
	promType, promHost string
	promPort           int
	promPortSet        bool
	// dashboardHosts are --dashboard-hosts (operator.go).
	dashboardHosts []string
	// op is --metrics-auth and --pprof-allow-remote (operator.go).
	op operatorConfig
	// defaultNamesrv and defaultGRPC are the default addresses of the
	// embedded name server and the gRPC front end once finish gave them the
	// listen host (inheritHosts), for the error that names how an address
	// was chosen.
	defaultNamesrv, defaultGRPC string
	// fdHeadroom is --fd-headroom (0: remoting.DefaultFDHeadroom).
	fdHeadroom int
}

// note is one WARN line: a message and its attributes.
type note struct {
	msg   string
	attrs []any
}

// parseConfig reads the flags and, with --config (-c), a RocketMQ-style
// broker.conf; a flag given on the command line wins over the file.
func parseConfig(args []string) (*config, error) {
	fs := pflag.NewFlagSet("apogee-broker", pflag.ContinueOnError)
	listen := fs.String("listen", defaultListen, "broker address; it answers name-server requests too")
	nsListen := fs.String("namesrv-listen", defaultNamesrvListen, `embedded name server's own listener ("" disables)`)
	namesrvs := fs.String("namesrv", "", `external name servers to register with, "host:port;host:port"`)
	advertise := fs.String("advertise-addr", "", "address put in routes (default: listen address, or the primary IPv4 on 0.0.0.0)")
	dataDir := fs.String("data-dir", "./apogee-data", "data directory")
	flush := fs.String("flush", "async", "flush mode: async or sync (group commit)")
	brokerName := fs.String("broker-name", "broker-a", "broker name")
	cluster := fs.String("cluster", "DefaultCluster", "cluster name")
	pprof := fs.String("pprof", "", "serve net/http/pprof on this address")
	configFile := fs.StringP("config", "c", "", "RocketMQ broker.conf (Java properties); flags win over the file")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text (logfmt key=value lines) or json (one JSON object per line)")
	slowRequest := fs.Duration("slow-request", 500*time.Millisecond, "log requests whose handling held their connection longer than this (0 disables)")
	showVersion := fs.Bool("version", false, "print the version and the commit, and exit")
	acceptLoss := fs.Bool("recover-accept-loss", false, "start even when the commit log's segment files do not form one log (a segment missing between two, or none left): set the segments before the gap aside and start after it")
	scrubRate := fs.Int64("scrub-rate", 8<<20, "bytes per second the background scrubber reads to re-check the retained commit log and the consume queues (0 disables)")
	recycle := fs.Int("recycle-segments", 1, "retired commit-log segment files kept for reuse as new segments (their pages are likely cached; 0 unlinks every retired file)")
	truncKeep := fs.Duration("truncated-retention", 7*24*time.Hour, "how long a replica keeps the bytes a truncation cut (a file each under commitlog/truncated/) and the segments a restart discarded (commitlog/discarded/)")
	truncMax := fs.Int64("truncated-max-bytes", 1<<30, "total bytes kept under commitlog/truncated/: the oldest go beyond it, and a truncation cutting more keeps nothing (0 keeps nothing)")
	receiveBudget := fs.Int64("receive-budget", 0, "bytes all connections may hold for requests still being received (default 128 MiB)")
	grpcListen := fs.String("grpc-listen", defaultGRPCListen, `RocketMQ 5's gRPC MessagingService ("" disables)`)
	readyFile := fs.String("ready-file", "", "once every listener is open, write their bound addresses here as one JSON object (written atomically; removed when the process exits)")
	secFlags := addSecurityFlags(fs)
	brokerID := fs.Int64("broker-id", 0, "the broker's id in its group: 0 for a master, 1 or more for a slave")
	brokerRole := fs.String("broker-role", roleAsyncMaster, "ASYNC_MASTER, SYNC_MASTER (a send is answered once the slave has it) or SLAVE")
	haListen := fs.String("ha-listen", "", "a master's listener for its slaves' replication (default: the listen host, the listen port + 1)")
	haMaster := fs.String("ha-master-addr", "", "a slave's master HA address (default: learnt from the name servers)")
	slaveRead := fs.Bool("slave-read-enable", false, "suggest the slave to consumers that read far behind (slaveReadEnable)")
	ctrlMode := fs.Bool("enable-controller-mode", false, "controller mode (enableControllerMode): the controller group elects the master and fences the old one (docs/failover.md)")
	ctrlAddr := fs.String("controller-addr", "", `the controllers' addresses (controllerAddr), "host:port;host:port"`)
	metricsListen := fs.String("metrics-listen", "", `serve Prometheus metrics at /metrics and the dashboard at / on this address ("" disables)`)
	dashHosts := addDashboardFlags(fs)
	opF := addOperatorFlags(fs)
	fdHeadroom := fs.Int("fd-headroom", 0, "file descriptors kept free beyond those the store and the rest of the process hold: connections are refused before they would take them (default: a quarter of RLIMIT_NOFILE, 64 to 1024)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	// A listener not given an address of its own takes the listen host
	// (--listen's, or broker.conf's bindAddress): its default is kept
	// without a host here, and finish gives it one (inheritHosts).
	if !fs.Changed("namesrv-listen") {
		*nsListen = withoutHost(defaultNamesrvListen)
	}
	if !fs.Changed("grpc-listen") {
		*grpcListen = withoutHost(defaultGRPCListen)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c := &config{
		listen: *listen, namesrvListen: *nsListen, advertise: *advertise, dataDir: *dataDir,
		brokerName: *brokerName, cluster: *cluster, pprof: *pprof, readyFile: *readyFile, logLevel: *logLevel,
		logFormat: *logFormat, slowRequest: *slowRequest,
		autoCreate: true, defaultQueues: 8, maxMessageSize: 4 << 20, propertyFilter: true,
		namesrvs: splitNamesrvs(*namesrvs), showVersion: *showVersion, role: strings.ToUpper(*brokerRole),
		brokerID: *brokerID, haListen: *haListen, haMasterAddr: *haMaster, slaveReadEnable: *slaveRead,
		grpcListen:     *grpcListen,
		sec:            secFlags.config(),
		controllerMode: *ctrlMode, controllerAddrs: splitNamesrvs(*ctrlAddr),
	}
	if c.showVersion {
		return c, nil
	}
	mode, err := store.ParseFlushMode(*flush)
	if err != nil {
		return nil, fmt.Errorf("--flush: %w", err)
	}
	c.store.FlushMode = mode
	c.store.AcceptLoss = *acceptLoss
	c.store.ScrubRate = *scrubRate
	if c.store.ScrubRate <= 0 {
		c.store.ScrubRate = -1 // disabled
	}
	if *recycle < 0 {
		return nil, fmt.Errorf("--recycle-segments: want 0 or more files")
	}
	c.store.RecycleSegments = *recycle
	if *recycle == 0 {
		c.store.RecycleSegments = -1 // disabled
	}
	// Unset, they keep the store's defaults (the flags' defaults).
	if fs.Changed("truncated-retention") {
		if *truncKeep <= 0 {
			return nil, fmt.Errorf("--truncated-retention: want a positive duration")
		}
		c.store.TruncatedRetention = *truncKeep
	}
	if fs.Changed("truncated-max-bytes") {
		if err := c.setTruncatedMax(*truncMax); err != nil {
			return nil, fmt.Errorf("--truncated-max-bytes: %w", err)
		}
	}
	if *receiveBudget < 0 {
		return nil, fmt.Errorf("--receive-budget: want a positive number of bytes")
	}
	c.receiveBudget = *receiveBudget
	c.metricsListen = *metricsListen
	c.dashboardHosts = *dashHosts
	c.op = opF.config()
	if *fdHeadroom < 0 {
		return nil, fmt.Errorf("--fd-headroom: want 0 (the default) or more descriptors")
	}
	c.fdHeadroom = *fdHeadroom
	if *configFile != "" {
		props, err := javaprops.ReadFile(*configFile)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		if err := c.applyFile(props, fs); err != nil {
			return nil, fmt.Errorf("%s: %w", *configFile, err)
		}
		return c, nil
	}
	return c, c.finish()
}

// applyFile applies the file's keys in the file's order. A key Apogee
// honours is applied unless the flag that stands for it was given; a key of
// the Java broker's configuration that Apogee has no use for is noted for a
// WARN; any other key is an error, so a typo does not fall back to a default
// silently.
func (c *config) applyFile(props []javaprops.Property, fs *pflag.FlagSet) error {
	var opts optionsSet
	for _, p := range props {
		c.noteRepeats(p)
		if k, ok := honoured[p.Key]; ok {
			if k.flag != "" && fs.Changed(k.flag) {
				continue
			}
			c.noteConflict(&opts, p)
			if err := k.apply(c, p.Value); err != nil {
				return fmt.Errorf("line %d: %s=%s: %w", p.Line, p.Key, confShown(p.Key, p.Value), err)
			}
			continue
		}
		if _, ok := javaKeyClass[p.Key]; ok {
			c.notes = append(c.notes, note{"broker.conf: key ignored", []any{"key", p.Key, "value", confShown(p.Key, p.Value), "why", ignoredReason(p.Key)}})
			continue
		}
		msg := fmt.Sprintf("line %d: unknown key %q", p.Line, p.Key)
		if s := closestKey(p.Key); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return fmt.Errorf("%s; the keys of RocketMQ's broker configuration are listed in docs/operations.md", msg)
	}
	return c.finish()
}

// The broker roles of RocketMQ (MessageStoreConfig.brokerRole).
const (
	roleAsyncMaster = "ASYNC_MASTER"
	roleSyncMaster  = "SYNC_MASTER"
	roleSlave       = "SLAVE"
)

// finish checks the keys that depend on each other once the whole file is
// read.
func (c *config) finish() error {
	if err := c.checkNames(); err != nil {
		return err
	}
	if c.promType == "PROM" {
		host, port := c.promHost, c.promPort // no host: the listen host (inheritHosts)
		if !c.promPortSet {
			port = 5557
		}
		c.metricsListen = net.JoinHostPort(host, strconv.Itoa(port))
	}
	c.inheritHosts()
	if c.controllerMode {
		return c.finishControllerMode()
	}
	switch c.role {
	case roleSlave:
		if c.brokerID <= 0 {
			// RocketMQ's BrokerStartup refuses it too.
			return fmt.Errorf("brokerRole=SLAVE with brokerId=%d: a slave's brokerId (--broker-id) must be 1 or more", c.brokerID)
		}
	case roleAsyncMaster, roleSyncMaster:
		if c.brokerID != 0 {
			// RocketMQ sets a master's id to 0 whatever the file says.
			c.notes = append(c.notes, note{"brokerId ignored: a master is broker 0, as in RocketMQ", []any{"brokerId", c.brokerID, "brokerRole", c.role}})
			c.brokerID = 0
		}
	default:
		return fmt.Errorf("--broker-role %s: want ASYNC_MASTER, SYNC_MASTER or SLAVE", c.role)
	}
	if c.commitLogPath != "" {
		want := filepath.Join(c.dataDir, "commitlog")
		got, err1 := filepath.Abs(c.commitLogPath)
		abs, err2 := filepath.Abs(want)
		if err1 != nil || err2 != nil || got != abs {
			return fmt.Errorf("storePathCommitLog=%s: Apogee keeps the commit log in the data directory's commitlog/ (%s); "+
				"set storePathRootDir (or --data-dir) to the directory above it, or remove the key", c.commitLogPath, want)
		}
	}
	return nil
}

// confKey is a broker.conf key Apogee honours.
type confKey struct {
	// flag is the command-line flag that wins over the key ("" none).
	flag string
	// doc says what Apogee does with the key (a cell of the table in
	// docs/operations.md).
	doc   string
	apply func(c *config, v string) error
}

// honoured lists the keys of the Java broker's configuration that Apogee
// applies. Every other key in javaKeys is accepted and ignored with a WARN.
var honoured = map[string]confKey{
	"brokerClusterName": {"cluster", "`--cluster`: the cluster name", func(c *config, v string) error {
		c.cluster = v
		return nil
	}},
	"brokerName": {"broker-name", "`--broker-name`: the broker name in routes", func(c *config, v string) error {
		c.brokerName = v
		return nil
	}},
	"brokerId": {"broker-id", "`--broker-id`: the broker's id in its group. A slave's must be 1 or more; a master is broker 0 whatever the file says, as in RocketMQ (a WARN when it says otherwise)",
		func(c *config, v string) (err error) {
			c.brokerID, err = strconv.ParseInt(v, 10, 64)
			return err
		}},
	"brokerRole": {"broker-role", "`--broker-role`: `ASYNC_MASTER` (the default) answers a send once the master has it; `SYNC_MASTER` once its slave has it too (FLUSH_SLAVE_TIMEOUT or SLAVE_NOT_AVAILABLE otherwise); `SLAVE` replicates its master's commit log, refuses writes and serves reads (docs/replication.md)",
		func(c *config, v string) error {
			switch r := strings.ToUpper(v); r {
			case roleAsyncMaster, roleSyncMaster, roleSlave:
				c.role = r
				return nil
			}
			return fmt.Errorf("want ASYNC_MASTER, SYNC_MASTER or SLAVE")
		}},
	"namesrvAddr": {"namesrv", "`--namesrv`: name servers to register with (`host:port;host:port`). An address that reaches this broker's own embedded name server or its listen address (`127.0.0.1`, `localhost`, `0.0.0.0` or one of the host's addresses, with that port) is recognised: the broker does not register with itself",
		func(c *config, v string) error {
			c.namesrvs = splitNamesrvs(v)
			return nil
		}},
	"brokerIP1": {"advertise-addr", "the host of the advertised address (with the listen port), unless `--advertise-addr` is given", func(c *config, v string) error {
		c.brokerIP = v
		return nil
	}},
	"listenPort": {"listen", "the port of `--listen`; the host stays that of the default listen address (`0.0.0.0`), and the advertised address is chosen as without the key", func(c *config, v string) error {
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
	"bindAddress": {"listen", "the host of `--listen` (default `0.0.0.0`); `listenPort` gives its port. Every listener not given an address of its own takes this host too: the embedded name server, gRPC, HA and the metrics listener", func(c *config, v string) error {
		if v == "" || strings.ContainsAny(v, " /") {
			return fmt.Errorf("want a host or an IP address")
		}
		port := "10911"
		if _, p, e := net.SplitHostPort(c.listen); e == nil {
			port = p
		}
		c.listen = net.JoinHostPort(v, port)
		return nil
	}},
	"grpcListen": {"grpc-listen", "`--grpc-listen`: the address of RocketMQ 5's gRPC MessagingService (default: the listen host, port 8081; empty disables it; `:PORT` takes the listen host). Apogee's own key", func(c *config, v string) error {
		if v != "" {
			if _, _, err := net.SplitHostPort(v); err != nil {
				return fmt.Errorf("want host:port or nothing: %w", err)
			}
		}
		c.grpcListen = v
		return nil
	}},
	"grpcServerPort": {"grpc-listen", "the port of `--grpc-listen` (RocketMQ's proxy's key, `rmq-proxy.json`'s `grpcServerPort`); the host stays that of `grpcListen`, else the listen host (`bindAddress`). With `grpcListen` in the same file the later line wins (a WARN names both)", func(c *config, v string) error {
		port, err := strconv.Atoi(v)
		if err != nil || port < 0 || port > 65535 {
			return fmt.Errorf("want a port number")
		}
		host := ""
		if h, _, e := net.SplitHostPort(c.grpcListen); e == nil {
			host = h
		}
		c.grpcListen = net.JoinHostPort(host, strconv.Itoa(port))
		return nil
	}},
	"autoCreateTopicEnable": {"", "`true` (default): a send to an unknown topic creates it from `TBW102`, as RocketMQ does. `false`: such sends fail with TOPIC_NOT_EXIST; create topics with the admin API (`UPDATE_AND_CREATE_TOPIC`)",
		func(c *config, v string) (err error) {
			c.autoCreate, err = strconv.ParseBool(v)
			return err
		}},
	"defaultTopicQueueNums": {"", "queues of `TBW102`, hence the most an auto-created topic gets (default 8; the Go client asks for 4)", func(c *config, v string) (err error) {
		c.defaultQueues, err = positiveInt(v)
		return err
	}},
	"maxMessageSize": {"", "largest message body the broker stores, in bytes (default 4194304); a larger one is refused with MESSAGE_ILLEGAL (13)", func(c *config, v string) (err error) {
		c.maxMessageSize, err = positiveInt(v)
		return err
	}},
	"storePathRootDir": {"data-dir", "`--data-dir`", func(c *config, v string) error {
		c.dataDir = v
		return nil
	}},
	"storePathCommitLog": {"data-dir", "accepted when it is `<storePathRootDir>/commitlog`, where Apogee keeps the commit log; any other path is refused with an error (Apogee cannot put the commit log elsewhere)", func(c *config, v string) error {
		c.commitLogPath = v
		return nil
	}},
	"flushDiskType": {"flush", "`--flush`: `ASYNC_FLUSH` or `SYNC_FLUSH` (also `async`, `sync`)", func(c *config, v string) (err error) {
		c.store.FlushMode, err = store.ParseFlushMode(v)
		return err
	}},
	"fileReservedTime": {"", "hours to keep commit-log segments (retention; default 72)", func(c *config, v string) error {
		h, err := positiveInt(v)
		c.store.RetentionTime = time.Duration(h) * time.Hour
		return err
	}},
	"truncatedFileReservedTime": {"truncated-retention", "hours a replica keeps the bytes a truncation cut and the segments a restart discarded (`--truncated-retention`; default 168). Apogee's own key", func(c *config, v string) error {
		h, err := positiveInt(v)
		c.store.TruncatedRetention = time.Duration(h) * time.Hour
		return err
	}},
	"truncatedMaxBytes": {"truncated-max-bytes", "total bytes kept of truncations (`commitlog/truncated/`), the oldest removed beyond it; a truncation cutting more keeps nothing; 0 keeps nothing (`--truncated-max-bytes`; default 1073741824). Apogee's own key", func(c *config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("want a number of bytes")
		}
		return c.setTruncatedMax(n)
	}},
	"diskMaxUsedSpaceRatio": {"", "percent (default 75): while the file system is fuller than this, the oldest segments are deleted whatever their age", func(c *config, v string) error {
		pct, err := strconv.Atoi(v)
		if err != nil || pct < 1 || pct > 100 {
			return fmt.Errorf("want a percentage from 1 to 100")
		}
		c.store.DiskUsageRatio = float64(pct) / 100
		return nil
	}},
	"mappedFileSizeCommitLog":    {"", "commit-log segment size in bytes (default 1 GiB); must not change for an existing data directory", applySegmentSize},
	"mapedFileSizeCommitLog":     {"", "RocketMQ 4's spelling of `mappedFileSizeCommitLog`", applySegmentSize},
	"mappedFileSizeConsumeQueue": {"", "consume-queue file size in bytes, a multiple of 20 (one entry): the file holds this ÷ 20 entries (default 6000000, 300,000 entries); must not change for an existing data directory", applyConsumeQueueSize},
	"mapedFileSizeConsumeQueue":  {"", "RocketMQ 4's spelling of `mappedFileSizeConsumeQueue`", applyConsumeQueueSize},
	"maxHashSlotNum": {"", "hash slots of an index file (default 5000000)", func(c *config, v string) (err error) {
		c.store.IndexSlots, err = positiveInt(v)
		return err
	}},
	"maxIndexNum": {"", "entries of an index file (default 20000000)", func(c *config, v string) (err error) {
		c.store.IndexMaxEntries, err = positiveInt(v)
		return err
	}},
	"syncFlushTimeout": {"", "ms a `SYNC_FLUSH` send waits for its flush before it is answered FLUSH_DISK_TIMEOUT (default 5000)", func(c *config, v string) (err error) {
		c.store.SyncFlushTimeout, err = positiveMillis(v)
		return err
	}},
	"flushIntervalConsumeQueue": {"", "ms between flushes of the consume queues and the lite index (default 1000); the hash index is flushed with the checkpoint and when a file fills, as RocketMQ's IndexService does", func(c *config, v string) (err error) {
		c.store.FlushInterval, err = positiveMillis(v)
		return err
	}},
	"flushConsumeQueueThoroughInterval": {"", "ms between flushes of every consume queue with the store's checkpoint (default 10000 in Apogee, 60000 in RocketMQ)", func(c *config, v string) (err error) {
		c.store.CheckpointInterval, err = positiveMillis(v)
		return err
	}},
	"cleanResourceInterval": {"", "ms between checks for expired segments, consume-queue files and index files (default 10000)", func(c *config, v string) (err error) {
		c.store.CleanInterval, err = positiveMillis(v)
		return err
	}},
	"osPageCacheBusyTimeOutMills": {"", "ms without a completed store write, while writes are in progress, after which new sends are answered SYSTEM_BUSY (default 1000)", func(c *config, v string) (err error) {
		c.busyTimeout, err = positiveMillis(v)
		return err
	}},
	"flushConsumerOffsetInterval": {"", "ms between writes of the committed consumer offsets (default 5000)", func(c *config, v string) (err error) {
		c.offsetFlush, err = positiveMillis(v)
		return err
	}},
	"registerNameServerPeriod": {"", "ms between registrations with the external name servers (default 30000)", func(c *config, v string) (err error) {
		c.registerInterval, err = positiveMillis(v)
		return err
	}},
	"serverChannelMaxIdleTimeSeconds": {"", "seconds a connection may stay silent before the broker closes it (default 120)", func(c *config, v string) error {
		s, err := positiveInt(v)
		c.idleTimeout = time.Duration(s) * time.Second
		return err
	}},
	"messageDelayLevel": {"", "the delay levels, space-separated (default `1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h`)", func(c *config, v string) error {
		c.delayLevels = v
		return nil
	}},
	"timerMaxDelaySec": {"", "the longest delivery delay a timer message may ask for, in seconds (default 40 days)", func(c *config, v string) error {
		s, err := positiveInt(v)
		c.timerMaxDelay = time.Duration(s) * time.Second
		return err
	}},
	"defaultInvisibleTimeMills": {"", "ms a PushConsumer's (auto_renew) delivery is first invisible over gRPC (default 60000; RocketMQ's proxy's key)", func(c *config, v string) (err error) {
		c.renew.invisible, err = positiveMillis(v)
		return err
	}},
	"renewAheadTimeMillis": {"", "ms before an auto_renew delivery becomes visible that its renewal comes (default 10000; RocketMQ's proxy's key)", func(c *config, v string) (err error) {
		c.renew.ahead, err = positiveMillis(v)
		return err
	}},
	"renewSchedulePeriodMillis": {"", "ms between the gRPC front end's looks for auto_renew deliveries to renew (default 5000; RocketMQ's proxy's key)", func(c *config, v string) (err error) {
		c.renew.period, err = positiveMillis(v)
		return err
	}},
	"renewMaxTimeMillis": {"", "ms an auto_renew delivery is renewed at most, then visible again after the group's retry delay (default 10800000: 3 h; RocketMQ's proxy's key)", func(c *config, v string) (err error) {
		c.renew.max, err = positiveMillis(v)
		return err
	}},
	"invisibleTimeMillisWhenClear": {"", "ms after which the auto_renew deliveries of a client gone are visible again (default 1000; RocketMQ's proxy's key)", func(c *config, v string) (err error) {
		c.renew.clear, err = positiveMillis(v)
		return err
	}},
	"grpcRenewOfflineGraceMillis": {"", "ms a gRPC client's telemetry stream may be gone before its auto_renew deliveries are released (default 30000). Apogee's own key", func(c *config, v string) (err error) {
		c.renew.grace, err = positiveMillis(v)
		return err
	}},
	"grpcMaxRenewPerClient": {"", "auto_renew deliveries one gRPC client may hold (default 16384); a receive beyond is refused with TOO_MANY_REQUESTS. Apogee's own key", func(c *config, v string) (err error) {
		c.renew.perClient, err = positiveInt(v)
		return err
	}},
	"transactionTimeOut": {"", "ms before an unresolved half message is checked back (default 6000)", func(c *config, v string) (err error) {
		c.txTimeout, err = positiveMillis(v)
		return err
	}},
	"transactionCheckInterval": {"", "ms between check-backs of one half message (default 30000)", func(c *config, v string) (err error) {
		c.txCheckInterval, err = positiveMillis(v)
		return err
	}},
	"transactionCheckMax": {"", "check-backs before a half message goes to TRANS_CHECK_MAX_TIME_TOPIC (default 15)", func(c *config, v string) (err error) {
		c.txCheckMax, err = positiveInt(v)
		return err
	}},
	"enablePropertyFilter": {"", "SQL92 subscriptions (default `true` in Apogee; RocketMQ's default is `false`)", func(c *config, v string) (err error) {
		c.propertyFilter, err = strconv.ParseBool(v)
		return err
	}},
	"priorityOrderAsc": {"", "a PRIORITY topic's highest queue id is its highest priority (default `true`); `false`: queue 0 is (RocketMQ 5.4)", func(c *config, v string) error {
		asc, err := strconv.ParseBool(v)
		c.priorityZeroHighest = !asc
		return err
	}},
	"popFromRetryProbabilityForPriority": {"", "percent of a PRIORITY topic's pops that hand out retries before new messages (0..100, default 0: retries after the backlog; RocketMQ 5.4)", func(c *config, v string) error {
		p, err := strconv.Atoi(v)
		if err != nil || p < 0 || p > 100 {
			return fmt.Errorf("want a percentage, 0 to 100")
		}
		c.priorityRetryFirst = p
		return nil
	}},
	"maxLiteSubscriptionCount": {"", "the most active lite subscriptions (client × lite topic) the broker holds (default 100000); past it SyncLiteSubscription is refused with LITE_SUBSCRIPTION_QUOTA_EXCEEDED (RocketMQ 5.5)", func(c *config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive number")
		}
		c.liteMaxSubs = n
		return nil
	}},
	"maxClientEventCount": {"", "a lite client's event capacity when its group sets no lite.sub.client.max.event.cnt (default 100; RocketMQ 5.5)", func(c *config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive number")
		}
		c.liteMaxEvents = n
		return nil
	}},
	"minLiteTTl": {"", "milliseconds: the least idle time before a lite topic expires, and the wait after the start before the first expiry scan (default 900000, 15 min; RocketMQ 5.5)", func(c *config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive number of milliseconds")
		}
		c.liteMinTTL = time.Duration(n) * time.Millisecond
		return nil
	}},
	"liteTtlCheckInterval": {"", "milliseconds between two scans for idle lite topics (default 120000; RocketMQ 5.5)", func(c *config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive number of milliseconds")
		}
		c.liteTTLCheck = time.Duration(n) * time.Millisecond
		return nil
	}},
	"haListenPort": {"ha-listen", "`--ha-listen`'s port (its host is the listen host): where a master's slaves connect (default: the listen port + 1)", func(c *config, v string) error {
		port, err := strconv.Atoi(v)
		if err != nil || port < 0 || port > 65535 {
			return fmt.Errorf("want a port number")
		}
		c.haListen = ":" + strconv.Itoa(port)
		return nil
	}},
	"brokerIP2": {"", "the host of the HA address a master registers for its slaves (default: the advertised host, as `brokerIP1`)", func(c *config, v string) error {
		c.brokerIP2 = v
		return nil
	}},
	"haMasterAddress": {"ha-master-addr", "`--ha-master-addr`: a slave's master HA address (`host:port`); without it a slave follows the one the name servers answer its registration with", func(c *config, v string) error {
		if _, _, err := net.SplitHostPort(v); err != nil {
			return fmt.Errorf("want host:port")
		}
		c.haMasterAddr = v
		return nil
	}},
	"slaveReadEnable": {"slave-read-enable", "`--slave-read-enable`: a master's pull answer suggests the slave (the group's `whichBrokerWhenConsumeSlowly`) to a consumer that reads further behind than the memory window (default `false`)", func(c *config, v string) (err error) {
		c.slaveReadEnable, err = strconv.ParseBool(v)
		return err
	}},
	"accessMessageInMemoryMaxRatio": {"", "the memory window in percent of RAM (default 40): a consumer further behind the log's end reads from disk (`slaveReadEnable` then suggests the slave); fractions are accepted", func(c *config, v string) error {
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || r <= 0 || r > 100 {
			return fmt.Errorf("want a percentage above 0, at most 100")
		}
		c.memoryRatio = r
		return nil
	}},
	"haMaxGapNotInSync": {"", "bytes a SYNC_MASTER's slave may be behind a message and still be waited for (default 268435456); further behind, the send is answered SLAVE_NOT_AVAILABLE at once", func(c *config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive number of bytes")
		}
		c.store.MaxReplicaGap = n
		return nil
	}},
	"enableControllerMode": {"enable-controller-mode", "`--enable-controller-mode`: the controller group (`controllerAddr`) elects the group's master and fences the old one; `brokerRole` and `brokerId` are then the controller's to decide (docs/failover.md; default `false`)", func(c *config, v string) (err error) {
		c.controllerMode, err = strconv.ParseBool(v)
		return err
	}},
	"controllerAddr": {"controller-addr", "`--controller-addr`: the controllers' remoting addresses, `host:port;host:port`", func(c *config, v string) error {
		c.controllerAddrs = splitNamesrvs(v)
		return nil
	}},
	"inSyncReplicas":    {"", "controller mode: copies (the master's included, SyncStateSet members only) a message needs before SEND_OK (default 1)", ctlInt(func(c *config, n int) { c.inSyncReplicas = n })},
	"minInSyncReplicas": {"", "controller mode: with fewer members in the SyncStateSet the master refuses writes (SYSTEM_ERROR \"in-sync replicas not enough\"); above 1, SEND_OK also waits for every member (default 1)", ctlInt(func(c *config, n int) { c.minInSyncReplicas = n })},
	"allAckInSyncStateSet": {"", "controller mode: SEND_OK once every SyncStateSet member has the message (default `false`)", func(c *config, v string) (err error) {
		c.allAckInSyncStateSet, err = strconv.ParseBool(v)
		return err
	}},
	"haMaxTimeSlaveNotCatchup":        {"", "controller mode: ms a SyncStateSet member may stay behind the master's log (or away) before it leaves the set (default 15000)", ctlMillis(func(c *config, d time.Duration) { c.maxTimeSlaveNotCatchup = d })},
	"controllerHeartBeatTimeoutMills": {"", "controller mode: ms without a heartbeat after which the controller deems this broker dead (default: the controller's, 3000)", ctlMillis(func(c *config, d time.Duration) { c.controllerHeartbeatTimeout = d })},
	"brokerHeartbeatInterval":         {"", "controller mode: ms between heartbeats to each controller (default 1000)", ctlMillis(func(c *config, d time.Duration) { c.controllerHeartbeatInterval = d })},
	"enableDLegerCommitLog":           {"", "`false` is accepted; `true` is refused with an error: Apogee has no DLedger commit log", refuseTrue("Apogee has no DLedger commit log")},
	"metricsExporterType": {"metrics-listen", "`PROM` serves Prometheus metrics at `/metrics` and the dashboard at `/` on `metricsPromExporterHost:metricsPromExporterPort` (as `--metrics-listen`); `DISABLE` (the default) does not; `OTLP_GRPC` and `LOG` are refused (Apogee exports to Prometheus only)",
		func(c *config, v string) error {
			switch t := strings.ToUpper(strings.TrimSpace(v)); t {
			case "PROM", "DISABLE", "":
				c.promType = t
				return nil
			}
			return fmt.Errorf("want PROM or DISABLE: Apogee exports metrics to Prometheus only")
		}},
	"metricsPromExporterHost": {"metrics-listen", "the host of the metrics listener with `metricsExporterType=PROM` (default: the listen host, `bindAddress`)", func(c *config, v string) error {
		c.promHost = strings.TrimSpace(v)
		return nil
	}},
	"metricsPromExporterPort": {"metrics-listen", "the port of the metrics listener with `metricsExporterType=PROM` (default 5557, as RocketMQ)", func(c *config, v string) error {
		port, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || port < 0 || port > 65535 {
			return fmt.Errorf("want a port number")
		}
		c.promPort, c.promPortSet = port, true
		return nil
	}},
}

func applySegmentSize(c *config, v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return fmt.Errorf("want a positive size in bytes")
	}
	c.store.SegmentSize = n
	return nil
}

func applyConsumeQueueSize(c *config, v string) error {
	n, err := positiveInt(v)
	if err != nil {
		return err
	}
	if n%20 != 0 {
		return fmt.Errorf("want a multiple of 20 (the size of a consume-queue entry)")
	}
	c.store.ConsumeQueueEntries = n / 20
	return nil
}

// refuseTrue accepts false and refuses true with why.
func refuseTrue(why string) func(*config, string) error {
	return func(_ *config, v string) error {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return err
		}
		if on {
			return fmt.Errorf("%s; remove the key or set it to false", why)
		}
		return nil
	}
}

// setTruncatedMax sets the store's TruncatedMaxBytes from a flag's or a
// key's value, where 0 keeps nothing (the store's negative).
func (c *config) setTruncatedMax(n int64) error {
	switch {
	case n < 0:
		return fmt.Errorf("want 0 or more bytes")
	case n == 0:
		c.store.TruncatedMaxBytes = -1
	default:
		c.store.TruncatedMaxBytes = n
	}
	return nil
}

func positiveInt(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("want a positive integer")
	}
	return n, nil
}

func positiveMillis(v string) (time.Duration, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > int64(time.Duration(1<<62)/time.Millisecond) {
		return 0, fmt.Errorf("want a positive number of milliseconds")
	}
	return time.Duration(n) * time.Millisecond, nil
}

// javaClass is one configuration class of the Java broker and its keys.
type javaClass struct {
	name string
	keys []string
}

// javaKeyClass maps each key of javaKeys to the classes that declare it.
var javaKeyClass = func() map[string][]string {
	m := map[string][]string{}
	for _, c := range javaKeys {
		for _, k := range c.keys {
			m[k] = append(m[k], c.name)
		}
	}
	return m
}()

// ignoredReason says why Apogee has no use for a key of the Java broker.
func ignoredReason(key string) string {
	if r, ok := ignoredWhy[key]; ok {
		return r
	}
	for _, r := range ignoredRules {
		for _, w := range r.words {
			if p, ok := strings.CutPrefix(w, "^"); ok && strings.HasPrefix(key, p) || !ok && strings.Contains(key, w) {
				return r.why
			}
		}
	}
	if slices.Contains(javaKeyClass[key], "NettyClientConfig") {
		return "tunes the Java broker's outgoing connections; Apogee's have their own defaults"
	}
	return "no counterpart in Apogee"
}

// ignoredWhy gives the reason for single keys users often set.
var ignoredWhy = map[string]string{
	"deleteWhen":                      "Apogee deletes a segment as soon as it is older than fileReservedTime (checked every cleanResourceInterval), not at a set hour",
	"rocketmqHome":                    "Apogee needs no installation directory",
	"inBrokerContainer":               "broker containers are not implemented",
	"brokerPermission":                "the broker's routes are always readable and writable",
	"autoCreateSubscriptionGroup":     "subscription groups are always created on first use",
	"longPollingEnable":               "pulls are always held (long polling)",
	"messageIndexEnable":              "message keys and ids are always indexed",
	"messageIndexSafe":                "the index is rebuilt from the commit log after a crash",
	"flushIntervalCommitLog":          "the asynchronous flusher's interval is fixed (about 500 ms)",
	"flushCommitLogLeastPages":        "the asynchronous flusher flushes what is dirty",
	"flushCommitLogThoroughInterval":  "the asynchronous flusher flushes what is dirty",
	"flushCommitLogTimed":             "the asynchronous flusher is woken by writes and by its interval",
	"flushConsumeQueueLeastPages":     "consume queues with at least two dirty pages are flushed (fixed)",
	"transientStorePoolEnable":        "writes go straight to the mapped segments; there is no off-heap buffer pool",
	"storePathDLedgerCommitLog":       "Apogee has no DLedger commit log",
	"storePathEpochFile":              "the epoch file is the data directory's epochFileCheckpoint",
	"storePathBrokerIdentity":         "the broker's controller identity is the data directory's controllerIdentity.json",
	"readOnlyCommitLogStorePaths":     "the commit log lives in one directory",
	"warmMapedFileEnable":             "the next segment is always allocated and pre-touched ahead of need",
	"rmqAddressServerDomain":          "name servers are given by namesrvAddr or --namesrv, never looked up over HTTP",
	"rmqAddressServerSubGroup":        "name servers are given by namesrvAddr or --namesrv, never looked up over HTTP",
	"fetchNamesrvAddrByAddressServer": "name servers are given by namesrvAddr or --namesrv, never looked up over HTTP",
	"useSeparateRetryQueue":           "a POP retry is redelivered from its own queue (a PRIORITY topic's: its priority's), what RocketMQ's useSeparateRetryQueue=true gives",
}

// ignoredRules give a reason by a word in the key ("^word": at its start),
// the first rule that matches.
var ignoredRules = []struct {
	words []string
	why   string
}{
	{[]string{"ThreadPool", "Threads", "ThreadNum", "ThreadPoolNums", "QueueCapacity", "PoolNums", "waitTimeMillsIn"}, "tunes a thread pool or its queue: Apogee serves requests on goroutines and has no pools to size"},
	{[]string{"LockWhenPut", "ABSLock", "spinLock", "topicQueueLockNum"}, "tunes the Java store's put lock; Apogee serialises appends its own way"},
	{[]string{"dLeger", "DLeger", "dLedger", "DLedger"}, "Apogee has no DLedger commit log"},
	{[]string{"controller", "Controller", "SyncStateSet", "syncStateSet", "InSyncReplicas", "ElectionPriority"}, "controller mode is not implemented yet"},
	{[]string{"slave", "Slave", "^ha", "HA", "HaTransfer", "Replicas", "replicas"}, "tunes a part of RocketMQ's replication Apogee fixes or does not have (docs/replication.md: the HA stream's own defaults, no acting master, no automatic failover)"},
	{[]string{"rocksdb", "RocksDB", "Rocksdb", "rocksDB", "RocksDb"}, "Apogee's store has no RocksDB"},
	{[]string{"tls", "Tls", "TLS"}, "the broker's TLS is set by tls.server.* or --tls-mode (its listeners) and tls.enable, tls.client.* or --tls-enable, --ha-tls, --controller-tls (its own connections; docs/security.md)"},
	{[]string{"acl", "Acl", "auth", "Auth", "User", "userCache", "Whitelist", "Credentials"}, "tunes the Java broker's authentication plug-ins and caches; Apogee's access control is configured by aclEnable and aclFile (docs/security.md)"},
	{[]string{"pop", "Pop", "revive", "Revive"}, "tunes the Java broker's POP internals; Apogee's POP has its own design"},
	{[]string{"timer", "Timer"}, "tunes the Java broker's timer wheel; Apogee's timer has its own design"},
	{[]string{"transaction", "Transaction"}, "tunes the Java broker's transaction checker; Apogee's has its own design"},
	{[]string{"metric", "Metric", "Stats", "stats", "commercial"}, "metrics and statistics are not configured this way"},
	{[]string{"compaction", "Compaction", "compacted"}, "compacted topics are not implemented"},
	{[]string{"lmq", "Lmq", "LMQ"}, "light message queues are not implemented"},
	{[]string{"Netty", "netty", "Epoll", "Socket", "socket", "Pooled", "WriteBuffer", "writeBuffer", "Semaphore", "Channel"}, "tunes Netty; Apogee's remoting layer has its own limits"},
	{[]string{"swap", "Swap", "MapedFile", "MappedFile", "mappedFile"}, "tunes the Java store's mapped files; Apogee's store manages its own"},
}

// closestKey returns the key of the Java broker's configuration nearest to
// k, if it is close enough to be a likely typo.
func closestKey(k string) string { return javaprops.Closest(k, javaKeyNames) }

// javaKeyNames lists javaKeyClass's keys, for closestKey.
var javaKeyNames = func() []string {
	names := make([]string, 0, len(javaKeyClass))
	for k := range javaKeyClass {
		names = append(names, k)
	}
	return names
}()

// finishControllerMode checks a controller-mode configuration: the role and
// id are the controller's (a SLAVE role is taken as "not the first
// master"; a positive brokerId is claimed from the controller).
func (c *config) finishControllerMode() error {
	if len(c.controllerAddrs) == 0 {
		return fmt.Errorf("enableControllerMode=true needs controllerAddr (--controller-addr)")
	}
	switch c.role {
	case roleAsyncMaster, roleSyncMaster, roleSlave:
	default:
		return fmt.Errorf("--broker-role %s: want ASYNC_MASTER, SYNC_MASTER or SLAVE", c.role)
	}
	if c.haMasterAddr != "" {
		return fmt.Errorf("haMasterAddress (--ha-master-addr) with enableControllerMode=true: the controller names the master")
	}
	return nil
}

func ctlInt(set func(*config, int)) func(*config, string) error {
	return func(c *config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive integer")
		}
		set(c, n)
		return nil
	}
}

func ctlMillis(set func(*config, time.Duration)) func(*config, string) error {
	return func(c *config, v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("want a positive number of milliseconds")
		}
		set(c, time.Duration(n)*time.Millisecond)
		return nil
	}
}
