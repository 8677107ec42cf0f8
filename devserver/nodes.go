package devserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

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
	// tracerProvider traces the nodes (node.Config.TracerProvider); nil: off.
	tracerProvider trace.TracerProvider
}

// runningNode is one in-process node daemon, served by node.Serve until
// cancel; done closes once Serve has returned (the node closed).
type runningNode struct {
	name, addr string
	cancel     context.CancelFunc
	done       chan struct{}
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
			TracerProvider:    cfg.tracerProvider,
		})
		if err != nil {
			ln.Close()
			return out, fmt.Errorf("node %s: %w", name, err)
		}
		nctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		rn := &runningNode{name: name, addr: ln.Addr().String(), cancel: cancel, done: make(chan struct{})}
		go func() {
			defer close(rn.done)
			if err := node.Serve(nctx, n, ln, node.ServeOptions{Grace: 5 * time.Second}); err != nil {
				klog.ErrorS(err, "node stopped", "node", name)
			}
		}()
		out = append(out, rn)
	}
	return out, nil
}

// close stops every node and waits for them: each stops as node.Serve
// does (HTTP first, then the loops, then Close: claimed VMs stopped for
// restore, warm VMs destroyed), concurrently.
func (ns fleetNodes) close() {
	for _, rn := range ns {
		rn.cancel()
	}
	for _, rn := range ns {
		<-rn.done
	}
}
