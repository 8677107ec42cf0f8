package devserver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/hearthvm/hearth/internal/serve"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/node"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/vmm/backends"
	"github.com/hearthvm/hearth/vmm/sim"
)

type nodesConfig struct {
	count           int
	dataDir         string
	vmm, agentBin   string
	token           string
	rest            *rest.Config
	publishInterval time.Duration
	// extra is the backends' Options.Extra.
	extra map[string]string
	// diskBytes is the backends' Options.DiskBytes (--disk-size).
	diskBytes int64
}

// runningNode is one in-process node daemon and its HTTP server.
type runningNode struct {
	name, addr string
	n          *node.Node
	srv        *http.Server
	runDone    chan struct{}
	cancel     context.CancelFunc
}

type fleetNodes []*runningNode

func (ns fleetNodes) addrs() map[string]string {
	out := map[string]string{}
	for _, n := range ns {
		out[n.name] = n.addr
	}
	return out
}

// NodeName is the name of the i-th in-process node.
func NodeName(i int) string { return fmt.Sprintf("node-%d", i) }

// startNodes starts cfg.count nodes, each with its own data directory,
// loopback listener and VMM driver, publishing into the API. On error the
// nodes already started are in the returned slice (close them).
func startNodes(ctx context.Context, cfg nodesConfig) (fleetNodes, error) {
	var agent []string
	if cfg.vmm == sim.Name {
		var err error
		if agent, err = sim.ResolveAgent(cfg.agentBin, filepath.Dir(cfg.dataDir)); err != nil {
			return nil, err
		}
	}
	pub, err := inventory.NewApplyPublisher(cfg.rest, inventory.DefaultFieldManager)
	if err != nil {
		return nil, err
	}
	var out fleetNodes
	for i := 0; i < cfg.count; i++ {
		name := NodeName(i)
		dir := filepath.Join(cfg.dataDir, name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return out, err
		}
		drv, err := backends.Open(cfg.vmm, backends.Options{RootDir: filepath.Join(dir, "vms"), AgentCommand: agent, Extra: cfg.extra, DiskBytes: cfg.diskBytes})
		if err != nil {
			return out, fmt.Errorf("node %s: %w", name, err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return out, err
		}
		n, err := node.New(node.Config{
			Name:              name,
			AdvertiseAddress:  ln.Addr().String(),
			NodeToken:         nodeapi.NodeToken(cfg.token, name),
			RootToken:         cfg.token, // operators: <data-dir>/root-token
			DataDir:           dir,
			Driver:            drv,
			InventoryInterval: cfg.publishInterval,
			Publisher:         pub,
		})
		if err != nil {
			ln.Close()
			return out, fmt.Errorf("node %s: %w", name, err)
		}
		nctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		rn := &runningNode{name: name, addr: ln.Addr().String(), n: n, cancel: cancel, runDone: make(chan struct{}),
			srv: serve.NewServer(n.Handler(), serve.Options{})}
		go func() { _ = rn.srv.Serve(serve.Listen(ln, serve.Options{})) }()
		go func() {
			defer close(rn.runDone)
			if err := n.Run(nctx); err != nil && nctx.Err() == nil {
				klog.ErrorS(err, "node stopped", "node", name)
			}
		}()
		out = append(out, rn)
	}
	return out, nil
}

// close stops every node concurrently: HTTP first, then the loops, then
// Close (claimed VMs stopped for restore, warm VMs destroyed).
func (ns fleetNodes) close() {
	var wg sync.WaitGroup
	for _, rn := range ns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = rn.srv.Shutdown(sctx)
			cancel()
			rn.cancel()
			<-rn.runDone
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if err := rn.n.Close(cctx); err != nil {
				klog.ErrorS(err, "node close", "node", rn.name)
			}
		}()
	}
	wg.Wait()
}
