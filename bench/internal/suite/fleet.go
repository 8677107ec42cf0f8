package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	goruntime "runtime"

	"github.com/hearthvm/hearth/bench/internal/simfleet"
	"github.com/hearthvm/hearth/bench/internal/stats"
	"github.com/hearthvm/hearth/bench/internal/synth"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
)

// etcdMaxRequest is etcd's default request size limit (--max-request-bytes).
const etcdMaxRequest = 1.5 * 1024 * 1024

// FleetScale measures, on the apiserver side, what each sandbox costs as
// the fleet grows to 1M: the published NodeInventory JSON, the informer's
// decoded (unstructured) copy, the typed copy inventory.Source keeps, the
// View; the CPU to ingest one node's publish (JSON → unstructured → typed)
// and to re-derive the View; and from those the steady-state CPU at the
// node publish cadence. Entries are synthetic (synth) but every byte and
// CPU second is spent by the real code paths the API server runs.
func FleetScale(ctx context.Context, cfg Config) error {
	cfg.defaults()
	shapes := []struct{ nodes, per int }{{20, 500}, {20, 2_600}, {200, 500}, {200, 5_000}}
	if cfg.Quick {
		shapes = []struct{ nodes, per int }{{20, 50}, {50, 100}}
	}
	const cadence = 30 * time.Second
	t := stats.Table{
		Title: "Fleet scale, apiserver side (per-entry costs of the real decode/convert/view code; synthetic NodeInventory objects)",
		Header: []string{"nodes × per node", "sandboxes", "object KB (etcd ≤ 1536)", "JSON B/entry", "informer B/entry",
			"typed B/entry", "view B/entry", "heap MB per 1k", "heap total", "ingest ms/publish", "re-derive ms", "CPU at 30 s cadence"},
	}
	var verdicts []string
	for _, s := range shapes {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		cfg.logf("fleet scale %d × %d", s.nodes, s.per)
		total := s.nodes * s.per
		one := synth.Node(0, s.per)
		u, err := inventory.ToUnstructured(one)
		if err != nil {
			return err
		}
		raw, err := json.Marshal(u.Object)
		if err != nil {
			return err
		}
		// What the informer holds: the object decoded from JSON as unstructured.
		decode := func() *unstructured.Unstructured {
			obj := &unstructured.Unstructured{}
			if err := obj.UnmarshalJSON(raw); err != nil {
				panic(err)
			}
			return obj
		}
		// Heap figures are averaged over k copies (≥ 20k entries) so that
		// GC noise does not dominate.
		k := (20_000 + s.per - 1) / s.per
		uHeap := heapOf(func() any {
			objs := make([]*unstructured.Unstructured, k)
			for i := range objs {
				objs[i] = decode()
			}
			return objs
		}) / float64(k)
		// What inventory.Source keeps besides: the typed conversion (its
		// strings share the decoded object's bytes).
		decs := make([]*unstructured.Unstructured, k)
		for i := range decs {
			decs[i] = decode()
		}
		typedHeap := heapOf(func() any {
			invs := make([]*inventory.NodeInventory, k)
			for i := range invs {
				invs[i] = &inventory.NodeInventory{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(decs[i].Object, invs[i]); err != nil {
					panic(err)
				}
			}
			return invs
		}) / float64(k)
		goruntime.KeepAlive(decs) // the typed copies share its strings: keep it out of the delta
		decs = nil
		ingest := measure(func() {
			inv := &inventory.NodeInventory{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(decode().Object, inv); err != nil {
				panic(err)
			}
		}, 500*time.Millisecond)
		invs := synth.Fleet(s.nodes, s.per)
		viewHeap := heapOf(func() any { return inventory.NewView(invs) })
		old := inventory.NewView(invs)
		next := append([]*inventory.NodeInventory(nil), invs...)
		next[0] = synth.Republish(invs[0], 100, 0)
		rederive := measure(func() { old.Next(next) }, time.Second)

		perEntry := func(b float64) float64 { return b / float64(s.per) }
		heapPerEntry := perEntry(uHeap) + perEntry(typedHeap) + viewHeap/float64(total)
		heapTotal := heapPerEntry * float64(total)
		// Steady state: every node publishes once per cadence; the Source
		// rebuilds at most every DefaultCoalesce.
		pubPerSec := float64(s.nodes) / cadence.Seconds()
		rebuildPerSec := math.Min(pubPerSec, float64(time.Second/inventory.DefaultCoalesce))
		cores := pubPerSec*ingest.cpu.Seconds() + rebuildPerSec*rederive.cpu.Seconds()
		t.Add(fmt.Sprintf("%d × %d", s.nodes, s.per), total, fmt.Sprintf("%.0f", float64(len(raw))/1024),
			fmt.Sprintf("%.0f", perEntry(float64(len(raw)))), fmt.Sprintf("%.0f", perEntry(uHeap)), fmt.Sprintf("%.0f", perEntry(typedHeap)),
			fmt.Sprintf("%.0f", viewHeap/float64(total)), fmt.Sprintf("%.2f", heapPerEntry*1000/(1<<20)), stats.Bytes(heapTotal),
			stats.Ms(ingest.cpu), stats.Ms(rederive.cpu), fmt.Sprintf("%.2f cores", cores))
		switch {
		case float64(len(raw)) > etcdMaxRequest:
			verdicts = append(verdicts, fmt.Sprintf("%d × %d: one node's NodeInventory is %.1f MiB, over etcd's 1.5 MiB request limit: the publish fails first (max ≈ %d entries per node at %.0f B/entry).",
				s.nodes, s.per, float64(len(raw))/(1<<20), int(etcdMaxRequest/perEntry(float64(len(raw)))), perEntry(float64(len(raw)))))
		case cores > 1:
			verdicts = append(verdicts, fmt.Sprintf("%d × %d: the view re-derive needs %.1f cores at a 30 s cadence.", s.nodes, s.per, cores))
		}
	}
	t.Note("informer B/entry: the NodeInventory decoded from its JSON as the dynamic informer stores it (unstructured); typed: inventory.Source's converted copy; view: inventory.View's indexes. heap = all three. ingest = JSON → unstructured → typed for one node's publish. re-derive = View.Next after one node republished (watches add nothing: they follow the live view's changes). CPU at 30 s cadence = nodes/30 ingests per second + min(nodes/30, 10) re-derives per second (inventory.Source coalesces rebuilds to one per 100 ms).")
	for _, v := range verdicts {
		t.Note("What breaks first at %s", v)
	}
	t.Note("Anchors: 105 B per inventory entry (2500 entries ≈ 263 KB object); 1392 B per materialized Sandbox; watch re-derive 40 ms at 200 nodes × 50k.")
	return t.Print(cfg.Out)
}

// FleetSim runs the real pipeline at a size this machine holds: 20
// in-process nodes (node.New, NopDriver), real routing (fleet.NodeFleet),
// the nodes' real inventories into the real View, and a real client-go
// watch through the aggregated API server. It claims the sandboxes, opens
// a watch, publishes every node once, and measures the CPU and time until
// the watch has delivered every sandbox, and the heap per 1k sandboxes.
func FleetSim(ctx context.Context, cfg Config) error {
	cfg.defaults()
	nodes, total := 20, 20_000
	if cfg.Quick {
		nodes, total = 4, 400
	}
	sys, err := startAPI(ctx, simfleet.Options{Nodes: nodes, MaxBootConcurrency: 64})
	if err != nil {
		return err
	}
	defer sys.Close()
	f := sys.Fleet
	per := int32(total/nodes + 16)
	if err := f.SetWarm(ctx, Key, per); err != nil {
		return err
	}
	if _, err := f.WaitWarm(ctx, Key, int(per)*nodes, 10*time.Millisecond); err != nil {
		return err
	}
	if err := f.PublishNow(ctx); err != nil {
		return err
	}
	var ms0 goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&ms0)
	l := run(ctx, total, 32, func(ctx context.Context, i int) error {
		_, err := sys.Router.Claim(ctx, nodeapi.ClaimFor(Key, fmt.Sprintf("fleet-%02d/sbx-%06d", i%16, i)))
		return err
	})
	if l.errs > 0 {
		return fmt.Errorf("%d of %d claims failed: %v", l.errs, total, l.first)
	}
	// A real watch through the aggregated API, opened before the publish.
	w, err := sys.Client.rc.Get().Resource("sandboxes").Param("watch", "true").Watch(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	cpu0, t0 := processCPU(), time.Now()
	if err := f.PublishNow(ctx); err != nil {
		return err
	}
	pubCPU, pubWall := processCPU()-cpu0, time.Since(t0)
	seen := 0
	deadline := time.After(5 * time.Minute)
	for seen < total {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return fmt.Errorf("watch closed after %d of %d events", seen, total)
			}
			if ev.Type == "ADDED" {
				seen++
			}
		case <-deadline:
			return fmt.Errorf("watch delivered %d of %d sandboxes in 5 m", seen, total)
		}
	}
	watchCPU, watchWall := processCPU()-cpu0, time.Since(t0)
	var ms1 goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&ms1)
	heapPer1k := (float64(ms1.HeapAlloc) - float64(ms0.HeapAlloc)) / float64(total) * 1000
	t := stats.Table{
		Title:  fmt.Sprintf("Fleet simulation: %d nodes × %d sandboxes, real routing, view and client-go watch (NopDriver nodes; store fsync on)", nodes, total/nodes),
		Header: []string{"sandboxes", "claims/s (router, c=32)", "CPU ms per 1k claims", "publish all: CPU ms", "publish → watch delivered all: s", "CPU ms per 1k delivered", "process heap per 1k"},
	}
	t.Add(total, fmt.Sprintf("%.0f", l.rate()), fmt.Sprintf("%.0f", float64(l.cpu.Milliseconds())*1000/float64(total)),
		fmt.Sprintf("%.0f (%.0f ms wall)", float64(pubCPU.Microseconds())/1000, float64(pubWall.Microseconds())/1000),
		fmt.Sprintf("%.2f", watchWall.Seconds()), fmt.Sprintf("%.0f", float64(watchCPU.Milliseconds())*1000/float64(total)), stats.Bytes(heapPer1k))
	t.Note("Everything shares one process: CPU includes the nodes and the watching client; heap includes the nodes' claim tables (what a node daemon holds) as well as the apiserver's view. The watch opens on an empty view and receives every sandbox as ADDED after the one publish (the API server re-derives every 100 ms here).")
	return t.Print(cfg.Out)
}
