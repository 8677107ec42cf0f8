package devserver_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hearthvm/hearth/devserver"
	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/internal/testagent"
	"github.com/hearthvm/hearth/internal/testnet"
	"github.com/hearthvm/hearth/nodeapi"
)

// TestDevServer_TemplateEgressPolicyThroughKubectl: through kubectl against
// the whole dev system, a SandboxTemplate whose networkPolicy Hearth
// cannot enforce is refused naming the field, and one it can warms its
// pool on the egress lane and serves a SandboxClaim whose sandbox its node
// holds to the template's policy, and whose traffic the policy filters:
// over the test's own network (internal/testnet; nothing leaves the
// machine) the sandbox reaches the allowed range's port 80, not its port
// 443 nor another range. A template without a networkPolicy gets
// agent-sandbox's default: the public internet, not RFC 1918 nor the
// metadata server — docs/API.md#egress-policy-kubernetes.
func TestDevServer_TemplateEgressPolicyThroughKubectl(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not on PATH")
	}
	if testing.Short() {
		t.Skip("starts the whole dev system")
	}
	net := testnet.Start(t,
		testnet.Host{Addr: "203.0.113.10"},
		testnet.Host{Addr: "198.18.0.10"},
		testnet.Host{Addr: "10.1.2.3"},
		testnet.Host{Addr: "169.254.169.254"},
	)
	dir := t.TempDir()
	d := start(t, dir, func(o *devserver.Options) {
		o.VMMOptions = map[string]string{"uplink_netns": net.UplinkPath}
	})
	defer d.stop(t)
	write := func(name, y string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	template := func(name, policy string) string {
		return `---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: ` + name + `
  namespace: default
  annotations: {sandbox.cocoonstack.io/net: egress}
spec:
  podTemplate:
    spec:
      containers: [{name: main, image: hearth/egress-` + name + `:1}]
` + policy
	}
	poolAndClaim := func(pool, claim string) string {
		return `---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: ` + pool + `, namespace: default}
spec:
  replicas: 1
  sandboxTemplateRef: {name: ` + pool + `}
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: ` + claim + `, namespace: default}
spec:
  warmPoolRef: {name: ` + pool + `}
`
	}

	bad := write("bad.yaml", template("bad", `  networkPolicy:
    egress: [{to: [{ipBlock: {cidr: 203.0.113.0/24}}, {namespaceSelector: {}}]}]
`))
	out, err := d.kubectl(t, "apply", "-f", bad)
	if err == nil || !strings.Contains(out, "spec.networkPolicy.egress[0].to[1]") || !strings.Contains(out, "is invalid") {
		t.Fatalf("kubectl apply of a namespaceSelector: err %v, output %q; want refused naming spec.networkPolicy.egress[0].to[1]", err, out)
	}
	if out, err := d.kubectl(t, "get", "sandboxtemplate", "bad"); err == nil {
		t.Fatalf("the refused template was stored: %s", out)
	}

	good := write("good.yaml", template("rt", `  networkPolicy:
    egress: [{to: [{ipBlock: {cidr: 203.0.113.0/24}}], ports: [{port: 80}]}]
`)+poolAndClaim("rt", "job")+template("open", "")+poolAndClaim("open", "open-job"))
	d.mustKubectl(t, "apply", "-f", good)
	held := func(claim string) nodeapi.Sandbox {
		t.Helper()
		eventually(t, 90*time.Second, claim+" Ready", func() (bool, string) {
			out, _ := d.kubectl(t, "get", "sandboxclaim", claim, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason} {.status.conditions[?(@.type=="Ready")].message}`)
			return strings.HasPrefix(out, "True "), out
		})
		var sbs []nodeapi.Sandbox
		var node *nodeapi.Client
		for _, addr := range d.ready.Nodes {
			c := nodeapi.NewClient(addr, d.ready.RootToken)
			got, err := c.GetByRef(context.Background(), "default/"+claim)
			if err != nil && !errors.Is(err, nodeapi.ErrNotFound) {
				t.Fatal(err)
			}
			if len(got) > 0 {
				node = c
			}
			sbs = append(sbs, got...)
		}
		if len(sbs) != 1 {
			t.Fatalf("%d sandboxes under default/%s", len(sbs), claim)
		}
		sb, err := node.Get(context.Background(), sbs[0].ID) // a root lookup by id carries the token
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	// reaches: an HTTP GET from inside the sandbox gets any answer (port
	// 443 answers a plain-HTTP request with a 400).
	reaches := func(s nodeapi.Sandbox, addr, port string) bool {
		t.Helper()
		r := testagent.Run(t, s.AgentAddr, s.Token, "root", "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 "+addr+" "+port+" 2>&1; true")
		return strings.Contains(r.Stdout, "HTTP/1.")
	}

	// The node records the policy it holds the claimed sandbox to, and
	// the sandbox's traffic obeys it.
	want := &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, CIDR: "203.0.113.0/24", Ports: []egress.Port{{Port: 80}}}}}
	job := held("job")
	if diff := cmp.Diff(want, job.Egress); diff != "" {
		t.Fatalf("the claimed sandbox's egress policy on its node -want +got:\n%s", diff)
	}
	for _, c := range []struct {
		addr, port string
		want       bool
	}{{"203.0.113.10", "80", true}, {"203.0.113.10", "443", false}, {"198.18.0.10", "80", false}} {
		if got := reaches(job, c.addr, c.port); got != c.want {
			t.Errorf("template policy: %s:%s reached %v, want %v", c.addr, c.port, got, c.want)
		}
	}

	// A template without a networkPolicy: agent-sandbox's default.
	open := held("open-job")
	for _, c := range []struct {
		addr string
		want bool
	}{{"198.18.0.10", true}, {"203.0.113.10", true}, {"10.1.2.3", false}, {"169.254.169.254", false}} {
		if got := reaches(open, c.addr, "80"); got != c.want {
			t.Errorf("default policy: %s:80 reached %v, want %v", c.addr, got, c.want)
		}
	}
}
