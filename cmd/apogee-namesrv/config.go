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
	"github.com/apogeemq/apogee/internal/limitflags"
	"github.com/apogeemq/apogee/namesrv"
)

// config is the name server's configuration after the file and the flags.
type config struct {
	listen, dataDir, pprof, logLevel string
	// pprofAllowRemote is --pprof-allow-remote.
	pprofAllowRemote bool
	// readyFile is --ready-file: where the bound addresses are written
	// once the listeners are open ("" none).
	readyFile string
	logFormat string // text or json
	// kvPath is the KV config's file: dataDir/kvConfig.json, or kvConfigPath
	// from the file (then dataDir is its directory).
	kvPath      string
	showVersion bool
	// brokerTimeout and scanInterval are namesrv.Options' (0: their default).
	brokerTimeout, scanInterval time.Duration
	// idleTimeout is remoting.Options.IdleTimeout (0: its default, 120 s).
	idleTimeout time.Duration
	// notes are the WARN lines the file calls for (ignored keys), logged once
	// the logger exists.
	notes []note
	// tls is the listener's TLS (tls.go).
	tls tlsConfig
	// acl is the access control (acl.go).
	acl aclConfig
	// limits are the connection limits (package limitflags).
	limits limitflags.Config
}

// note is one WARN line: a message and its attributes.
type note struct {
	msg   string
	attrs []any
}

// parseConfig reads the flags and, with --config (-c), a RocketMQ
// namesrv.properties; a flag given on the command line wins over the file.
func parseConfig(args []string) (*config, error) {
	fs := pflag.NewFlagSet("apogee-namesrv", pflag.ContinueOnError)
	listen := fs.String("listen", "0.0.0.0:9876", "address to serve name-server requests on")
	dataDir := fs.String("data-dir", "./apogee-namesrv-data", "data directory (the KV config, kvConfig.json)")
	brokerTimeout := fs.Duration("broker-timeout", namesrv.DefaultBrokerTimeout,
		"a broker that has not registered for this long is dropped from routes (a registration's own heartbeatTimeoutMillis wins)")
	scanInterval := fs.Duration("scan-interval", namesrv.DefaultScanInterval, "how often silent brokers are looked for")
	pprof := fs.String("pprof", "", "serve net/http/pprof on this address (loopback unless --pprof-allow-remote; under --acl a Super user only)")
	pprofRemote := fs.Bool("pprof-allow-remote", false, "serve --pprof on an address that is not loopback (refused otherwise)")
	readyFile := fs.String("ready-file", "", "once listening, write the bound addresses here as one JSON object (written atomically; removed when the process exits)")
	configFile := fs.StringP("config", "c", "", "RocketMQ namesrv.properties (Java properties); flags win over the file")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	logFormat := fs.String("log-format", "text", "text (logfmt key=value lines) or json (one JSON object per line)")
	showVersion := fs.Bool("version", false, "print the version and the commit, and exit")
	tlsF := addTLSFlags(fs)
	aclF := addACLFlags(fs)
	limF := limitflags.Add(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c := &config{listen: *listen, dataDir: *dataDir, pprof: *pprof, pprofAllowRemote: *pprofRemote, readyFile: *readyFile, logLevel: *logLevel, logFormat: *logFormat,
		showVersion: *showVersion, brokerTimeout: *brokerTimeout, scanInterval: *scanInterval, tls: tlsF.config(),
		acl: aclF.config()}
	if c.showVersion {
		return c, nil
	}
	var err error
	if c.limits, err = limF.Config(); err != nil {
		return nil, err
	}
	if c.brokerTimeout <= 0 {
		return nil, fmt.Errorf("--broker-timeout: want a positive duration")
	}
	if c.scanInterval <= 0 {
		return nil, fmt.Errorf("--scan-interval: want a positive duration")
	}
	if *configFile != "" {
		props, err := javaprops.ReadFile(*configFile)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		if err := c.applyFile(props, fs); err != nil {
			return nil, fmt.Errorf("%s: %w", *configFile, err)
		}
	}
	if c.kvPath == "" {
		c.kvPath = filepath.Join(c.dataDir, namesrv.KVConfigFileName)
	}
	return c, nil
}

// applyFile applies the file's keys in the file's order. A key Apogee
// honours is applied unless the flag that stands for it was given; a key of
// the Java name server's configuration that Apogee has no use for is noted
// for a WARN; any other key is an error, so that a typo does not fall back to
// a default silently.
func (c *config) applyFile(props []javaprops.Property, fs *pflag.FlagSet) error {
	for _, p := range props {
		for _, r := range p.Replaced {
			c.notes = append(c.notes, note{"namesrv.properties: a key given twice; the last line wins (as Java's Properties): remove the other line",
				[]any{"key", p.Key, "line", r.Line, "value", r.Value, "winning_line", p.Line, "winning_value", p.Value}})
		}
		if k, ok := honoured[p.Key]; ok {
			if k.flag != "" && fs.Changed(k.flag) {
				continue
			}
			if err := k.apply(c, p.Value); err != nil {
				return fmt.Errorf("line %d: %s=%s: %w", p.Line, p.Key, p.Value, err)
			}
			continue
		}
		if why, ok := ignored(p.Key); ok {
			c.notes = append(c.notes, note{"namesrv.properties: key ignored", []any{"key", p.Key, "value", p.Value, "why", why}})
			continue
		}
		msg := fmt.Sprintf("line %d: unknown key %q", p.Line, p.Key)
		if s := javaprops.Closest(p.Key, allKeys()); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return fmt.Errorf("%s; the keys of RocketMQ's name-server configuration are listed in docs/operations.md", msg)
	}
	return nil
}

// confKey is a namesrv.properties key Apogee honours.
type confKey struct {
	// flag is the command-line flag that wins over the key ("" none).
	flag  string
	apply func(c *config, v string) error
}

// honoured lists the keys of the Java name server's configuration
// (NamesrvConfig, NettyServerConfig) that Apogee applies.
var honoured = map[string]confKey{
	"listenPort": {"listen", func(c *config, v string) error {
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
	"bindAddress": {"listen", func(c *config, v string) error {
		if v == "" || strings.ContainsAny(v, " /") {
			return fmt.Errorf("want a host or an IP address")
		}
		port := "9876"
		if _, p, e := net.SplitHostPort(c.listen); e == nil {
			port = p
		}
		c.listen = net.JoinHostPort(v, port)
		return nil
	}},
	"kvConfigPath": {"data-dir", func(c *config, v string) error {
		if v == "" || strings.HasSuffix(v, "/") {
			return fmt.Errorf("want a file path")
		}
		c.kvPath = v
		c.dataDir = filepath.Dir(v)
		return nil
	}},
	"scanNotActiveBrokerInterval": {"scan-interval", func(c *config, v string) (err error) {
		c.scanInterval, err = positiveMillis(v)
		return err
	}},
	"serverChannelMaxIdleTimeSeconds": {"", func(c *config, v string) error {
		s, err := strconv.Atoi(v)
		if err != nil || s <= 0 {
			return fmt.Errorf("want a positive number of seconds")
		}
		c.idleTimeout = time.Duration(s) * time.Second
		return nil
	}},
	"enableControllerInNamesrv": {"", func(_ *config, v string) error {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return err
		}
		if on {
			return fmt.Errorf("controller mode is not implemented yet; remove the key or set it to false")
		}
		return nil
	}},
}

func positiveMillis(v string) (time.Duration, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > int64(time.Duration(1<<62)/time.Millisecond) {
		return 0, fmt.Errorf("want a positive number of milliseconds")
	}
	return time.Duration(n) * time.Millisecond, nil
}

// The keys of the Java name server's configuration classes: the setters of
// NamesrvConfig, NettyServerConfig and NettyClientConfig, which NamesrvStartup
// fills from the file with MixAll.properties2Object (RocketMQ 4.x and 5.x; the
// NettyClientConfig since 5.0). ControllerConfig's keys are read only with
// enableControllerInNamesrv=true, which is refused.
var (
	namesrvConfigKeys = []string{
		"clientRequestThreadPoolNums", "clientRequestThreadPoolQueueCapacity", "clusterTest", "configBlackList",
		"configStorePath", "defaultThreadPoolNums", "defaultThreadPoolQueueCapacity",
		"deleteTopicWithBrokerRegistration", "enableAllTopicList", "enableControllerInNamesrv", "enableTopicList",
		"kvConfigPath", "needWaitForService", "notifyMinBrokerIdChangeTimeoutMillis", "notifyMinBrokerIdChanged",
		"orderMessageEnable", "productEnvName", "returnOrderTopicConfigToBroker", "rocketmqHome",
		"scanNotActiveBrokerInterval", "supportActingMaster", "unRegisterBrokerQueueCapacity", "waitSecondsForService",
	}
	nettyServerKeys = []string{
		"bindAddress", "enableShutdownGracefully", "listenPort", "serverAsyncSemaphoreValue",
		"serverCallbackExecutorThreads", "serverChannelMaxIdleTimeSeconds", "serverNettyWorkerGroupEnable",
		"serverOnewaySemaphoreValue", "serverPooledByteBufAllocatorEnable", "serverSelectorThreads",
		"serverSocketBacklog", "serverSocketRcvBufSize", "serverSocketSndBufSize", "serverWorkerThreads",
		"shutdownWaitTimeSeconds", "useEpollNativeSelector", "writeBufferHighWaterMark", "writeBufferLowWaterMark",
	}
	nettyClientKeys = []string{
		"channelNotActiveInterval", "clientAsyncSemaphoreValue", "clientCallbackExecutorThreads",
		"clientChannelMaxIdleTimeSeconds", "clientCloseSocketIfTimeout", "clientOnewaySemaphoreValue",
		"clientPooledByteBufAllocatorEnable", "clientSocketRcvBufSize", "clientSocketSndBufSize",
		"clientWorkerThreads", "connectTimeoutMillis", "disableCallbackExecutor", "disableNettyWorkerGroup",
		"enableReconnectForGoAway", "maxReconnectIntervalTimeSeconds", "scanAvailableNameSrv",
		"socksProxyConfig", "useTLS", "writeBufferHighWaterMark", "writeBufferLowWaterMark",
	}
)

// ignoredWhy gives the reason Apogee has no use for a NamesrvConfig key.
var ignoredWhy = map[string]string{
	"rocketmqHome":                         "Apogee needs no installation directory",
	"configStorePath":                      "the configuration is not rewritten at run time (UPDATE_NAMESRV_CONFIG is not supported)",
	"configBlackList":                      "the configuration is not rewritten at run time (UPDATE_NAMESRV_CONFIG is not supported)",
	"productEnvName":                       "cluster-test mode is not implemented",
	"clusterTest":                          "cluster-test mode is not implemented",
	"orderMessageEnable":                   "routes always carry orderTopicConf when the ORDER_TOPIC_CONFIG namespace has the topic",
	"returnOrderTopicConfigToBroker":       "registrations are always answered with the ORDER_TOPIC_CONFIG namespace",
	"enableAllTopicList":                   "topic lists are always answered",
	"enableTopicList":                      "topic lists are always answered",
	"deleteTopicWithBrokerRegistration":    "a master's full registration always replaces its topic set, which is what this key turns on in Java",
	"supportActingMaster":                  "acting masters are not implemented",
	"notifyMinBrokerIdChanged":             "brokers are not notified when the smallest broker id of their group changes",
	"notifyMinBrokerIdChangeTimeoutMillis": "brokers are not notified when the smallest broker id of their group changes",
	"needWaitForService":                   "the name server answers as soon as it listens",
	"waitSecondsForService":                "the name server answers as soon as it listens",
	"unRegisterBrokerQueueCapacity":        "unregistrations are applied at once, not queued",
}

// ignored reports whether key is a key of the Java name server that Apogee
// accepts without using, and why.
func ignored(key string) (string, bool) {
	if _, ok := honoured[key]; ok {
		return "", false
	}
	if why, ok := ignoredWhy[key]; ok {
		return why, true
	}
	switch {
	case slices.Contains(namesrvConfigKeys, key):
		return "tunes a thread pool or its queue: Apogee serves requests on goroutines and has no pools to size", true
	case slices.Contains(nettyServerKeys, key):
		return "tunes Netty; Apogee's remoting layer has its own limits", true
	case slices.Contains(nettyClientKeys, key):
		return "tunes the Java name server's outgoing connections (controller mode); Apogee's name server makes none", true
	}
	return "", false
}

// allKeys is every key of the Java name server's configuration, for typo
// suggestions.
func allKeys() []string {
	return slices.Concat(namesrvConfigKeys, nettyServerKeys, nettyClientKeys, tlsSystemKeys)
}
