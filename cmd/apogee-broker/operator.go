package main

import (
	"log/slog"
	"net/http"
	"time"

	"google.golang.org/grpc"

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

// operatorHandler is what the --metrics-listen port serves: Prometheus
// text at /metrics, the dashboard at /.
// With readOnly (the broker checks credentials) the dashboard's actions
// are refused.
func operatorHandler(b *broker.Broker, rpc *metrics.RPCLatency, grpcLat *metrics.GRPCLatency, readOnly bool, logger *slog.Logger) (http.Handler, error) {
	exp, err := metrics.New(metrics.Options{Core: b.Core(), RPC: rpc, Remoting: b.RemotingStats})
	if err != nil {
		return nil, err
	}
	if grpcLat != nil {
		if err := exp.Registry().Register(grpcLat); err != nil {
			return nil, err
		}
	}
	dash, err := dashboard.New(b, dashboard.Options{Logger: logger, ReadOnly: readOnly})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", exp.Handler())
	mux.Handle("/", dash)
	return mux, nil
}
