package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/ctrlmode"
	"github.com/apogeemq/apogee/broker/dashboard"
	"github.com/apogeemq/apogee/broker/metrics"
	"github.com/apogeemq/apogee/internal/opauth"
	"github.com/apogeemq/apogee/protocol"
)

// observeRequest is the broker's per-request hook for the request latency
// histogram, or nil without one (no request is timed for it).
func observeRequest(rpc *metrics.RPCLatency) func(code, respCode int32, took time.Duration) {
	if rpc == nil {
		return nil
	}
	return rpc.Observe
}

// grpcServerOptions are the gRPC front end's interceptors that time its
// calls for rocketmq_rpc_latency (none without metrics).
func grpcServerOptions(g *metrics.GRPCLatency) []grpc.ServerOption {
	if g == nil {
		return nil
	}
	return g.ServerOptions()
}

// dashboardHostsHint is how the dashboard's 403 to an unknown Host tells
// the operator to allow the name.
const dashboardHostsHint = "start apogee-broker with --dashboard-hosts NAME (broker.conf: dashboardHosts=NAME; several names comma-separated, *.domain for every name under it)"

// addDashboardFlags registers --dashboard-hosts.
func addDashboardFlags(fs *pflag.FlagSet) *[]string {
	return fs.StringSlice("dashboard-hosts", nil, "names the dashboard answers under besides the machine's own (its IP addresses, localhost, its host name): the names operators reach it by, comma-separated; *.domain allows every name under domain (DNS rebinding: any other Host is refused)")
}

// splitHosts reads a comma-separated list of names.
func splitHosts(v string) []string {
	var out []string
	for _, h := range strings.Split(v, ",") {
		if h = strings.TrimSpace(h); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// operatorConfig is how the operator's HTTP endpoints are guarded under
// access control.
type operatorConfig struct {
	// metricsAuth is --metrics-auth (metricsAuthEnable): under ACL,
	// /metrics needs basic authentication with an ACL user (default on).
	metricsAuth bool
	// pprofAllowRemote is --pprof-allow-remote: pprof may listen on an
	// address that is not loopback.
	pprofAllowRemote bool
	// traceTopicEnable is --trace-topic-enable (traceTopicEnable): the
	// trace topic is created at start. traceTopic is --trace-topic
	// (msgTraceTopicName), the topic the dashboard's trace view reads.
	traceTopicEnable bool
	traceTopic       string
}

type operatorFlags struct {
	metricsAuth, pprofAllowRemote, traceTopicEnable *bool
	traceTopic                                      *string
}

// addOperatorFlags registers --metrics-auth and --pprof-allow-remote.
func addOperatorFlags(fs *pflag.FlagSet) operatorFlags {
	return operatorFlags{
		metricsAuth: fs.Bool("metrics-auth", true, "under access control (--acl, --acl-file), /metrics on --metrics-listen needs HTTP basic authentication with an ACL user "+
			"(access key and secret key) that may read runtime info (Get on the Cluster resource) or is Super; --metrics-auth=false leaves it open (a WARN at start)"),
		pprofAllowRemote: fs.Bool("pprof-allow-remote", false, "serve --pprof on an address that is not loopback (refused otherwise); under access control it needs a Super user"),
		traceTopicEnable: fs.Bool("trace-topic-enable", false, "create the trace topic (--trace-topic) at start with one queue, for clients that send message traces (RocketMQ's traceTopicEnable; the clients cannot auto-create it)"),
		traceTopic:       fs.String("trace-topic", dashboard.DefaultTraceTopic, "the topic the clients' message traces go to (RocketMQ's msgTraceTopicName): created at start with --trace-topic-enable, read by the dashboard's trace view"),
	}
}

func (f operatorFlags) config() operatorConfig {
	return operatorConfig{metricsAuth: *f.metricsAuth, pprofAllowRemote: *f.pprofAllowRemote,
		traceTopicEnable: *f.traceTopicEnable, traceTopic: *f.traceTopic}
}

// traceTopicAtStart is the core's TraceTopic: the trace topic when
// --trace-topic-enable, else "".
func (c operatorConfig) traceTopicAtStart() string {
	if c.traceTopicEnable {
		return c.traceTopic
	}
	return ""
}

func init() {
	honoured["metricsAuthEnable"] = confKey{"metrics-auth", "`--metrics-auth`: under access control (`aclEnable`, `aclFile`), `/metrics` needs HTTP basic authentication with an ACL user allowed to read runtime info (`true`, the default); `false` leaves it open, with a WARN at start (docs/metrics.md). Apogee's own key", func(c *config, v string) (err error) {
		c.op.metricsAuth, err = strconv.ParseBool(v)
		return err
	}}
	honoured["traceTopicEnable"] = confKey{"trace-topic-enable", "`--trace-topic-enable`: the trace topic (`msgTraceTopicName`) is created at start with one queue, for clients that send message traces (`false`, the default, as RocketMQ's)", func(c *config, v string) (err error) {
		c.op.traceTopicEnable, err = strconv.ParseBool(v)
		return err
	}}
	honoured["msgTraceTopicName"] = confKey{"trace-topic", "`--trace-topic`: the topic the clients' message traces go to (default `RMQ_SYS_TRACE_TOPIC`), created at start with `traceTopicEnable` and read by the dashboard's trace view", func(c *config, v string) error {
		if v = strings.TrimSpace(v); v != "" {
			c.op.traceTopic = v
		}
		return nil
	}}
	honoured["dashboardHosts"] = confKey{"dashboard-hosts", "`--dashboard-hosts`: names the dashboard answers under besides the machine's own (its IP addresses, `localhost`, its host name), comma-separated; `*.domain` allows every name under it. Any other `Host` is refused (DNS rebinding; docs/metrics.md). Apogee's own key", func(c *config, v string) error {
		c.dashboardHosts = splitHosts(v)
		return nil
	}}
}

// dashboardConfig is what the dashboard takes from the broker's
// configuration.
type dashboardConfig struct {
	// guard, when access control is on, is who logs in: an ACL user, who
	// may do what its policies allow (nil: no login, every action open).
	guard *acl.Guard
	// hosts are --dashboard-hosts.
	hosts []string
	// plain is true when the listener serves plain HTTP (no --tls-mode).
	plain bool
	// addr is the listener's address.
	addr net.Addr
	// metricsAuth: /metrics needs basic authentication when guard is not
	// nil (--metrics-auth).
	metricsAuth bool
	// traceTopic is --trace-topic: the dashboard's trace view reads it.
	traceTopic string
}

// operatorHandler is what the --metrics-listen port serves: Prometheus
// text at /metrics, the dashboard at /.
// With access control on, the dashboard's actions need a login as an ACL
// user, and /metrics HTTP basic authentication with an ACL user who may
// read runtime info (unless --metrics-auth=false); the two count failed
// logins per source together. grpcStats (nil without the gRPC front end)
// feeds the apogee_grpc_* series.
//
// The handler has a Close (node calls it at shutdown): it stops the
// dashboard's history sampler. ctl is the controller-mode node (nil in
// classic mode): the dashboard's broker group page reads it.
func operatorHandler(b *broker.Broker, ctl *ctrlmode.Node, rpc *metrics.RPCLatency, grpcLat *metrics.GRPCLatency, dc dashboardConfig, logger *slog.Logger, grpcStats func() metrics.GRPCStats) (http.Handler, error) {
	exp, err := metrics.New(metrics.Options{Core: b.Core(), RPC: rpc, Remoting: b.RemotingStats, GRPC: grpcStats})
	if err != nil {
		return nil, err
	}
	if grpcLat != nil {
		if err := exp.Registry().Register(grpcLat); err != nil {
			return nil, err
		}
	}
	failures := opauth.NewFailures()
	do := dashboard.Options{Logger: logger, Hosts: dc.hosts, HostsHint: dashboardHostsHint, Failures: failures, TraceTopic: dc.traceTopic}
	if rpc != nil {
		do.SendLatency = func() ([]float64, []uint64) {
			return rpc.Buckets(protocol.ReqSendMessage, protocol.ReqSendMessageV2, protocol.ReqSendBatchMessage)
		}
	}
	if ctl != nil {
		do.Controller = controllerView(ctl, b.Core().Options().BrokerName)
	}
	var metricsH http.Handler = exp.Handler()
	if dc.guard != nil {
		do.Users = dc.guard
		if dc.plain && !opauth.IsLoopback(dc.addr) {
			logger.Warn("dashboard and /metrics: logins (ACL users' secret keys) travel in clear text on the metrics listener; serve it over TLS (--tls-mode) or bind it to loopback or a management network",
				"addr", dc.addr.String())
		}
		if dc.metricsAuth {
			metricsH = opauth.Require(metricsH, opauth.Options{Users: dc.guard, Permit: readsRuntimeInfo(dc.guard), Op: "metrics", Failures: failures})
		} else {
			logger.Warn("/metrics is open to anyone under access control (--metrics-auth=false, metricsAuthEnable=false): it shows the names and traffic of every topic and group; "+
				"remove the setting and give Prometheus basic_auth with an ACL user (docs/metrics.md), or bind --metrics-listen to loopback or a management network",
				"addr", dc.addr.String())
		}
	}
	dash, err := dashboard.New(b, do)
	if err != nil {
		return nil, fmt.Errorf("--dashboard-hosts: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metricsH)
	mux.HandleFunc("GET /healthz", healthz)
	mux.Handle("/", dash)
	return closingHandler{mux, dash}, nil
}

// closingHandler is the operator port's handler with the dashboard's
// Close (node.Operator: a handler that is an io.Closer is closed at
// shutdown).
type closingHandler struct {
	http.Handler
	dash *dashboard.Dashboard
}

func (h closingHandler) Close() error { return h.dash.Close() }

// controllerView reads what the controller-mode node knows of its group:
// the client's last state (leader, master, epochs, SyncStateSet), the
// controller's replica table (GET_SYNC_STATE_DATA, one request) and the
// node's epoch file.
func controllerView(n *ctrlmode.Node, brokerName string) func(ctx context.Context) (dashboard.ControllerView, error) {
	return func(ctx context.Context) (dashboard.ControllerView, error) {
		c := n.Controller()
		v := dashboard.ControllerView{Controllers: n.ControllerAddrs(), Leader: c.Leader(), SelfID: n.ID()}
		if st, ok := c.State(); ok {
			v.MasterID, v.MasterAddr, v.MasterEpoch, v.SyncStateSetEpoch = st.MasterID, st.MasterAddress, st.MasterEpoch, st.SyncStateSetEpoch
			v.SyncStateSet = st.SyncStateSet
		}
		for _, e := range n.Epochs() {
			v.Epochs = append(v.Epochs, dashboard.EpochEntry{Epoch: e.Epoch, StartOffset: e.StartOffset})
		}
		info, err := c.GetSyncStateData(ctx, brokerName)
		if err != nil {
			v.StateErr = err.Error()
			return v, nil
		}
		if ri, ok := info.ReplicasInfoTable[brokerName]; ok {
			for _, r := range ri.InSyncReplicas {
				v.Members = append(v.Members, dashboard.ControllerMember{ID: r.BrokerID, Addr: r.BrokerAddress, Alive: r.Alive, InSync: true})
			}
			for _, r := range ri.NotInSyncReplicas {
				v.Members = append(v.Members, dashboard.ControllerMember{ID: r.BrokerID, Addr: r.BrokerAddress, Alive: r.Alive})
			}
			sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].ID < v.Members[j].ID })
			// The replica table is the controller's own word, newer than
			// the client's last notification when they differ.
			if ri.MasterEpoch >= v.MasterEpoch {
				v.MasterID, v.MasterAddr, v.MasterEpoch, v.SyncStateSetEpoch = ri.MasterBrokerID, ri.MasterAddress, ri.MasterEpoch, ri.SyncStateSetEpoch
				v.SyncStateSet = v.SyncStateSet[:0:0]
				for _, r := range ri.InSyncReplicas {
					v.SyncStateSet = append(v.SyncStateSet, r.BrokerID)
				}
				sort.Slice(v.SyncStateSet, func(i, j int) bool { return v.SyncStateSet[i] < v.SyncStateSet[j] })
			}
		}
		return v, nil
	}
}

// healthz is the operator port's /healthz, what container orchestrators
// probe (docs/operations.md, "Running in containers"): 200 "ok" to anyone,
// with no login and no Host check, as it tells nothing but that the
// process serves; the port is served only once the store has been opened
// and recovered, so an answer also means the recovery is over.
func healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = io.WriteString(w, "ok\n")
}

// readsRuntimeInfo is /metrics's permission: what GET_BROKER_RUNTIME_INFO
// needs on the remoting port (Get on the Cluster resource; a Super user
// passes).
func readsRuntimeInfo(g *acl.Guard) func(user string, ip netip.Addr) error {
	return func(user string, ip netip.Addr) error {
		return g.AuthorizeRequest(user, ip, &protocol.Command{Code: protocol.ReqGetBrokerRuntimeInfo})
	}
}
