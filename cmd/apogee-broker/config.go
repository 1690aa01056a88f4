package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/store"
)

// config is the broker's configuration after the file and the flags.
type config struct {
	listen, namesrvListen, advertise, brokerIP string
	namesrvs                                   []string
	dataDir, brokerName, cluster               string
	pprof, logLevel                            string
	autoCreate                                 bool
	defaultQueues, maxMessageSize              int
	store                                      store.Options
	// features: broker.Options fields set from broker.conf
	delayLevels                string
	txTimeout, txCheckInterval time.Duration
	txCheckMax                 int
	propertyFilter             bool
	timerMaxDelay              time.Duration
}

// parseConfig reads the flags and, with --config, a RocketMQ-style
// broker.conf; a flag given on the command line wins over the file.
func parseConfig(args []string) (*config, error) {
	fs := pflag.NewFlagSet("apogee-broker", pflag.ContinueOnError)
	listen := fs.String("listen", "0.0.0.0:10911", "broker address; it answers name-server requests too")
	nsListen := fs.String("namesrv-listen", "0.0.0.0:9876", `embedded name server's own listener ("" disables)`)
	namesrvs := fs.String("namesrv", "", `external name servers to register with, "host:port;host:port"`)
	advertise := fs.String("advertise-addr", "", "address put in routes (default: listen address, or the primary IPv4 on 0.0.0.0)")
	dataDir := fs.String("data-dir", "./apogee-data", "data directory")
	flush := fs.String("flush", "async", "flush mode: async or sync (group commit)")
	brokerName := fs.String("broker-name", "broker-a", "broker name")
	cluster := fs.String("cluster", "DefaultCluster", "cluster name")
	pprof := fs.String("pprof", "", "serve net/http/pprof on this address")
	configFile := fs.String("config", "", "RocketMQ-style broker.conf (key=value); flags win over the file")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	c := &config{
		listen: *listen, namesrvListen: *nsListen, advertise: *advertise, dataDir: *dataDir,
		brokerName: *brokerName, cluster: *cluster, pprof: *pprof, logLevel: *logLevel,
		autoCreate: true, defaultQueues: 8, maxMessageSize: 4 << 20, propertyFilter: true,
		namesrvs: splitNamesrvs(*namesrvs),
	}
	mode, err := store.ParseFlushMode(*flush)
	if err != nil {
		return nil, fmt.Errorf("--flush: %w", err)
	}
	c.store.FlushMode = mode
	if *configFile != "" {
		kv, err := readBrokerConf(*configFile)
		if err != nil {
			return nil, err
		}
		if err := c.applyFile(kv, fs); err != nil {
			return nil, fmt.Errorf("%s: %w", *configFile, err)
		}
	}
	return c, nil
}

// readBrokerConf reads key=value lines; '#' starts a comment line.
func readBrokerConf(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	defer f.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "!") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("%s:%d: expected key=value, got %q", path, n, line)
		}
		kv[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return kv, sc.Err()
}

// applyFile applies broker.conf keys that no flag overrides. Unknown keys are
// an error, so a typo does not silently fall back to a default.
func (c *config) applyFile(kv map[string]string, fs *pflag.FlagSet) error {
	set := func(flag string) bool { return !fs.Changed(flag) }
	for k, v := range kv {
		var err error
		switch k {
		case "brokerClusterName":
			if set("cluster") {
				c.cluster = v
			}
		case "brokerName":
			if set("broker-name") {
				c.brokerName = v
			}
		case "listenPort":
			if set("listen") {
				var port int
				if port, err = strconv.Atoi(v); err == nil {
					host := "0.0.0.0"
					if h, _, e := splitHost(c.listen); e == nil {
						host = h
					}
					c.listen = fmt.Sprintf("%s:%d", host, port)
				}
			}
		case "namesrvAddr":
			if set("namesrv") {
				c.namesrvs = splitNamesrvs(v)
			}
		case "storePathRootDir":
			if set("data-dir") {
				c.dataDir = v
			}
		case "flushDiskType":
			if set("flush") {
				c.store.FlushMode, err = store.ParseFlushMode(v)
			}
		case "autoCreateTopicEnable":
			c.autoCreate, err = strconv.ParseBool(v)
		case "defaultTopicQueueNums":
			c.defaultQueues, err = strconv.Atoi(v)
		case "fileReservedTime":
			var hours int
			if hours, err = strconv.Atoi(v); err == nil {
				c.store.RetentionTime = time.Duration(hours) * time.Hour
			}
		case "deleteWhen":
			// RocketMQ deletes expired files at this hour; Apogee checks every
			// 10 s and deletes a segment as soon as it expires. Accepted for
			// compatibility.
			_, err = strconv.Atoi(strings.Split(v, ";")[0])
		case "maxMessageSize":
			c.maxMessageSize, err = strconv.Atoi(v)
		case "brokerIP1":
			c.brokerIP = v
		case "diskMaxUsedSpaceRatio":
			var pct int
			if pct, err = strconv.Atoi(v); err == nil {
				c.store.DiskUsageRatio = float64(pct) / 100
			}
		case "mapedFileSizeCommitLog", "mappedFileSizeCommitLog":
			c.store.SegmentSize, err = strconv.ParseInt(v, 10, 64)
		case "messageDelayLevel":
			c.delayLevels = v
		case "transactionTimeOut":
			var ms int64
			if ms, err = strconv.ParseInt(v, 10, 64); err == nil {
				c.txTimeout = time.Duration(ms) * time.Millisecond
			}
		case "transactionCheckInterval":
			var ms int64
			if ms, err = strconv.ParseInt(v, 10, 64); err == nil {
				c.txCheckInterval = time.Duration(ms) * time.Millisecond
			}
		case "transactionCheckMax":
			c.txCheckMax, err = strconv.Atoi(v)
		case "enablePropertyFilter":
			c.propertyFilter, err = strconv.ParseBool(v)
		case "timerMaxDelaySec":
			var sec int64
			if sec, err = strconv.ParseInt(v, 10, 64); err == nil {
				c.timerMaxDelay = time.Duration(sec) * time.Second
			}
		case "brokerId", "brokerRole":
			// Only a master (id 0) exists so far.
		default:
			return fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return fmt.Errorf("%s=%s: %w", k, v, err)
		}
	}
	return nil
}

func splitHost(addr string) (string, string, error) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return "", "", fmt.Errorf("no port in %q", addr)
	}
	return addr[:i], addr[i+1:], nil
}
