package main

import (
	"errors"
	"fmt"
	"net"
)

// RocketMQ's default addresses of the broker's listeners. The HA
// listener's default is derived: the listen host, the listen port + 1.
const (
	defaultListen        = "0.0.0.0:10911"
	defaultNamesrvListen = "0.0.0.0:9876"
	defaultGRPCListen    = "0.0.0.0:8081"
)

// listener is one of the broker's listeners: its key in the ready file
// (docs/operations.md, "The ready file"), what it is, and what moves it.
type listener struct {
	key, what, moves string
}

var (
	remotingListener = listener{"listen", "the broker's remoting listener", "--listen, or broker.conf's listenPort and bindAddress"}
	haListener       = listener{"ha", "the HA listener for slaves", "--ha-listen, or broker.conf's haListenPort"}
	namesrvListener  = listener{"namesrv", "the embedded name server", `--namesrv-listen ("" disables it)`}
	grpcListener     = listener{"grpc", "the gRPC front end", `--grpc-listen ("" disables it), or broker.conf's grpcListen or grpcServerPort`}
	metricsListener  = listener{"metrics", "the metrics and dashboard listener", "--metrics-listen, or broker.conf's metricsPromExporterHost and metricsPromExporterPort"}
	pprofListener    = listener{"pprof", "the pprof listener", "--pprof"}
)

// listenError is a listener the broker could not bind (a port in use, an
// address not on this host): which one, at what address, how that
// address was chosen, and what moves it. Listener is the ready file's key
// of the listener ("listen", "ha", "namesrv", "grpc", "metrics", "pprof").
type listenError struct {
	Listener string
	Addr     string
	// How says where the address came from: "as configured", "the
	// default", "the listen port + 1".
	How string
	Err error

	what, moves string
}

func (e *listenError) Error() string {
	return fmt.Sprintf("listen %s (%s, %s): %v; move it with %s", e.Addr, e.what, e.How, e.Err, e.moves)
}

func (e *listenError) Unwrap() error { return e.Err }

// fail is the listenError of l at addr. A *net.OpError's own "listen tcp
// ADDR:" prefix is dropped: the message names the address already.
func (l listener) fail(addr, how string, err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		err = op.Err
	}
	return &listenError{Listener: l.key, Addr: addr, How: how, Err: err, what: l.what, moves: l.moves}
}

// howChosen says where addr came from, given the listener's default.
func howChosen(addr, def string) string {
	if addr == def {
		return "the default"
	}
	return "as configured"
}

// haHow says where the HA listener's address came from (haListenAddr).
func haHow(flag, listenFlag string) string {
	if flag != "" {
		return "as configured"
	}
	if _, p, err := net.SplitHostPort(listenFlag); err == nil && (p == "0" || p == "") {
		return "any port, as --listen asks for port 0"
	}
	return "the listen port + 1"
}
