package main

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	"github.com/apogeemq/apogee/acl"
	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/dashboard"
	"github.com/apogeemq/apogee/broker/metrics"
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

func init() {
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
}

// operatorHandler is what the --metrics-listen port serves: Prometheus
// text at /metrics, the dashboard at /.
// With access control on, the dashboard's actions need a login as an ACL
// user.
func operatorHandler(b *broker.Broker, rpc *metrics.RPCLatency, grpcLat *metrics.GRPCLatency, dc dashboardConfig, logger *slog.Logger) (http.Handler, error) {
	exp, err := metrics.New(metrics.Options{Core: b.Core(), RPC: rpc, Remoting: b.RemotingStats})
	if err != nil {
		return nil, err
	}
	if grpcLat != nil {
		if err := exp.Registry().Register(grpcLat); err != nil {
			return nil, err
		}
	}
	do := dashboard.Options{Logger: logger, Hosts: dc.hosts, HostsHint: dashboardHostsHint}
	if dc.guard != nil {
		do.Users = dc.guard
		if dc.plain && !isLoopback(dc.addr) {
			logger.Warn("dashboard: logins (ACL users' secret keys) travel in clear text on the metrics listener; serve it over TLS (--tls-mode) or bind it to loopback or a management network",
				"addr", dc.addr.String())
		}
	}
	dash, err := dashboard.New(b, do)
	if err != nil {
		return nil, fmt.Errorf("--dashboard-hosts: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", exp.Handler())
	mux.Handle("/", dash)
	return mux, nil
}

// isLoopback reports whether a listener's address is a loopback one.
func isLoopback(a net.Addr) bool {
	ta, ok := a.(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}
