package node

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apogeemq/apogee/broker"
	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/internal/testlog"
)

// closer is an operator handler with a Close (the dashboard's history
// sampler): it records whether the port still served when it was closed.
type closer struct {
	http.Handler
	closed  atomic.Int32
	serving func() bool
	after   atomic.Bool // closed after the port stopped serving
}

func (c *closer) Close() error {
	c.closed.Add(1)
	c.after.Store(!c.serving())
	return nil
}

// An operator handler that is an io.Closer is closed once at Shutdown,
// after the operator port stopped serving.
func TestOperatorHandlerClosedAtShutdown(t *testing.T) {
	ln, opln := listen(t), listen(t)
	opAddr := opln.Addr().String()
	c := &closer{Handler: http.NotFoundHandler()}
	c.serving = func() bool {
		cl := http.Client{Timeout: 2 * time.Second}
		resp, err := cl.Get("http://" + opAddr + "/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return true
	}
	n, err := Start(Options{
		Broker:   broker.Options{Core: core.Options{DataDir: t.TempDir(), AdvertiseAddr: ln.Addr().String(), Logger: testlog.New(t, "broker")}},
		Listener: ln,
		Operator: &Operator{Listener: opln, Handler: func(*Node) (http.Handler, error) { return c, nil }},
	})
	if err != nil {
		t.Fatal(err)
	}
	if !c.serving() {
		t.Fatal("the operator port does not serve")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.closed.Load(); got != 1 {
		t.Fatalf("the handler was closed %d times, want once", got)
	}
	if !c.after.Load() {
		t.Error("the handler was closed while the port still served")
	}
}
