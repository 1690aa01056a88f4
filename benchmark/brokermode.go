package benchmark

import (
	"context"
	"errors"
)

// openBrokerTarget connects clients to c.Addr, or to an embedded broker.
func openBrokerTarget(ctx context.Context, c Config) (target, error) {
	return nil, errors.New("benchmark: broker modes need the client package")
}
