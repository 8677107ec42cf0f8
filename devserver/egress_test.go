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

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/nodeapi"
)

// TestDevServer_TemplateEgressPolicyThroughKubectl: through kubectl against
// the whole dev system, a SandboxTemplate whose networkPolicy Hearth
// cannot enforce is refused naming the field, and one it can warms its
// pool on the egress lane and serves a SandboxClaim whose sandbox its node
// holds to the template's policy — docs/API.md#egress-policy-kubernetes.
func TestDevServer_TemplateEgressPolicyThroughKubectl(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not on PATH")
	}
	if testing.Short() {
		t.Skip("starts the whole dev system")
	}
	dir := t.TempDir()
	d := start(t, dir)
	defer d.stop(t)
	write := func(name, y string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	template := func(name, policy string) string {
		return `
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: ` + name + `
  namespace: default
  annotations: {sandbox.cocoonstack.io/net: egress}
spec:
  podTemplate:
    spec:
      containers: [{name: main, image: hearth/egress-test:1}]
  networkPolicy:
` + policy
	}

	bad := write("bad.yaml", template("bad", `    egress: [{to: [{ipBlock: {cidr: 203.0.113.0/24}}, {namespaceSelector: {}}]}]
`))
	out, err := d.kubectl(t, "apply", "-f", bad)
	if err == nil || !strings.Contains(out, "spec.networkPolicy.egress[0].to[1]") || !strings.Contains(out, "is invalid") {
		t.Fatalf("kubectl apply of a namespaceSelector: err %v, output %q; want refused naming spec.networkPolicy.egress[0].to[1]", err, out)
	}
	if out, err := d.kubectl(t, "get", "sandboxtemplate", "bad"); err == nil {
		t.Fatalf("the refused template was stored: %s", out)
	}

	good := write("good.yaml", template("rt", `    egress: [{to: [{ipBlock: {cidr: 203.0.113.0/24}}], ports: [{port: 443}]}]
`)+`---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: rt, namespace: default}
spec:
  replicas: 2
  sandboxTemplateRef: {name: rt}
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxClaim
metadata: {name: job, namespace: default}
spec:
  warmPoolRef: {name: rt}
`)
	d.mustKubectl(t, "apply", "-f", good)
	eventually(t, 90*time.Second, "the claim Ready", func() (bool, string) {
		out, _ := d.kubectl(t, "get", "sandboxclaim", "job", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason} {.status.conditions[?(@.type=="Ready")].message}`)
		return strings.HasPrefix(out, "True "), out
	})
	// The node records the policy it holds the claimed sandbox to.
	want := &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, CIDR: "203.0.113.0/24", Ports: []egress.Port{{Port: 443}}}}}
	var held []nodeapi.Sandbox
	for _, addr := range d.ready.Nodes {
		sbs, err := nodeapi.NewClient(addr, d.ready.RootToken).GetByRef(context.Background(), "default/job")
		if err != nil && !errors.Is(err, nodeapi.ErrNotFound) {
			t.Fatal(err)
		}
		held = append(held, sbs...)
	}
	if len(held) != 1 {
		t.Fatalf("%d sandboxes under default/job", len(held))
	}
	if diff := cmp.Diff(want, held[0].Egress); diff != "" {
		t.Fatalf("the claimed sandbox's egress policy on its node -want +got:\n%s", diff)
	}
}
