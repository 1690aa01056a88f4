package namesrv

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/apogeemq/apogee/remoting"
)

// shutdownGrace bounds the graceful part of Serve's shutdown.
const shutdownGrace = 5 * time.Second

// Serve runs a standalone name server: a remoting.Server on l that answers with r and
// drops the brokers of each connection that closes (OnClose → r.ConnClosed). It returns
// nil once ctx has ended and the server has shut down (gracefully, for up to 5 s, then
// at once), or the error that stopped it from serving. opts may be nil. Serve closes l;
// it does not close r.
func Serve(ctx context.Context, l net.Listener, r *Registry, opts *remoting.Options) error {
	return ServeHandler(ctx, l, r, r, opts)
}

// ServeHandler is Serve with h answering the requests (a handler that
// checks access before it calls r, say); r still learns of closed
// connections.
func ServeHandler(ctx context.Context, l net.Listener, h remoting.Handler, r *Registry, opts *remoting.Options) error {
	srv := remoting.NewServer(h, opts)
	srv.OnClose(r.ConnClosed)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(l) }()
	select {
	case err := <-errc:
		srv.Close()
		if errors.Is(err, remoting.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			srv.Close()
		}
		<-errc
		return nil
	}
}
