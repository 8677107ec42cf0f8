package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/hearthvm/hearth/bench/internal/simfleet"
	"github.com/hearthvm/hearth/bench/internal/stats"
	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleetview"
	"github.com/hearthvm/hearth/nodeapi"
)

// ClaimPath names one way a claim reaches a node.
type ClaimPath struct {
	Name string
	// Claim performs claim i; ref is its unique "<ns>/<name>".
	Claim func(ctx context.Context, ref string) error
}

// NodeClaims measures the claim latency of the node itself (its handler
// called in process: the node's server time), through its HTTP API over
// loopback, and through the fleet router (fleet.NodeFleet over 4 nodes),
// at each concurrency level. Nodes use the NopDriver: warm VMs are map
// entries, so the figures are the control path's, not a VMM's. Their
// stores fsync every commit, as in production. The claims of one level
// stay claimed, so the nodes hold more VMs at each row (the table says
// how many).
func NodeClaims(ctx context.Context, cfg Config) error {
	cfg.defaults()
	f, err := simfleet.Start(simfleet.Options{Nodes: 4, MaxBootConcurrency: 64})
	if err != nil {
		return err
	}
	defer f.Close()
	n0 := f.Nodes[0]
	h := n0.Node.Handler()
	stop := func() {}
	defer func() { stop() }()
	// The router's live view (the fleet requires one) follows the nodes'
	// change streams: it starts before the router's rows, so the node
	// rows run with no subscriber, as their note says.
	var fl *fleet.NodeFleet
	startLive := func() error {
		live := fleetview.New(f.View, fleetview.Config{Secret: simfleet.Token})
		lctx, lcancel := context.WithCancel(ctx)
		liveDone := make(chan struct{})
		go func() { defer close(liveDone); live.Run(lctx) }()
		stop = func() { lcancel(); <-liveDone }
		if err := live.WaitForSync(ctx); err != nil {
			return err
		}
		fl = fleet.New(fleet.Config{View: live, Secret: simfleet.Token})
		return nil
	}

	paths := []ClaimPath{
		{Name: "node handler, in process (server time)", Claim: func(ctx context.Context, ref string) error {
			body, _ := json.Marshal(nodeapi.ClaimRequest{Template: Key.Template, Net: Key.Net, Size: Key.Size, ClaimRef: ref})
			rec := handlerCall(ctx, h, http.MethodPost, "/v1/claim", body)
			if rec.Code != http.StatusOK {
				return fmt.Errorf("claim answered %d: %s", rec.Code, rec.Body.String())
			}
			return nil
		}},
		{Name: "node HTTP API, loopback (nodeapi.Client)", Claim: func(ctx context.Context, ref string) error {
			_, err := n0.Client.Claim(ctx, nodeapi.ClaimRequest{Template: Key.Template, Net: Key.Net, Size: Key.Size, ClaimRef: ref})
			return err
		}},
		{Name: "fleet router, 4 nodes (fleet.NodeFleet)", Claim: func(ctx context.Context, ref string) error {
			_, err := fl.Claim(ctx, nodeapi.ClaimFor(Key, ref))
			return err
		}},
	}
	t := stats.Table{
		Title:  "Claim latency below the API (4 NopDriver nodes, real node code; store fsync on)",
		Header: []string{"path", "c", "VMs held/node", "claims", "p50 ms", "p95 ms", "p99 ms", "claims/s", "CPU µs/claim", "alloc KB/claim", "errors"},
	}
	for pi, p := range paths {
		if pi == 2 {
			if err := startLive(); err != nil {
				return err
			}
		}
		for _, c := range cfg.Concurrency {
			// Fill: every node holds enough warm VMs for the whole level.
			perNode := int32(cfg.Claims + 64)
			if err := f.SetWarm(ctx, Key, perNode); err != nil {
				return err
			}
			if _, err := f.WaitWarm(ctx, Key, int(perNode)*len(f.Nodes), 5*time.Millisecond); err != nil {
				return err
			}
			if err := f.PublishNow(ctx); err != nil {
				return err
			}
			// The node handler and HTTP paths claim from node 0 only.
			held, err := heldPerNode(ctx, f, pi < 2)
			if err != nil {
				return err
			}
			l := run(ctx, cfg.Claims, c, func(ctx context.Context, i int) error {
				return p.Claim(ctx, fmt.Sprintf("bench/p%d-c%d-%d", pi, c, i))
			})
			cfg.logf("%s c=%d: %d ok, %d errors (%v)", p.Name, c, l.ok, l.errs, l.first)
			if l.errs > 0 {
				return fmt.Errorf("%d of %d claims failed at c=%d: %w", l.errs, l.errs+l.ok, c, l.first)
			}
			t.Add(p.Name, c, held, l.ok, stats.Ms(l.lat.P50), stats.Ms(l.lat.P95), stats.Ms(l.lat.P99),
				fmt.Sprintf("%.0f", l.rate()), perClaimMicros(l), perClaimKB(l), l.errs)
			if err := f.SetWarm(ctx, Key, 0); err != nil {
				return err
			}
		}
	}
	t.Note("Warm VMs are refilled in the background while claims run (as on a real node); CPU is the whole process's (client, nodes, refill) divided by claims.")
	t.Note("Each claim's record is appended to the node's claim journal and fdatasynced before the node answers (concurrent claims share one fdatasync; full journal generations are checkpointed into bbolt in the background), as in production. VMs held/node: warm plus claimed when the row starts, on the node claimed from (node 0) for the first two paths, averaged over the 4 nodes for the router; earlier rows' claims stay claimed. The node rows run with no change stream subscriber; the router's rows with its live view following the 4 nodes' streams (in this process).")
	return t.Print(cfg.Out)
}

// heldPerNode is the VMs (warm plus claimed) node 0 holds (only0) or the
// nodes hold on average.
func heldPerNode(ctx context.Context, f *simfleet.Fleet, only0 bool) (int, error) {
	if only0 {
		info, err := f.Nodes[0].Client.Info(ctx)
		if err != nil {
			return 0, err
		}
		held := info.Claimed
		for _, p := range info.Pools {
			held += int(p.Warm)
		}
		return held, nil
	}
	total, err := f.Held(ctx)
	return total / len(f.Nodes), err
}

func perClaimMicros(l load) string {
	if l.ok == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(l.cpu.Microseconds())/float64(l.ok))
}

func perClaimKB(l load) string {
	if l.ok == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(l.allocs)/1024/float64(l.ok))
}
