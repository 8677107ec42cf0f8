package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/hearthvm/hearth/e2e/cluster"
	"github.com/hearthvm/hearth/nodeapi"
)

// The fault-injection suite (TestFault): concurrent creates through
// kube-apiserver with client-go while one fault is injected, then, once the
// system has settled, a reconciliation of what the clients were told
// against what the API lists and what each node holds. See docs/FAULTS.md.
const (
	faultWarmPerNode = 6                      // warm microVMs per node (12 in all)
	faultCreates     = 32                     // creates per scenario
	faultWorkers     = 4                      // concurrent clients
	faultPace        = 700 * time.Millisecond // each worker's pause between creates
	faultAttempts    = 5                      // attempts per create (same name) on 429/503/504, backing off 0.3 s, 0.6 s, ...
	faultDeadline    = 20 * time.Second       // client deadline per request
	faultInjectAt    = 1500 * time.Millisecond
	faultDownFor     = time.Second     // kill -9 ... restart
	faultStopFor     = 5 * time.Second // SIGSTOP ... SIGCONT
	faultWedgeFor    = 2 * time.Second // SIGSTOP ... kill -9
	faultSlowBy      = 2 * time.Second // every answer of the slow node
	faultSettle      = 60 * time.Second
	faultVictim      = "node-a" // killed and stopped
	faultSlow        = "node-b" // behind the delaying proxy
)

// faultScenario is one row of the table.
type faultScenario struct {
	name, prefix string
	// inject runs from faultInjectAt on, concurrently with the creates, and
	// returns once the fault is over (the daemon restarted, continued ...).
	inject func(t *testing.T, f *faultRun)
	// heal, when set, runs after the last create (the slow node's delay).
	heal func(f *faultRun)
	// resetOK: an attempt may see its stream reset (errClass "reset"). Only
	// where sandbox-apiserver itself is killed: kube-apiserver's aggregator
	// proxy can then only abort the client's stream once the answer has
	// begun (HTTP/2 INTERNAL_ERROR); no status can be sent any more. The
	// outcome is unknown to the client, which retries the same name (and
	// gets 409 if it had landed).
	resetOK bool
}

// faultRun is the suite's world: the env of realcluster_test.go plus the
// clients and proxies the faults need.
type faultRun struct {
	e       *env
	dyn     dynamic.Interface // counts every POST's raw answer (raw)
	proxies map[string]*cluster.DelayProxy
	bin     map[string]string

	rawMu sync.Mutex
	raw   map[string]int // status class of every raw POST answer, this scenario
}

// outcome is what one create's client saw.
type outcome struct {
	name     string
	acked    bool   // 201, or 409 on a retry (an earlier attempt landed)
	via409   bool   // acked by a 409 on a retry
	final    string // status class of the last attempt
	attempts []string
	errs     []string // the message of every failed attempt
	causes   []string // the cause of every 503 attempt (cause503)
	maxLat   time.Duration
}

// faultRow is one measured row.
type faultRow struct {
	name                             string
	creates, acked, via409           int
	failed                           map[string]int
	lost, double, leaked, unackedBut int
	attempts                         map[string]int
	causes                           map[string]int // of the 503s
	raw                              map[string]int
	maxLat                           time.Duration
	notes                            []string
}

func TestFault(t *testing.T) {
	bins := binDir(t)
	if err := cluster.CheckBinaries(bins); err != nil {
		t.Skipf("SKIP fault-injection e2e: %v", err)
	}
	bin := needHearth(t, "fault-injection e2e", "sandbox-agent", "sandboxd", "sandbox-apiserver")
	start := time.Now()
	cp := startControlPlane(t, bins, "hearth-fault-")

	e := (&env{cp: cp, nodes: map[string]string{}, warmPer: faultWarmPerNode}).connect()
	f := &faultRun{e: e, proxies: map[string]*cluster.DelayProxy{}, bin: bin}
	e.advertise = func(node, listen string) string {
		if node != faultSlow {
			return listen
		}
		p, err := cluster.NewDelayProxy(listen)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		f.proxies[node] = p
		return p.Addr()
	}
	cfg := cp.Config(cluster.AdminToken)
	cfg.WrapTransport = f.countPosts
	f.dyn = dynamic.NewForConfigOrDie(cfg)

	e.applyBase(t)
	e.startNodes(t, bin)
	e.nodeInventory(t)
	e.startAPIServer(t, bin)
	e.ns = testNamespace(t, e.cs, "hearth-fault")
	e.warmPool(t)
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("cluster, 2 nodes x %d warm and sandbox-apiserver up in %v", faultWarmPerNode, time.Since(start).Round(time.Millisecond))

	scenarios := []faultScenario{
		{name: "no fault (baseline)", prefix: "baseline", inject: func(*testing.T, *faultRun) {}},
		{name: "node kill -9 + restart", prefix: "kill", inject: func(t *testing.T, f *faultRun) {
			p := f.e.nodeProcs[faultVictim]
			if err := p.Kill(); err != nil {
				t.Errorf("kill -9 %s: %v", faultVictim, err)
				return
			}
			time.Sleep(faultDownFor)
			if err := p.Restart(); err != nil {
				t.Errorf("restart %s: %v", faultVictim, err)
			}
		}},
		{name: "sandbox-apiserver kill -9 + restart", prefix: "apirestart", resetOK: true, inject: func(t *testing.T, f *faultRun) {
			p := f.e.apiProc
			if err := p.Kill(); err != nil {
				t.Errorf("kill -9 sandbox-apiserver: %v", err)
				return
			}
			time.Sleep(faultDownFor)
			if err := p.Restart(); err != nil {
				t.Errorf("restart sandbox-apiserver: %v", err)
			}
			t.Logf("sandbox-apiserver restarted at %s", time.Now().Format("15:04:05.000"))
		}},
		// A wedged daemon killed by its liveness probe: the claims that
		// reached it while it was stopped die with it, unanswered (the
		// fleet's ErrOutcomeUnknown, then a name in doubt until it is back).
		{name: fmt.Sprintf("wedged node: SIGSTOP %v, kill -9, restart", faultWedgeFor), prefix: "wedge", inject: func(t *testing.T, f *faultRun) {
			p := f.e.nodeProcs[faultVictim]
			if err := p.Signal(syscall.SIGSTOP); err != nil {
				t.Errorf("SIGSTOP %s: %v", faultVictim, err)
				return
			}
			time.Sleep(faultWedgeFor)
			if err := p.Kill(); err != nil {
				t.Errorf("kill -9 %s: %v", faultVictim, err)
				return
			}
			time.Sleep(faultDownFor)
			if err := p.Restart(); err != nil {
				t.Errorf("restart %s: %v", faultVictim, err)
			}
		}},
		{name: fmt.Sprintf("node SIGSTOP %v", faultStopFor), prefix: "stop", inject: func(t *testing.T, f *faultRun) {
			p := f.e.nodeProcs[faultVictim]
			if err := p.Signal(syscall.SIGSTOP); err != nil {
				t.Errorf("SIGSTOP %s: %v", faultVictim, err)
				return
			}
			time.Sleep(faultStopFor)
			if err := p.Signal(syscall.SIGCONT); err != nil {
				t.Errorf("SIGCONT %s: %v", faultVictim, err)
			}
		}},
		{name: fmt.Sprintf("slow node (+%v per answer)", faultSlowBy), prefix: "slow", inject: func(t *testing.T, f *faultRun) {
			f.proxies[faultSlow].SetDelay(faultSlowBy)
		}, heal: func(f *faultRun) { f.proxies[faultSlow].SetDelay(0) }},
	}
	var rows []faultRow
	only := os.Getenv("HEARTH_FAULT_ONLY") // e.g. "kill,apirestart": a subset, while iterating
	for _, sc := range scenarios {
		if only != "" && !slices.Contains(strings.Split(only, ","), sc.prefix) {
			continue
		}
		var row faultRow
		t.Run(sc.prefix, func(t *testing.T) {
			row = f.run(t, sc)
		})
		rows = append(rows, row)
	}
	t.Log("fault-injection results (" + fmt.Sprint(faultCreates) + " creates per scenario, " +
		fmt.Sprint(faultWorkers) + " concurrent clients, client deadline " + faultDeadline.String() + "):\n" + faultTable(rows))
	t.Run("release-everything", f.releaseEverything)
	t.Logf("fault suite wall time %v", time.Since(start).Round(time.Second))
}

// countPosts records the status of every POST kube-apiserver answers the
// suite's client, client-go's own retries included.
func (f *faultRun) countPosts(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(r)
		if r.Method == http.MethodPost {
			class := "transport"
			if err == nil {
				class = fmt.Sprint(resp.StatusCode)
			}
			f.rawMu.Lock()
			if f.raw != nil {
				f.raw[class]++
			}
			f.rawMu.Unlock()
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (fn roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return fn(r) }

// run measures one scenario: creates while the fault is injected, settle,
// reconcile, then delete what the scenario created.
func (f *faultRun) run(t *testing.T, sc faultScenario) faultRow {
	row := faultRow{name: sc.name, creates: faultCreates, failed: map[string]int{}, attempts: map[string]int{}, causes: map[string]int{}}
	if err := f.settle(sc.prefix, nil); err != nil {
		t.Fatalf("not settled before the scenario: %v", err)
	}
	f.rawMu.Lock()
	f.raw = map[string]int{}
	f.rawMu.Unlock()

	var (
		next     atomic.Int32
		wg       sync.WaitGroup
		mu       sync.Mutex
		outcomes []outcome
	)
	injected := make(chan struct{})
	go func() {
		defer close(injected)
		time.Sleep(faultInjectAt)
		sc.inject(t, f)
	}()
	for w := 0; w < faultWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= faultCreates {
					return
				}
				o := f.create(fmt.Sprintf("%s-%02d", sc.prefix, i))
				mu.Lock()
				outcomes = append(outcomes, o)
				mu.Unlock()
				time.Sleep(faultPace)
			}
		}()
	}
	wg.Wait()
	<-injected
	if sc.heal != nil {
		sc.heal(f)
	}
	f.rawMu.Lock()
	row.raw, f.raw = f.raw, nil
	f.rawMu.Unlock()

	byName := map[string]*outcome{}
	for i := range outcomes {
		o := &outcomes[i]
		byName[o.name] = o
		for i, a := range o.attempts {
			row.attempts[a]++
			if !cleanClass(a) || a == "504" {
				row.notes = append(row.notes, fmt.Sprintf("%s attempt %d: %s", o.name, i+1, o.errs[min(i, len(o.errs)-1)]))
			}
		}
		for _, c := range o.causes {
			row.causes[c]++
		}
		if o.maxLat > row.maxLat {
			row.maxLat = o.maxLat
		}
		switch {
		case o.acked:
			row.acked++
			if o.via409 {
				row.via409++
			}
		default:
			row.failed[o.final]++
		}
	}

	// Settle: both daemons answer, pools refilled, every VM accounted for,
	// and the API's list agrees with the nodes' claim tables.
	settleErr := f.settle(sc.prefix, &row)
	if settleErr != nil {
		t.Errorf("%s: the system did not settle within %v: %v", sc.name, faultSettle, settleErr)
	}
	st, err := f.state(sc.prefix)
	if err != nil {
		t.Fatalf("reconcile: %v", err)
	}
	for _, name := range sortedKeys(byName) {
		o := byName[name]
		held, listed := st.held[name], st.listed[name]
		switch {
		case o.acked && !listed && held == 0:
			row.lost++
			row.notes = append(row.notes, fmt.Sprintf("LOST %s (acknowledged, attempts %v)", name, o.attempts))
		case !o.acked && (listed || held > 0):
			row.unackedBut++
			row.notes = append(row.notes, fmt.Sprintf("%s: not acknowledged (attempts %v) but present (listed %v, on %d nodes)", name, o.attempts, listed, held))
		}
		if held > 1 {
			row.double++
			row.notes = append(row.notes, fmt.Sprintf("DOUBLE %s: claimed on %d nodes %v", name, held, st.holders[name]))
		}
	}
	row.leaked = len(st.unaccounted) + st.strayVMs
	for _, u := range st.unaccounted {
		row.notes = append(row.notes, "LEAKED claim "+u)
	}
	if st.strayVMs > 0 {
		row.notes = append(row.notes, fmt.Sprintf("LEAKED %d VMs beyond warm + claimed: %v", st.strayVMs, st.vmNotes))
	}
	for _, n := range row.notes {
		t.Log(n)
	}

	// The assertions of the row.
	if row.lost != 0 || row.double != 0 || row.leaked != 0 {
		t.Errorf("%s: lost %d, double %d, leaked %d; want 0, 0, 0", sc.name, row.lost, row.double, row.leaked)
	}
	for class, n := range row.attempts {
		switch {
		case class == "reset" && sc.resetOK:
			t.Logf("%s: %d attempts had their stream reset by kube-apiserver (sandbox-apiserver died mid-answer); their creates were retried", sc.name, n)
		case !cleanClass(class):
			t.Errorf("%s: %d create attempts ended %s; want only 201, 429, 503, 504 (409 on a retry)", sc.name, n, class)
		}
	}
	if total, raws := sumCounts(row.attempts), sumCounts(row.raw); raws != total {
		t.Logf("%s: %d raw POSTs for %d attempts (client-go retried %d itself): %v", sc.name, raws, total, raws-total, row.raw)
	}
	for class, n := range row.raw {
		if class == "500" || (class == "transport" && !sc.resetOK) {
			t.Errorf("%s: kube-apiserver answered %d raw POSTs with %s", sc.name, n, class)
		}
	}
	for class := range row.failed {
		if class != "429" && class != "503" && class != "504" && !(class == "reset" && sc.resetOK) {
			t.Errorf("%s: failed creates ended %s; want 429, 503 or 504", sc.name, class)
		}
	}

	// Release what the scenario created: by name through the API.
	f.deleteAll(t, sc.prefix, st)
	return row
}

// cleanClass: a client may see these, and nothing else, under a fault.
func cleanClass(c string) bool {
	switch c {
	case "201", "409-on-retry", "429", "503", "504":
		return true
	}
	return false
}

// create creates one Sandbox named name, retrying (same name) a 429, 503
// or 504 up to faultAttempts times, each attempt with its own deadline.
func (f *faultRun) create(name string) outcome {
	o := outcome{name: name}
	rc := f.dyn.Resource(sandboxesGVR).Namespace(f.e.ns)
	for attempt := 0; attempt < faultAttempts; attempt++ {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("agents.x-k8s.io/v1beta1")
		u.SetKind("Sandbox")
		u.SetName(name)
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{"name": "main", "image": e2eImage}},
			"spec", "podTemplate", "spec", "containers")
		ctx, cancel := context.WithTimeout(context.Background(), faultDeadline)
		start := time.Now()
		_, err := rc.Create(ctx, u, metav1.CreateOptions{})
		lat := time.Since(start)
		cancel()
		if lat > o.maxLat {
			o.maxLat = lat
		}
		class := errClass(err)
		if class == "409" && attempt > 0 {
			class = "409-on-retry"
		}
		o.attempts = append(o.attempts, class)
		o.final = class
		if class == "503" {
			o.causes = append(o.causes, cause503(err))
		}
		if err != nil {
			o.errs = append(o.errs, fmt.Sprintf("%s (at %s, %v): %v", class, start.Format("15:04:05.000"), lat.Round(time.Millisecond), err))
		}
		switch class {
		case "201":
			o.acked = true
			return o
		case "409-on-retry":
			o.acked, o.via409 = true, true
			return o
		case "429", "503", "504", "reset":
			time.Sleep(time.Duration(300*(attempt+1)) * time.Millisecond)
			continue
		}
		return o
	}
	return o
}

// cause503 names why a create was 503: no warm microVM ("no warm"), a
// claim whose node did not answer ("no answer"), a retry of such a name
// while that node is still down ("in doubt"), a node that refused the
// connection ("node down"), or sandbox-apiserver unreachable from
// kube-apiserver ("api down").
func cause503(err error) string {
	m := err.Error()
	switch {
	case strings.Contains(m, "no warm sandbox available"):
		return "no warm"
	case strings.Contains(m, "got no answer"):
		return "no answer"
	case strings.Contains(m, "unknown outcome and the node does not answer"):
		return "in doubt"
	case strings.Contains(m, "connection refused"):
		return "node down"
	case strings.Contains(m, "service unavailable"), strings.Contains(m, "the server is currently unable"),
		strings.Contains(m, "error trying to reach service"):
		return "api down"
	}
	return m
}

// errClass is the status class a create's client saw: the HTTP code,
// "hang" for a client deadline, "reset" for a connection or stream broken
// mid-answer, or "transport: ...".
func errClass(err error) string {
	if err == nil {
		return "201"
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "hang"
	}
	if m := err.Error(); strings.Contains(m, "stream error") || strings.Contains(m, "INTERNAL_ERROR") ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return "reset"
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code != 0 {
		return fmt.Sprint(st.Status().Code)
	}
	return "transport: " + err.Error()
}

// faultState is the reconciliation input: what the API lists, what each
// node holds, and the VMs each node runs.
type faultState struct {
	listed  map[string]bool     // names the API lists (scenario prefix)
	held    map[string]int      // name -> claims under it on all nodes
	holders map[string][]string // name -> "node/claim-id"
	// unaccounted: claims on a node no listed name accounts for.
	unaccounted []string
	// strayVMs: VMs (sim cgroups with processes) beyond warm + claimed.
	strayVMs int
	vmNotes  []string
	claims   map[string][]nodeapi.Sandbox // node -> its claim table
	pools    map[string]nodeapi.PoolInfo  // node -> the e2e pool
}

// nodeClient is a direct client of node's listen address with its own token.
func (f *faultRun) nodeClient(node string) *nodeapi.Client {
	return nodeapi.NewClient(f.e.nodeListen[node], nodeapi.NodeToken(fleetToken, node))
}

// state reads the API's list and every node's claim table, info and VMs.
func (f *faultRun) state(prefix string) (*faultState, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st := &faultState{listed: map[string]bool{}, held: map[string]int{}, holders: map[string][]string{},
		claims: map[string][]nodeapi.Sandbox{}, pools: map[string]nodeapi.PoolInfo{}}
	l, err := f.e.dyn.Resource(sandboxesGVR).Namespace(f.e.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list: %w", err)
	}
	all := map[string]bool{}
	for _, it := range l.Items {
		all[it.GetName()] = true
		if strings.HasPrefix(it.GetName(), prefix+"-") {
			st.listed[it.GetName()] = true
		}
	}
	vms, err := simVMs(f.e.cp.Dir)
	if err != nil {
		return nil, err
	}
	for _, node := range nodeNames {
		c := f.nodeClient(node)
		claims, err := c.List(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: list claims: %w", node, err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("%s: info: %w", node, err)
		}
		st.claims[node] = claims
		var warm int32
		for _, p := range info.Pools {
			warm += p.Warm
			if p.Template == e2eImage {
				st.pools[node] = p
			}
		}
		for _, s := range claims {
			ns, name, _ := strings.Cut(s.ClaimRef, "/")
			if ns == f.e.ns && strings.HasPrefix(name, prefix+"-") {
				st.held[name]++
				st.holders[name] = append(st.holders[name], node+"/"+s.ID)
			}
			if ns != f.e.ns || !all[name] {
				st.unaccounted = append(st.unaccounted, fmt.Sprintf("%s/%s (claim ref %q)", node, s.ID, s.ClaimRef))
			}
		}
		if n := vms[node] - int(warm) - len(claims); n != 0 {
			if n > 0 {
				st.strayVMs += n
			}
			st.vmNotes = append(st.vmNotes, fmt.Sprintf("%s: %d VMs running, %d warm + %d claimed", node, vms[node], warm, len(claims)))
		}
	}
	return st, nil
}

// settle waits until both daemons and the API answer, each node's pool is
// at its target with nothing refilling, every running VM is warm or
// claimed, and the API's list of the scenario's names equals the nodes'
// claim tables. It returns the last unmet condition at the deadline.
func (f *faultRun) settle(prefix string, row *faultRow) error {
	start := time.Now()
	err := cluster.Poll(nil, faultSettle, 250*time.Millisecond, func() (bool, error) {
		for _, node := range nodeNames {
			if done, _ := f.e.nodeProcs[node].Exited(); done {
				return false, fmt.Errorf("%s exited", node)
			}
		}
		if done, _ := f.e.apiProc.Exited(); done {
			return false, errors.New("sandbox-apiserver exited")
		}
		st, err := f.state(prefix)
		if err != nil {
			return false, err
		}
		for _, node := range nodeNames {
			p, ok := st.pools[node]
			if !ok || p.Target <= 0 || p.Warm < p.Target || p.Refilling > 0 {
				return false, fmt.Errorf("%s pool %+v not refilled", node, p)
			}
		}
		if st.strayVMs > 0 || len(st.vmNotes) > 0 {
			return false, fmt.Errorf("VMs not accounted for: %v", st.vmNotes)
		}
		if len(st.unaccounted) > 0 {
			return false, fmt.Errorf("claims the API does not list: %v", st.unaccounted)
		}
		for name := range st.held {
			if !st.listed[name] {
				return false, fmt.Errorf("%s is held on a node but not listed", name)
			}
		}
		for name := range st.listed {
			if st.held[name] == 0 {
				return false, fmt.Errorf("%s is listed but on no node", name)
			}
		}
		return true, nil
	})
	if row != nil {
		row.notes = append(row.notes, fmt.Sprintf("settled in %v", time.Since(start).Round(100*time.Millisecond)))
	}
	return err
}

// deleteAll deletes, through the API, every name of the scenario the API
// lists or a node holds, then waits until no node holds any.
func (f *faultRun) deleteAll(t *testing.T, prefix string, st *faultState) {
	names := map[string]bool{}
	for n := range st.listed {
		names[n] = true
	}
	for n := range st.held {
		names[n] = true
	}
	rc := f.e.dyn.Resource(sandboxesGVR).Namespace(f.e.ns)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 4)
	for name := range names {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if err := rc.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("delete %s: %v", name, err)
			}
		}()
	}
	wg.Wait()
	err := cluster.Poll(nil, 30*time.Second, 250*time.Millisecond, func() (bool, error) {
		st, err := f.state(prefix)
		if err != nil {
			return false, err
		}
		return len(st.held) == 0 && len(st.listed) == 0, fmt.Errorf("after delete: held %v, listed %v", st.held, st.listed)
	})
	if err != nil {
		t.Error(err)
	}
}

// releaseEverything scales the warm pool to 0 and checks that no node
// holds a claim and no guest process of this run's nodes is left.
func (f *faultRun) releaseEverything(t *testing.T) {
	mustKubectl(t, f.e.cp.Admin, "", "-n", f.e.ns, "patch", "sandboxwarmpool", "python", "--type=merge", "-p", `{"spec":{"replicas":0}}`)
	err := cluster.Poll(nil, 60*time.Second, 250*time.Millisecond, func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, node := range nodeNames {
			info, err := f.nodeClient(node).Info(ctx)
			if err != nil {
				return false, err
			}
			if info.Claimed != 0 {
				return false, fmt.Errorf("%s still holds %d claims", node, info.Claimed)
			}
			for _, p := range info.Pools {
				if p.Warm != 0 || p.Target != 0 || p.Refilling != 0 {
					return false, fmt.Errorf("%s pool %+v", node, p)
				}
			}
		}
		procs, err := simGuestProcs(f.e.cp.Dir)
		if err != nil {
			return false, err
		}
		return procs == 0, fmt.Errorf("%d guest processes left", procs)
	})
	if err != nil {
		t.Errorf("after releasing everything: %v", err)
	} else {
		t.Log("released everything: 0 claims, 0 warm, 0 guest processes on both nodes")
	}
}

// simKeys maps each node's sim cgroup key (the first 8 hex digits of the
// SHA-256 of its VM root, <data-dir>/vms; vmm/sim) to the node.
func simKeys(dir string) map[string]string {
	keys := map[string]string{}
	for _, node := range nodeNames {
		root, _ := filepath.Abs(filepath.Join(dir, node, "vms"))
		sum := sha256.Sum256([]byte(root))
		keys[hex.EncodeToString(sum[:4])] = node
	}
	return keys
}

var simCgroupRE = regexp.MustCompile(`hearth-sim/([0-9a-f]{8})-([^/\s]+)`)

// scanSim reads every process's cgroups and calls fn for each one in a sim
// VM cgroup of this run's nodes (only theirs: other runs' guests do not
// count).
func scanSim(dir string, fn func(node, vm string)) error {
	keys := simKeys(dir)
	procs, err := filepath.Glob("/proc/[0-9]*/cgroup")
	if err != nil {
		return err
	}
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // exited meanwhile
		}
		for _, m := range simCgroupRE.FindAllStringSubmatch(string(b), -1) {
			if node, ok := keys[m[1]]; ok {
				fn(node, m[2])
				break
			}
		}
	}
	return nil
}

// simVMs counts, per node, the VMs with at least one live process.
func simVMs(dir string) (map[string]int, error) {
	seen := map[string]map[string]bool{}
	err := scanSim(dir, func(node, vm string) {
		if seen[node] == nil {
			seen[node] = map[string]bool{}
		}
		seen[node][vm] = true
	})
	out := map[string]int{}
	for node, vms := range seen {
		out[node] = len(vms)
	}
	return out, err
}

// simGuestProcs counts the processes in this run's nodes' VM cgroups.
func simGuestProcs(dir string) (int, error) {
	n := 0
	err := scanSim(dir, func(string, string) { n++ })
	return n, err
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// faultTable renders the rows as one table.
func faultTable(rows []faultRow) string {
	classes := func(m map[string]int) string {
		if len(m) == 0 {
			return "0"
		}
		total := 0
		var parts []string
		for _, k := range sortedKeys(m) {
			total += m[k]
			parts = append(parts, fmt.Sprintf("%s×%d", k, m[k]))
		}
		return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
	}
	hdr := []string{"scenario", "creates", "acknowledged", "failed (status)", "lost", "double", "leaked", "unacked but present", "slowest attempt", "attempts (status)", "503 causes"}
	cells := [][]string{hdr}
	for _, r := range rows {
		ack := fmt.Sprint(r.acked)
		if r.via409 > 0 {
			ack += fmt.Sprintf(" (%d by 409 on retry)", r.via409)
		}
		cells = append(cells, []string{r.name, fmt.Sprint(r.creates), ack, classes(r.failed),
			fmt.Sprint(r.lost), fmt.Sprint(r.double), fmt.Sprint(r.leaked), fmt.Sprint(r.unackedBut),
			r.maxLat.Round(10 * time.Millisecond).String(), classes(r.attempts), classes(r.causes)})
	}
	width := make([]int, len(hdr))
	for _, row := range cells {
		for i, c := range row {
			if n := len([]rune(c)); n > width[i] {
				width[i] = n
			}
		}
	}
	var b strings.Builder
	line := func(row []string) {
		b.WriteString("|")
		for i, c := range row {
			b.WriteString(" " + c + strings.Repeat(" ", width[i]-len([]rune(c))) + " |")
		}
		b.WriteString("\n")
	}
	line(cells[0])
	sep := make([]string, len(hdr))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
	}
	b.WriteString("|")
	for i := range sep {
		b.WriteString("-" + sep[i] + "-|")
	}
	b.WriteString("\n")
	for _, row := range cells[1:] {
		line(row)
	}
	return b.String()
}
