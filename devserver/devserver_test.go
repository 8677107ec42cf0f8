package devserver_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hearthvm/hearth/devserver"
	"github.com/hearthvm/hearth/devserver/devservertest"
	"github.com/hearthvm/hearth/nodeapi"
)

// dev is one sandbox-dev running in-process (devservertest).
type dev struct {
	*devservertest.Dev
	ready devserver.Ready
}

// start runs sandbox-dev on dataDir (devservertest.Start, then mut) and
// checks its one ready line names the kubeconfig it wrote.
func start(t testing.TB, dataDir string, mut ...func(*devserver.Options)) *dev {
	t.Helper()
	d := devservertest.Start(t, append([]func(*devserver.Options){func(o *devserver.Options) { o.DataDir = dataDir }}, mut...)...)
	if out := d.Out(); !strings.Contains(out, d.Kubeconfig) || strings.Count(out, "\n") != 1 {
		t.Fatalf("ready line: %q", out)
	}
	return &dev{Dev: d, ready: d.Ready}
}

func (d *dev) stop(t testing.TB) { d.Stop(t) }

func (d *dev) kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	// No kubectl call may hang the test (kubectl delete waits without limit).
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+d.ready.Kubeconfig)
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (d *dev) mustKubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := d.kubectl(t, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// eventually is require.EventuallyWithT polling cond every 200 ms: on
// failure it names what and cond's last answer. cond runs on testify's
// goroutine, so a t.Fatal in it fails the test at the deadline.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		ok, last := cond()
		assert.True(c, ok, "%s: not within %s (last: %s)", what, within, last)
	}, within, 200*time.Millisecond)
}

func (d *dev) readyReplicas(t *testing.T) func() (int, string) {
	return func() (int, string) {
		out, err := d.kubectl(t, "get", "sandboxwarmpools", "rt", "-o", "jsonpath={.status.readyReplicas}")
		if err != nil {
			return -1, out
		}
		if out == "" {
			return 0, out
		}
		n, err := strconv.Atoi(out)
		if err != nil {
			return -1, out
		}
		return n, out
	}
}

func (d *dev) waitReady(t *testing.T, want int) {
	t.Helper()
	rr := d.readyReplicas(t)
	eventually(t, 90*time.Second, "readyReplicas "+strconv.Itoa(want), func() (bool, string) {
		n, out := rr()
		return n == want, out
	})
}

func (d *dev) nodesWarm(t *testing.T) int32 {
	t.Helper()
	var total int32
	for name, addr := range d.ready.Nodes {
		info, err := nodeapi.NewClient(addr, d.ready.RootToken).Info(context.Background())
		if err != nil {
			t.Fatalf("node %s info: %v", name, err)
		}
		for _, p := range info.Pools {
			total += p.Warm
		}
	}
	return total
}

func TestDevServer_KubectlEndToEndAndRestart(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not on PATH")
	}
	if testing.Short() {
		t.Skip("starts the whole dev system")
	}
	dir := t.TempDir()
	examples, err := filepath.Abs("../examples/l3")
	if err != nil {
		t.Fatal(err)
	}
	d := start(t, dir) // stopped at the test's end if it fails first
	resp, err := http.Get(d.ready.E2B + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("e2b /health: %d", resp.StatusCode)
	}

	d.mustKubectl(t, "apply", "-f", examples+"/")
	d.waitReady(t, 4)

	// A matching Sandbox is a warm claim: 201 at once.
	out := d.mustKubectl(t, "create", "-f", filepath.Join(examples, "sandbox", "sandbox.yaml"))
	if !strings.Contains(out, "demo created") {
		t.Fatalf("create: %s", out)
	}
	eventually(t, 30*time.Second, "demo listed", func() (bool, string) {
		out, _ := d.kubectl(t, "get", "sandboxes", "-o", "name")
		return strings.Contains(out, "sandbox.agents.x-k8s.io/demo"), out
	})
	// Its log, from its real agent through its node (the node's token for
	// the agent): nothing has run in it yet, so empty; a follow that is
	// not a boolean is a 400 (kubectlsandbox's test follows it).
	if out := d.mustKubectl(t, "get", "--raw", "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes/demo/log?tailLines=10"); out != "" {
		t.Fatalf("log of a sandbox nothing ran in: %q", out)
	}
	if out, err := d.kubectl(t, "get", "--raw", "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes/demo/log?follow=maybe"); err == nil || !strings.Contains(out, "not a boolean") {
		t.Fatalf("follow: %v %s", err, out)
	}

	d.mustKubectl(t, "patch", "sandboxwarmpool", "rt", "--type=merge", "-p", `{"spec":{"replicas":12}}`)
	d.waitReady(t, 12)
	d.mustKubectl(t, "patch", "sandboxwarmpool", "rt", "--type=merge", "-p", `{"spec":{"replicas":0}}`)
	d.waitReady(t, 0)
	eventually(t, 30*time.Second, "nodes hold 0 warm", func() (bool, string) {
		w := d.nodesWarm(t)
		return w == 0, strconv.Itoa(int(w))
	})

	// A Sandbox whose key has no pool: 503 naming the key.
	nopool := filepath.Join(dir, "nopool.yaml")
	if err := os.WriteFile(nopool, []byte(`apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata: {name: nopool, namespace: default}
spec:
  podTemplate:
    spec:
      containers: [{name: main, image: example.com/nothing:1}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = d.kubectl(t, "create", "-f", nopool)
	if err == nil || !strings.Contains(out, "ServiceUnavailable") ||
		!strings.Contains(out, `template="example.com/nothing:1"`) || !strings.Contains(out, `net="none"`) || !strings.Contains(out, `size="small"`) {
		t.Fatalf("no-pool create: err=%v\n%s", err, out)
	}

	out = d.mustKubectl(t, "get", "nodeinventories", "-o", "name")
	if got := len(strings.Fields(out)); got != 2 {
		t.Fatalf("nodeinventories: %q", out)
	}

	// Nothing per sandbox is stored: etcd holds the pool, the template, the
	// inventories and the lease only.
	keys := etcdKeys(t, d.ready)
	for _, k := range keys {
		if strings.Contains(k, "/sandboxes/") || strings.Contains(k, "demo") {
			t.Fatalf("per-sandbox key in etcd: %s (all: %v)", k, keys)
		}
	}
	t.Logf("etcd keys: %v", keys)

	// Restart on the same data directory.
	d.stop(t)
	d = start(t, dir)
	out = d.mustKubectl(t, "get", "sandboxtemplates,sandboxwarmpools", "-o", "name")
	if !strings.Contains(out, "sandboxtemplate.extensions.agents.x-k8s.io/rt") || !strings.Contains(out, "sandboxwarmpool.extensions.agents.x-k8s.io/rt") {
		t.Fatalf("after restart: %s", out)
	}
	// The user's replicas (0) survive the default-pool apply at startup.
	if out := d.mustKubectl(t, "get", "sandboxwarmpools", "rt", "-o", "jsonpath={.spec.replicas}"); out != "0" {
		t.Fatalf("replicas after restart: %s", out)
	}
	eventually(t, 30*time.Second, "demo back after restart", func() (bool, string) {
		out, _ := d.kubectl(t, "get", "sandboxes", "-o", "name")
		return strings.Contains(out, "sandbox.agents.x-k8s.io/demo"), out
	})
	// --wait=false: kubectl's wait-for-delete can miss the DELETED event
	// when the pinned LIST still shows the sandbox (view not yet
	// republished) but the pinned watch opens after it is gone (reported
	// to the apiserver owner). The release itself is checked by polling.
	d.mustKubectl(t, "delete", "sandboxes", "demo", "--wait=false")
	eventually(t, 30*time.Second, "demo gone after delete", func() (bool, string) {
		out, _ := d.kubectl(t, "get", "sandboxes", "-o", "name")
		return !strings.Contains(out, "demo"), out
	})
	if out, _ := d.kubectl(t, "get", "sandboxes", "demo"); !strings.Contains(out, "NotFound") {
		t.Fatalf("get after delete: %s", out)
	}
	d.stop(t)
	// No guest process outlives the dev system.
	if procs := processesMentioning(t, dir); len(procs) > 0 {
		t.Fatalf("processes left running: %v", procs)
	}
}

// processesMentioning lists the command lines under /proc that mention s.
func processesMentioning(t *testing.T, s string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if cmd := strings.ReplaceAll(string(b), "\x00", " "); strings.Contains(cmd, s) {
			out = append(out, e.Name()+": "+cmd)
		}
	}
	return out
}

// etcdClient is a client of the embedded etcd with the client certificate
// it requires.
func etcdClient(t *testing.T, r devserver.Ready) *clientv3.Client {
	t.Helper()
	tlsCfg, err := (transport.TLSInfo{TrustedCAFile: r.EtcdCA, CertFile: r.EtcdCert, KeyFile: r.EtcdKey}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{r.Etcd}, DialTimeout: 5 * time.Second, TLS: tlsCfg})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// etcdKeys lists every key.
func etcdKeys(t *testing.T, r devserver.Ready) []string {
	t.Helper()
	c := etcdClient(t, r)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// BenchmarkStartup measures a cold start (fresh data directory) to the
// ready line, then a clean shutdown. Target: well under 60 s.
func BenchmarkStartup(b *testing.B) {
	var total time.Duration
	n := 0
	for b.Loop() {
		d := start(b, b.TempDir())
		total += d.ready.Startup
		n++
		d.stop(b)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms-to-ready/op")
}
