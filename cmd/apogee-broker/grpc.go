package main

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/apogeemq/apogee/broker/grpcfe"
	"github.com/apogeemq/apogee/broker/metrics"
	"github.com/apogeemq/apogee/internal/tlsconf"
	"github.com/apogeemq/apogee/node"
)

// openGRPCTLS is the gRPC port's TLS: the broker's --tls-* settings (the
// same mode and files, reloaded on change) offering ALPN h2, which gRPC
// clients require; nil when --tls-mode is disabled (the front end then
// serves plaintext, and TLS with a self-signed certificate for the 5.x
// SDKs' default, as before).
func openGRPCTLS(c *config, logger *slog.Logger) (*tlsconf.Server, error) {
	s, err := openTLSProtos(c, logger.With("listener", "grpc"), []string{"h2"})
	if err != nil {
		return nil, fmt.Errorf("grpc: %w", err)
	}
	return s, nil
}

// grpcAdvertise is the gRPC address put in routes: the listen address, or,
// when it listens on every interface, the advertised remoting host with
// the gRPC port.
func grpcAdvertise(advertise string, listen *net.TCPAddr) string {
	port := strconv.Itoa(listen.Port)
	if !listen.IP.IsUnspecified() {
		return net.JoinHostPort(listen.IP.String(), port)
	}
	host, _, err := net.SplitHostPort(advertise)
	if err != nil {
		host = advertise
	}
	return net.JoinHostPort(host, port)
}

// grpcMetrics feeds the metrics' apogee_grpc_* series from the node's
// gRPC front end; nil when the node serves none.
func grpcMetrics(n *node.Node) func() metrics.GRPCStats {
	gs := n.GRPC()
	if gs == nil {
		return nil
	}
	return func() metrics.GRPCStats {
		s := gs.Stats()
		return metrics.GRPCStats{Streams: s.Streams, AuthRefused: s.AuthRefused, BudgetRefused: s.BudgetRefused,
			RequestTimeouts: s.RequestTimeouts, SizeRefused: s.SizeRefused, Clients: s.Clients, Held: s.Held, HeldTotal: s.HeldTotal,
			HeldRefusedBroker: s.HeldRefusedBroker, HeldRefusedConn: s.HeldRefusedConn, HeldRefusedClient: s.HeldRefusedClient,
			Renewing: s.Renewing, Renewals: s.Renewals, RenewFailures: s.RenewFailures, RenewReleased: s.RenewReleased,
			RenewRefused: s.RenewRefused}
	}
}

// grpcRenew holds the renewal keys of broker.conf (zero: grpcfe's
// defaults, RocketMQ's proxy's).
type grpcRenew struct {
	invisible, ahead, period, max, clear, grace time.Duration
	perClient                                   int
}

// apply sets them in the front end's options.
func (r grpcRenew) apply(o *grpcfe.Options) {
	o.AutoRenewInvisible, o.RenewAhead, o.RenewPeriod, o.RenewMax = r.invisible, r.ahead, r.period, r.max
	o.RenewClearInvisible, o.RenewOfflineGrace, o.MaxRenewPerClient = r.clear, r.grace, r.perClient
}
