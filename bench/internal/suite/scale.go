package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"time"

	"github.com/hearthvm/hearth/bench/internal/simfleet"
	"github.com/hearthvm/hearth/bench/internal/stats"
	"github.com/hearthvm/hearth/nodeapi"
)

// nodeScaleSizes are the node sizes NodeScale measures: VMs held, warm
// plus claimed.
var nodeScaleSizes = []int{100, 1000, 10000}

// NodeScale measures what one claim costs a node as the node grows: CPU
// per claim at its handler (in process, c=1, fsync on as in production),
// with 100, 1,000 and 10,000 VMs held (half warm, half claimed), while one
// subscriber follows the node's change stream (as the API servers do). A
// cost that grows with the VMs held (the change stream once rescanned the
// whole table on every claim) shows as a growing column; the goal is flat.
// Its last line is
//
//	nodescale: claim CPU µs at 100 / 1000 / 10000 VMs held: A / B / C
func NodeScale(ctx context.Context, cfg Config) error {
	cfg.defaults()
	rounds := 25
	if cfg.Quick {
		rounds = 5
	}
	t := stats.Table{
		Title: "Claim cost vs node size (node handler in process, c=1; fsync on; NopDriver; 1 change stream subscriber)",
		Header: []string{"VMs held", "warm", "claimed", "claims", "p50 ms", "p99 ms", "CPU µs/claim", "alloc KB/claim",
			"fill s", "errors"},
	}
	var cpus []float64
	for _, held := range nodeScaleSizes {
		r, err := nodeScaleOne(ctx, cfg, held, rounds)
		if err != nil {
			return fmt.Errorf("at %d VMs held: %w", held, err)
		}
		cpu := float64(r.cpu.Microseconds()) / float64(r.claims)
		cpus = append(cpus, cpu)
		t.Add(held, r.warm, r.claimed, r.claims, stats.Ms(r.lat.P50), stats.Ms(r.lat.P99), fmt.Sprintf("%.0f", cpu),
			fmt.Sprintf("%.1f", float64(r.allocs)/1024/float64(r.claims)), fmt.Sprintf("%.1f", r.fill.Seconds()), 0)
	}
	t.Note("One node (node.New, every claim record fdatasynced in its claim journal before it answers, its loops running); warm VMs are NopDriver map entries, so this is the control path's cost. Half the VMs held are warm (the pool's target), half claimed before the measure (through the handler, 32 at a time).")
	t.Note("Claims run in batches of %d at c=1 through the handler; CPU is the whole process's (handler, store, change stream and its subscriber, refill boots, the node's other loops) during the batches, divided by claims. After each batch its sandboxes are released and the pool refilled, outside the measure, so the node keeps its size.", nodeScaleBatch)
	t.Note("Goal: flat — CPU per claim at 10,000 VMs held ≤ 1.5 × at 100.")
	if cpu, wall, err := fdatasyncFloor(os.TempDir(), 500); err == nil {
		t.Note("This disk's floor, measured in the same run where the nodes keep their journals (%s): one 4 KiB pwrite + fdatasync costs %.0f µs of CPU (the kernel's part of the flush) and %.0f µs of wall time; a claim at c=1 pays one.", os.TempDir(), float64(cpu.Nanoseconds())/1e3, float64(wall.Nanoseconds())/1e3)
	}
	if err := t.Print(cfg.Out); err != nil {
		return err
	}
	cfg.lastf("nodescale: claim CPU µs at 100 / 1000 / 10000 VMs held: %.0f / %.0f / %.0f", cpus[0], cpus[1], cpus[2])
	return nil
}

// nodeScaleBatch is the claims of one measured batch: at most the smallest
// node's warm VMs, so no claim finds the pool empty.
const nodeScaleBatch = 40

type scaleResult struct {
	warm, claimed, claims int
	lat                   stats.Latency
	cpu                   time.Duration
	allocs                uint64
	fill                  time.Duration
}

func nodeScaleOne(ctx context.Context, cfg Config, held, rounds int) (scaleResult, error) {
	res := scaleResult{warm: held / 2, claimed: held - held/2}
	f, err := simfleet.Start(simfleet.Options{Nodes: 1, MaxBootConcurrency: 64})
	if err != nil {
		return res, err
	}
	defer f.Close()
	n0 := f.Nodes[0]
	h := n0.Node.Handler()

	start := time.Now()
	if err := f.SetWarm(ctx, Key, int32(res.warm)); err != nil {
		return res, err
	}
	settle := func() error {
		_, err := f.WaitWarm(ctx, Key, res.warm, 2*time.Millisecond)
		return err
	}
	if err := settle(); err != nil {
		return res, err
	}
	l := run(ctx, res.claimed, 32, func(ctx context.Context, i int) error {
		_, err := handlerClaim(ctx, h, fmt.Sprintf("bench/held-%d", i))
		return err
	})
	if l.errs > 0 {
		return res, fmt.Errorf("filling: %d claims failed: %w", l.errs, l.first)
	}
	if err := settle(); err != nil {
		return res, err
	}
	res.fill = time.Since(start)
	cfg.logf("nodescale: %d VMs held (%d warm, %d claimed) after %s", held, res.warm, res.claimed, res.fill.Round(time.Millisecond))

	// One subscriber of the change stream, reading it as a fleet view does
	// (the bytes only: its decoding is not the node's cost).
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	req, _ := http.NewRequestWithContext(wctx, http.MethodGet, "http://"+n0.Addr+"/v1/watch", nil)
	req.Header.Set("Authorization", "Bearer "+simfleet.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return res, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return res, fmt.Errorf("watch answered %d", resp.StatusCode)
	}
	go func() { defer resp.Body.Close(); _, _ = io.Copy(io.Discard, resp.Body) }()

	var lats []time.Duration
	var ms0, ms1 runtime.MemStats
	for r := range rounds {
		ids := make([]string, 0, nodeScaleBatch)
		runtime.ReadMemStats(&ms0)
		cpu0 := processCPU()
		for i := range nodeScaleBatch {
			t0 := time.Now()
			id, err := handlerClaim(ctx, h, fmt.Sprintf("bench/r%d-%d", r, i))
			if err != nil {
				return res, err
			}
			lats = append(lats, time.Since(t0))
			ids = append(ids, id)
		}
		res.cpu += processCPU() - cpu0
		runtime.ReadMemStats(&ms1)
		res.allocs += ms1.TotalAlloc - ms0.TotalAlloc
		res.claims += len(ids)
		for _, id := range ids {
			if err := handlerRelease(ctx, h, id); err != nil {
				return res, err
			}
		}
		if err := settle(); err != nil {
			return res, err
		}
	}
	res.lat = stats.Summarize(lats)
	return res, nil
}

// handlerCall serves one authenticated node API request with h in process
// and returns the recorded answer. The request is built directly (not
// parsed from text as httptest.NewRequest does, with a 4 KiB reader per
// call): the caller's cost is not the node's.
func handlerCall(ctx context.Context, h http.Handler, method, path string, body []byte) *httptest.ResponseRecorder {
	req, err := http.NewRequestWithContext(ctx, method, "http://node"+path, bytes.NewReader(body))
	if err != nil {
		panic(err) // a benchmark's own path
	}
	req.RemoteAddr, req.RequestURI = "192.0.2.1:1234", path
	req.Header.Set("Authorization", "Bearer "+simfleet.Token)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// handlerClaim claims one sandbox of Key under ref through a node's
// handler and returns its id (decoding nothing else: the caller's work is
// not the node's).
func handlerClaim(ctx context.Context, h http.Handler, ref string) (string, error) {
	body, _ := json.Marshal(nodeapi.ClaimRequest{Template: Key.Template, Net: Key.Net, Size: Key.Size, ClaimRef: ref})
	rec := handlerCall(ctx, h, http.MethodPost, "/v1/claim", body)
	if rec.Code != http.StatusOK {
		return "", fmt.Errorf("claim answered %d: %s", rec.Code, rec.Body.String())
	}
	var s struct {
		ID string `json:"id"`
	}
	return s.ID, json.Unmarshal(rec.Body.Bytes(), &s)
}

// handlerRelease releases sandbox id through a node's handler.
func handlerRelease(ctx context.Context, h http.Handler, id string) error {
	if rec := handlerCall(ctx, h, http.MethodPost, "/v1/sandboxes/"+id+"/release", nil); rec.Code != http.StatusNoContent {
		return fmt.Errorf("release answered %d: %s", rec.Code, rec.Body.String())
	}
	return nil
}
