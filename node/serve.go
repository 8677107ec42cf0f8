package node

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/hearthvm/hearth/internal/serve"
)

// DefaultCloseTimeout bounds Close when Serve stops a node: time to stop
// its claimed VMs for restore and destroy its warm ones.
const DefaultCloseTimeout = 2 * time.Minute

// ServeOptions say how Serve serves a node's API and how it stops.
type ServeOptions struct {
	// Serve bounds the API's clients (serve.NewServer, serve.Listen): its
	// zero timeouts take serve.DefaultTimeouts, a nil Budget is the
	// process's (serve.Shared).
	Serve serve.Options
	// Grace is how long requests in flight may finish once Serve stops
	// before their connections are closed; 0 closes them at once.
	Grace time.Duration
	// CloseTimeout bounds Close; 0 is DefaultCloseTimeout.
	CloseTimeout time.Duration
}

// Serve serves n's HTTP API (Handler) on ln, hardened by internal/serve
// (per-request deadlines, idle timeout, the connection budget), and runs
// n's loops (Run) until ctx ends or serving fails. Then it stops in order:
// the HTTP server (requests in flight get o.Grace; ln is closed), the
// loops, and n itself (Close within o.CloseTimeout: claimed VMs stopped
// for restore, warm VMs destroyed). It returns serving's error, else
// Close's; nil after a clean stop. n is closed when it returns, whatever
// happened.
func Serve(ctx context.Context, n *Node, ln net.Listener, o ServeOptions) error {
	srv := serve.NewServer(n.Handler(), o.Serve)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(serve.Listen(ln, o.Serve)) }()
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		if err := n.Run(runCtx); err != nil && runCtx.Err() == nil {
			n.log.Error(err, "Node loops stopped")
		}
	}()

	var failed error
	select {
	case <-ctx.Done():
		n.log.Info("Node shutting down")
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			failed = err
		}
	}
	if o.Grace > 0 {
		sctx, cancel := context.WithTimeout(context.Background(), o.Grace)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	_ = srv.Close() // after Shutdown: what did not finish in time
	stopRun()
	<-ran
	timeout := o.CloseTimeout
	if timeout <= 0 {
		timeout = DefaultCloseTimeout
	}
	cctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := n.Close(cctx); err != nil && failed == nil {
		failed = err
	}
	return failed
}
