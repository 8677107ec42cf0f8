package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/apiserver"
	"github.com/hearthvm/hearth/pool/controller"
)

// Server is the aggregated API server with the components composed around
// it. Run it once.
type Server struct {
	// API is the aggregated API server; embedders may add hooks to its
	// GenericAPIServer before Run (sandbox-dev stops its nodes in a
	// pre-shutdown hook: after the components, before the API server).
	API *apiserver.Server

	warmPool *controller.Controller
	e2bLn    net.Listener

	mu      sync.Mutex
	ctx     context.Context // the components' context, set by Run
	stop    context.CancelCauseFunc
	stopped bool
	wg      sync.WaitGroup
}

// WarmPool is the warm-pool controller, nil when disabled.
func (s *Server) WarmPool() *controller.Controller { return s.warmPool }

// E2BAddr is the e2b gateway's bound address, nil when disabled.
func (s *Server) E2BAddr() net.Addr {
	if s.e2bLn == nil {
		return nil
	}
	return s.e2bLn.Addr()
}

// Run serves until ctx ends or a component fails, then stops the
// components (informer, driver, controllers, e2b gateway) and after them
// the API server. It returns the first component failure, else the API
// server's error.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	s.ctx, s.stop = context.WithCancelCause(context.WithoutCancel(ctx))
	compCtx := s.ctx
	s.mu.Unlock()
	apiCtx, stopAPI := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAPI()
	apiDone := make(chan error, 1)
	go func() { apiDone <- s.API.Run(apiCtx) }()
	var apiErr error
	apiStopped := false
	select {
	case <-ctx.Done():
	case <-compCtx.Done(): // a component failed
	case apiErr = <-apiDone:
		apiStopped = true
	}
	s.mu.Lock()
	s.stopped = true
	s.mu.Unlock()
	s.stop(context.Canceled)
	s.wg.Wait()
	if s.e2bLn != nil {
		_ = s.e2bLn.Close() // in case its hook never ran
	}
	if !apiStopped {
		stopAPI()
		apiErr = <-apiDone
	}
	if cause := context.Cause(compCtx); !errors.Is(cause, context.Canceled) {
		return cause
	}
	return apiErr
}

// start runs fn in the components' context unless Run is stopping; an
// error other than a cancellation stops the server.
func (s *Server) start(name string, fn func(context.Context) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped || s.ctx == nil {
		return
	}
	ctx := s.ctx
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := fn(ctx); err != nil && !errors.Is(err, context.Canceled) {
			s.stop(fmt.Errorf("%s: %w", name, err))
		}
	}()
}

// informerSyncWarning is how long an unsynced informer waits before
// logging why readiness is still failing.
const informerSyncWarning = 2 * time.Minute

// runInformer runs inf until ctx ends and sets synced once it has synced.
func runInformer(ctx context.Context, inf Informer, synced *atomic.Bool) {
	done := make(chan struct{})
	go func() { defer close(done); inf.Run(ctx) }()
	wctx, cancel := context.WithTimeout(ctx, informerSyncWarning)
	err := inf.WaitForSync(wctx)
	cancel()
	if err != nil && ctx.Err() == nil {
		klog.ErrorS(err, "Not ready: still waiting for the fleet view to sync")
		err = inf.WaitForSync(ctx)
	}
	if err == nil {
		synced.Store(true)
		klog.InfoS("Fleet view synced")
	}
	<-done
}

// untilSynced answers every request 503 with Retry-After and an e2b error
// body until synced, so no e2b client reads an empty fleet.
func untilSynced(h http.Handler, synced *atomic.Bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !synced.Load() {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(`{"code":503,"message":"the fleet view has not synced yet; retry"}` + "\n"))
			return
		}
		h.ServeHTTP(w, r)
	})
}
