package apiserver_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

const manifest = `apiVersion: agents.x-k8s.io/v1beta1
kind: Sandbox
metadata:
  name: %s
spec:
  podTemplate:
    spec:
      containers:
      - name: main
        image: ghcr.io/x/y:1
`

func writeManifest(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(manifest, "%s", name)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func mustKubectl(t *testing.T, s *server, args ...string) string {
	t.Helper()
	out, err := s.kubectl(t, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

func TestKubectl(t *testing.T) {
	needKubectl(t)
	f := fleettest.Start(t, 2)
	f.SetWarm(t, spec, 3, 3)
	s := startServer(t, f)
	warmTotal := func() int32 {
		return fleettest.Warm(t, f.Nodes[0], image) + fleettest.Warm(t, f.Nodes[1], image)
	}

	t.Run("api-resources", func(t *testing.T) {
		out := mustKubectl(t, s, "api-resources", "--api-group=agents.x-k8s.io")
		if !strings.Contains(out, "sandboxes") || !strings.Contains(out, "true") || !strings.Contains(out, "Sandbox") {
			t.Fatalf("api-resources:\n%s", out)
		}
		disc := mustKubectl(t, s, "get", "--raw", "/apis/agents.x-k8s.io/v1beta1")
		for _, want := range []string{
			`"name":"sandboxes","singularName":"sandbox","namespaced":true,"kind":"Sandbox","verbs":["create","delete","get","list","patch","update","watch"]`,
			`"name":"sandboxes/pause"`, `"name":"sandboxes/resume"`, `"name":"sandboxes/fork"`, `"name":"sandboxes/snapshot"`,
			`"name":"sandboxes/log","singularName":"","namespaced":true,"kind":"Sandbox","verbs":["get"]`,
			`"name":"sandboxes/stats","singularName":"","namespaced":true,"kind":"SandboxStats","verbs":["get"]`,
		} {
			if !strings.Contains(disc, want) {
				t.Errorf("discovery lacks %s:\n%s", want, disc)
			}
		}
	})

	t.Run("create --dry-run=server is 400 and spends nothing", func(t *testing.T) {
		before := warmTotal()
		out, err := s.kubectl(t, "create", "--dry-run=server", "-f", writeManifest(t, "dry"))
		if err == nil || !strings.Contains(out, "dry-run") {
			t.Fatalf("dry-run create succeeded or said something else: %v\n%s", err, out)
		}
		if after := warmTotal(); after != before {
			t.Fatalf("warm %d → %d after a dry-run create", before, after)
		}
	})

	mustKubectl(t, s, "create", "-f", writeManifest(t, "box"))

	t.Run("get right after create", func(t *testing.T) {
		out := mustKubectl(t, s, "get", "sandbox", "box", "-o", "jsonpath={.metadata.annotations}")
		if !strings.Contains(out, sandbox.AnnotationClaimID) {
			t.Fatalf("get: %s", out)
		}
	})

	t.Run("get sandboxes table", func(t *testing.T) {
		out := mustKubectl(t, s, "get", "sandboxes")
		lines := strings.Split(out, "\n")
		if got := strings.Fields(lines[0]); strings.Join(got, " ") != "NAME NODE PHASE CLAIM-ID AGE" {
			t.Fatalf("header = %q", lines[0])
		}
		if len(lines) != 2 || !strings.HasPrefix(lines[1], "box ") || !strings.Contains(lines[1], "Running") || !strings.Contains(lines[1], "sb_") {
			t.Fatalf("table:\n%s", out)
		}
	})

	t.Run("label selectors", func(t *testing.T) {
		out := mustKubectl(t, s, "get", "sandboxes", "-l", sandbox.LabelTemplate, "-o", "name")
		if out != "sandbox.agents.x-k8s.io/box" {
			t.Fatalf("-l %s: %q", sandbox.LabelTemplate, out)
		}
		out, err := s.kubectl(t, "get", "sandboxes", "-l", sandbox.LabelTemplate+"="+image)
		if err == nil || !(strings.Contains(out, "BadRequest") || strings.Contains(out, "invalid") || strings.Contains(out, "label")) {
			t.Fatalf("-l template=value: %v\n%s", err, out)
		}
		out = mustKubectl(t, s, "get", "sandboxes", "-l", sandbox.LabelPhase+"=Paused", "-o", "name")
		if out != "" && !strings.Contains(out, "No resources") {
			t.Fatalf("phase=Paused selected %q", out)
		}
		out = mustKubectl(t, s, "get", "sandboxes", "--field-selector", "status.nodeName=nope", "-o", "name")
		if strings.Contains(out, "box") {
			t.Fatalf("status.nodeName=nope selected %q", out)
		}
		if out, err := s.kubectl(t, "get", "sandboxes", "--field-selector", "spec.operatingMode=x"); err == nil {
			t.Fatalf("unsupported field selector accepted:\n%s", out)
		}
	})

	t.Run("lifecycle subresources", func(t *testing.T) {
		base := "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes/box/"
		body := func(kind, extra string) string {
			p := filepath.Join(t.TempDir(), kind+".json")
			_ = os.WriteFile(p, []byte(`{"apiVersion":"agents.x-k8s.io/v1beta1","kind":"`+kind+`"`+extra+`}`), 0o600)
			return p
		}
		out := mustKubectl(t, s, "create", "--raw", base+"pause", "-f", body("SandboxPauseOptions", ""))
		if !strings.Contains(out, `"Paused"`) {
			t.Fatalf("pause answered %s", out)
		}
		out = mustKubectl(t, s, "create", "--raw", base+"resume", "-f", body("SandboxResumeOptions", ""))
		if !strings.Contains(out, `"Running"`) {
			t.Fatalf("resume answered %s", out)
		}
		out = mustKubectl(t, s, "create", "--raw", base+"fork", "-f", body("SandboxForkOptions", `,"count":1`))
		if !strings.Contains(out, `"sandboxID":"sb_`) || !strings.Contains(out, `"nodeName":"node-`) {
			t.Fatalf("fork answered %s", out)
		}
		out = mustKubectl(t, s, "create", "--raw", base+"snapshot", "-f", body("SandboxSnapshotOptions", `,"name":"s1"`))
		if !strings.Contains(out, `"snapshotID":"`) || !strings.Contains(out, `"name":"s1"`) {
			t.Fatalf("snapshot answered %s", out)
		}
		if out, err := s.kubectl(t, "create", "--raw", base+"fork", "-f", body("SandboxForkOptions", `,"count":-1`)); err == nil {
			t.Fatalf("fork count -1 accepted: %s", out)
		}
		if out, err := s.kubectl(t, "create", "--raw", "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes/nope/pause", "-f", body("SandboxPauseOptions", "")); err == nil || !strings.Contains(out, "NotFound") {
			t.Fatalf("pause of a missing sandbox: %v %s", err, out)
		}
	})

	t.Run("delete returns and the VM is gone", func(t *testing.T) {
		id := mustKubectl(t, s, "get", "sandbox", "box", "-o", "jsonpath={.metadata.annotations.sandbox\\.cocoonstack\\.io/claim-id}")
		mustKubectl(t, s, "delete", "sandbox", "box", "--timeout=60s")
		for _, n := range f.Nodes {
			if _, err := n.Client.Get(context.Background(), id); err == nil {
				t.Fatalf("%s still holds %s", n.Name, id)
			}
		}
	})

	t.Run("wait --for=delete", func(t *testing.T) {
		mustKubectl(t, s, "create", "-f", writeManifest(t, "waited"))
		done := make(chan string, 1)
		go func() {
			out, err := s.kubectl(t, "wait", "--for=delete", "sandbox/waited", "--timeout=60s")
			if err != nil {
				out = "error: " + err.Error() + "\n" + out
			}
			done <- out
		}()
		// Release behind kubectl's back, through the node API.
		loc, err := s.Fleet.ByRef(context.Background(), "default/waited")
		if err != nil {
			t.Fatal(err)
		}
		c := nodeapi.NewClient(loc.NodeAddr, fleettest.Token)
		if err := c.Release(context.Background(), loc.ID); err != nil {
			t.Fatal(err)
		}
		select {
		case out := <-done:
			if strings.HasPrefix(out, "error") {
				t.Fatal(out)
			}
		case <-time.After(90 * time.Second):
			t.Fatal("kubectl wait --for=delete did not return")
		}
	})

	t.Run("pool drained is 503", func(t *testing.T) {
		f.SetWarm(t, spec, 0, 0)
		out, err := s.kubectl(t, "create", "-f", writeManifest(t, "late"))
		if err == nil || !strings.Contains(out, "no warm sandbox") {
			t.Fatalf("create on a drained pool: %v\n%s", err, out)
		}
	})

	t.Run("empty list has items []", func(t *testing.T) {
		out := mustKubectl(t, s, "get", "--raw", "/apis/agents.x-k8s.io/v1beta1/namespaces/empty/sandboxes")
		if !strings.Contains(out, `"items":[]`) || strings.Contains(out, `"resourceVersion":"0"`) {
			t.Fatalf("empty list: %s", out)
		}
	})
}
