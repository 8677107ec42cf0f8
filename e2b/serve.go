package e2b

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
)

// Validate reports flag errors that need no I/O: no key file and no
// --e2b-allow-anonymous is ErrNoKeys.
func (o *Options) Validate() error {
	if o.APIKeyFile == "" && !o.AllowAnonymous {
		return ErrNoKeys
	}
	if o.BindAddress == "" {
		return errors.New("--e2b-bind-address is required")
	}
	return nil
}

// WithPools adds PoolLister to f from the published view, so GET /templates
// lists every advertised pool, warm or not.
func WithPools(f claim.Fleet, v inventory.Viewer) claim.Fleet {
	return viewPools{Fleet: f, v: v}
}

type viewPools struct {
	claim.Fleet
	v inventory.Viewer
}

func (p viewPools) Pools(context.Context) ([]node.PoolInfo, error) {
	var out []node.PoolInfo
	for _, n := range p.v.View().Nodes() {
		for _, pl := range n.Pools {
			out = append(out, node.PoolInfo{Template: pl.Template, Net: pl.Net, Size: pl.Size, Warm: pl.Warm, Target: pl.Target})
		}
	}
	return out, nil
}

// Serve serves h on addr until ctx ends, then shuts down gracefully (10 s).
// ready, when not nil, receives the bound address.
func Serve(ctx context.Context, addr string, h http.Handler, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr())
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	err = srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		<-done
		return nil
	}
	return err
}
