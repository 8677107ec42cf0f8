package devserver_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/devserver"
)

// kubectl describe shows Events in sandbox-dev, which has no kube-apiserver:
// the warm-pool controller's (events.k8s.io/v1, stored with a TTL) on the
// pool, and a sandbox's node-recorded ones (core/v1, from its node's
// record) on the sandbox; kubectl events lists them.
func TestDevServer_KubectlDescribeShowsEvents(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not on PATH")
	}
	if testing.Short() {
		t.Skip("starts the whole dev system")
	}
	d := start(t, t.TempDir())
	defer d.stop(t)
	d.waitReady(t, 4)
	eventually(t, 30*time.Second, "the pool's FillFinished event", func() (bool, string) {
		out, _ := d.kubectl(t, "describe", "sandboxwarmpool", "rt")
		return strings.Contains(out, "Events:") && strings.Contains(out, "FillFinished") && strings.Contains(out, "hearth.dev/warm-pool-controller"), out
	})
	examples, err := filepath.Abs("../examples/l3")
	if err != nil {
		t.Fatal(err)
	}
	d.mustKubectl(t, "create", "-f", filepath.Join(examples, "sandbox", "sandbox.yaml"))
	pause := filepath.Join(t.TempDir(), "pause.json")
	if err := os.WriteFile(pause, []byte(`{"apiVersion":"agents.x-k8s.io/v1beta1","kind":"SandboxPauseOptions"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	d.mustKubectl(t, "create", "--raw", "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes/demo/pause",
		"-f", pause)
	eventually(t, 30*time.Second, "the sandbox's events", func() (bool, string) {
		out, _ := d.kubectl(t, "describe", "sandbox", "demo")
		return strings.Contains(out, "Events:") && strings.Contains(out, "Claimed") && strings.Contains(out, "Paused"), out
	})
	out := d.mustKubectl(t, "events", "--for", "sandbox/demo")
	if !strings.Contains(out, "Claimed") {
		t.Fatalf("kubectl events --for sandbox/demo:\n%s", out)
	}
	// sandbox-dev's nodes write no Events (node.Config.Events unset): the
	// view renders their records, so an event is shown once, never also
	// stored.
	if out := d.mustKubectl(t, "describe", "sandbox", "demo"); strings.Count(out, " Paused ") != 1 {
		t.Fatalf("kubectl describe sandbox demo shows Paused %d times:\n%s", strings.Count(out, " Paused "), out)
	}
	if out := d.mustKubectl(t, "get", "events.events.k8s.io", "--field-selector", "regarding.kind=Sandbox", "-o", "name"); strings.TrimSpace(out) != "" {
		t.Fatalf("sandbox-dev stored Events regarding a Sandbox:\n%s", out)
	}
	if out, err := d.kubectl(t, "get", "events", "--field-selector", "involvedObject.bogus=x"); err == nil {
		t.Fatalf("an unknown field selector was accepted:\n%s", out)
	}
}

// A pool whose image cannot be pulled shows BootFailed, with the node's
// error, in kubectl describe of the pool and of its template (it had
// stayed at 0 ready with nothing in describe).
func TestDevServer_KubectlDescribeShowsAPoolsBootFailures(t *testing.T) {
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not on PATH")
	}
	if testing.Short() {
		t.Skip("starts the whole dev system")
	}
	cache := t.TempDir()
	// No default pool: its image would be built (minutes) into the fresh cache.
	d := start(t, t.TempDir(), func(o *devserver.Options) { o.ImageCache, o.DefaultPool = cache, false })
	defer d.stop(t)
	manifest := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(manifest, []byte(`
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata: {name: bad, namespace: default}
spec:
  podTemplate:
    spec:
      containers: [{name: main, image: "img:1"}]
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata: {name: bad, namespace: default}
spec:
  replicas: 1
  sandboxTemplateRef: {name: bad}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	d.mustKubectl(t, "apply", "-f", manifest)
	for _, kind := range []string{"sandboxwarmpool", "sandboxtemplate"} {
		eventually(t, 90*time.Second, kind+" BootFailed", func() (bool, string) {
			out, _ := d.kubectl(t, "describe", kind, "bad")
			return strings.Contains(out, "BootFailed") && strings.Contains(out, "img:1"), out
		})
	}
}
