package main

import (
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/grpcfe"
	"github.com/apogeemq/apogee/internal/tlsconf"
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

// clusterRoutes gives the gRPC front end the other brokers of a topic that
// registered with this broker's embedded name server: each at its master's
// host with the gRPC port of this one (a cluster's brokers listen for gRPC
// on the same port, as RocketMQ's proxies in local mode do).
func clusterRoutes(b *broker.Broker, grpcPort int) func(topic string) []grpcfe.Route {
	port := strconv.Itoa(grpcPort)
	return func(topic string) []grpcfe.Route {
		rd, ok := b.Registry().Route(topic)
		if !ok {
			return nil
		}
		var out []grpcfe.Route
		for _, q := range rd.QueueDatas {
			for _, bd := range rd.BrokerDatas {
				if bd.BrokerName != q.BrokerName {
					continue
				}
				addr, ok := bd.BrokerAddrs[0]
				if !ok {
					continue
				}
				host, _, err := net.SplitHostPort(addr)
				if err != nil {
					continue
				}
				out = append(out, grpcfe.Route{BrokerName: q.BrokerName, Addr: net.JoinHostPort(host, port),
					ReadQueues: q.ReadQueueNums, WriteQueues: q.WriteQueueNums, Perm: q.Perm})
			}
		}
		return out
	}
}
