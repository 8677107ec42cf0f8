package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// render runs `kubectl kustomize dir` and decodes every document.
func render(t *testing.T, dir string) []unstructured.Unstructured {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skipf("SKIP: kubectl not on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "kubectl", "kustomize", dir).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var objs []unstructured.Unstructured
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if len(u.Object) == 0 {
			continue
		}
		// Re-decode through the unstructured JSON scheme: integers as int64.
		b, err := json.Marshal(u.Object)
		if err != nil {
			t.Fatal(err)
		}
		var n unstructured.Unstructured
		if err := n.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, n)
	}
	return objs
}

func find(objs []unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for i := range objs {
		if objs[i].GetKind() == kind && objs[i].GetName() == name {
			return &objs[i]
		}
	}
	return nil
}

func TestKustomizeBase(t *testing.T) {
	objs := render(t, filepath.Join(repoRoot, "deploy", "base"))
	for _, want := range []struct{ kind, name string }{
		{"Namespace", "sandbox-system"},
		{"CustomResourceDefinition", "sandboxtemplates.extensions.agents.x-k8s.io"},
		{"CustomResourceDefinition", "sandboxwarmpools.extensions.agents.x-k8s.io"},
		{"CustomResourceDefinition", "sandboxclaims.extensions.agents.x-k8s.io"},
		{"CustomResourceDefinition", "nodeinventories.sandbox.cocoonstack.io"},
		{"APIService", "v1beta1.agents.x-k8s.io"},
		{"Deployment", "sandbox-apiserver"},
		{"Service", "sandbox-apiserver"},
		{"DaemonSet", "sandboxd"},
		{"ServiceAccount", "sandbox-apiserver"},
		{"ServiceAccount", "sandboxd"},
		{"ClusterRoleBinding", "sandbox-apiserver:system:auth-delegator"},
		{"RoleBinding", "sandbox-apiserver:extension-apiserver-authentication-reader"},
		{"ClusterRole", "hearth:sandbox-apiserver"},
		{"ClusterRole", "hearth:sandboxd"},
		{"Role", "hearth:sandbox-apiserver-leader-election"},
		{"ValidatingAdmissionPolicy", "hearth-sandboxd-own-nodeinventory"},
		{"ValidatingAdmissionPolicyBinding", "hearth-sandboxd-own-nodeinventory"},
		{"ClusterRole", "hearth:aggregate-to-edit"},
		{"ClusterRole", "hearth:aggregate-to-view"},
	} {
		if find(objs, want.kind, want.name) == nil {
			t.Errorf("deploy/base lacks %s %s", want.kind, want.name)
		}
	}
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		if g, _, _ := unstructured.NestedString(o.Object, "spec", "group"); g == "agents.x-k8s.io" {
			t.Errorf("deploy/base installs CRD %s in the served group agents.x-k8s.io", o.GetName())
		}
	}

	as := find(objs, "APIService", "v1beta1.agents.x-k8s.io")
	if as != nil {
		spec := as.Object["spec"].(map[string]any)
		if spec["group"] != "agents.x-k8s.io" || spec["version"] != "v1beta1" ||
			spec["groupPriorityMinimum"] != int64(1000) || spec["versionPriority"] != int64(15) {
			t.Errorf("APIService spec = %v", spec)
		}
		if svc, _ := spec["service"].(map[string]any); svc["namespace"] != "sandbox-system" || svc["name"] != "sandbox-apiserver" {
			t.Errorf("APIService service = %v", svc)
		}
	}
	if rb := find(objs, "RoleBinding", "sandbox-apiserver:extension-apiserver-authentication-reader"); rb != nil && rb.GetNamespace() != "kube-system" {
		t.Errorf("auth-reader RoleBinding in %q, must be kube-system", rb.GetNamespace())
	}
	if d := find(objs, "Deployment", "sandbox-apiserver"); d != nil {
		r, _, _ := unstructured.NestedInt64(d.Object, "spec", "replicas")
		tsc, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "topologySpreadConstraints")
		if r != 2 || len(tsc) != 1 {
			t.Errorf("apiserver Deployment: replicas %d, %d spread constraints", r, len(tsc))
		} else if c := tsc[0].(map[string]any); c["topologyKey"] != "kubernetes.io/hostname" || c["whenUnsatisfiable"] != "DoNotSchedule" {
			t.Errorf("spread constraint %v is not a hard hostname spread", c)
		}
		ports, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		if !strings.Contains(toString(ports), "6443") {
			t.Errorf("apiserver container does not serve 6443: %v", ports)
		}
	}
	// sandboxd holds only its own node token; the fleet secret is mounted
	// into the init container that derives it.
	if ds := find(objs, "DaemonSet", "sandboxd"); ds != nil {
		cs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
		ics, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "initContainers")
		if c := toString(cs); !strings.Contains(c, "--node-token-file=") || strings.Contains(c, "fleet-secret") || strings.Contains(c, "--token-file=") {
			t.Errorf("sandboxd container: %s", c)
		}
		if c := toString(ics); !strings.Contains(c, "--write-node-token=") || !strings.Contains(c, "fleet-secret") {
			t.Errorf("sandboxd init container: %s", c)
		}
	}
	// Users' roles: running code (the router's sandboxes/exec and
	// sandboxes/portforward) is edit's, never view's; both read
	// sandboxes/log and sandboxes/stats (get), as they read pods/log and
	// metrics.k8s.io's pods.
	if cr := find(objs, "ClusterRole", "hearth:aggregate-to-edit"); cr != nil {
		s := toString(cr.Object["rules"])
		if cr.GetLabels()["rbac.authorization.k8s.io/aggregate-to-edit"] != "true" || !strings.Contains(s, "sandboxes/exec") || !strings.Contains(s, "sandboxes/portforward") || !strings.Contains(s, `"resources":["sandboxes/log","sandboxes/stats"],"verbs":["get"]`) {
			t.Errorf("hearth:aggregate-to-edit: labels %v, rules %s", cr.GetLabels(), s)
		}
	}
	if cr := find(objs, "ClusterRole", "hearth:aggregate-to-view"); cr != nil {
		s := toString(cr.Object["rules"])
		logs := `"resources":["sandboxes/log","sandboxes/stats"],"verbs":["get"]`
		if cr.GetLabels()["rbac.authorization.k8s.io/aggregate-to-view"] != "true" || !strings.Contains(s, logs) || strings.Contains(strings.Replace(s, logs, "", 1), "/") || strings.Contains(s, "create") {
			t.Errorf("hearth:aggregate-to-view: labels %v, rules %s", cr.GetLabels(), s)
		}
	}
	if cr := find(objs, "ClusterRole", "hearth:sandboxd"); cr != nil {
		if s := toString(cr.Object["rules"]); !strings.Contains(s, "nodeinventories") || !strings.Contains(s, "create") || !strings.Contains(s, "patch") {
			t.Errorf("sandboxd rules = %s", s)
		} else if !strings.Contains(s, `{"apiGroups":["events.k8s.io"],"resources":["events"],"verbs":["create","patch"]}`) {
			t.Errorf("sandboxd rules = %s: want events.k8s.io events create and patch (its sandboxes' lifecycle events)", s)
		}
	}
}

// toString flattens v to its JSON text, for substring checks.
func toString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestKustomizeOverlays(t *testing.T) {
	wh := render(t, filepath.Join(repoRoot, "deploy", "overlays", "pod-runtime-webhook"))
	m := find(wh, "MutatingWebhookConfiguration", "hearth-pod-runtime")
	if m == nil {
		t.Fatal("webhook overlay lacks the MutatingWebhookConfiguration")
	}
	if s := toString(m.Object["webhooks"]); !strings.Contains(s, "/webhooks/pod-runtime") || !strings.Contains(s, "pods") {
		t.Errorf("webhook = %s", s)
	}
	if d := find(wh, "Deployment", "sandbox-apiserver"); d == nil || !strings.Contains(toString(d.Object["spec"]), "--enable-pod-runtime-webhook") {
		t.Error("webhook overlay does not enable the webhook in sandbox-apiserver")
	}
	cm := render(t, filepath.Join(repoRoot, "deploy", "overlays", "cert-manager"))
	if find(cm, "Certificate", "sandbox-apiserver") == nil {
		t.Error("cert-manager overlay lacks the Certificate")
	}
}

// TestCRDCopiesMatchPin: deploy/base/crds are byte-for-byte (but a leading
// "---" line) the pinned
// agent-sandbox module's CRDs and inventory/crd.yaml (hack/update-crds.sh).
func TestCRDCopiesMatchPin(t *testing.T) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}} {{.Version}}", "sigs.k8s.io/agent-sandbox")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list agent-sandbox: %v", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 || f[0] == "" {
		t.Fatalf("go list: %q", out)
	}
	crds := filepath.Join(repoRoot, "deploy", "base", "crds")
	pin, _ := os.ReadFile(filepath.Join(crds, "AGENT_SANDBOX_VERSION"))
	if strings.TrimSpace(string(pin)) != f[1] {
		t.Errorf("deploy/base/crds from agent-sandbox %q, go.mod pins %s: run hack/update-crds.sh", pin, f[1])
	}
	pairs := map[string]string{
		filepath.Join(f[0], "k8s", "crds", "extensions.agents.x-k8s.io_sandboxtemplates.yaml"): "extensions.agents.x-k8s.io_sandboxtemplates.yaml",
		filepath.Join(f[0], "k8s", "crds", "extensions.agents.x-k8s.io_sandboxwarmpools.yaml"): "extensions.agents.x-k8s.io_sandboxwarmpools.yaml",
		filepath.Join(f[0], "k8s", "crds", "extensions.agents.x-k8s.io_sandboxclaims.yaml"):    "extensions.agents.x-k8s.io_sandboxclaims.yaml",
		filepath.Join(repoRoot, "inventory", "crd.yaml"):                                       "sandbox.cocoonstack.io_nodeinventories.yaml",
	}
	for src, dst := range pairs {
		a, err1 := os.ReadFile(src)
		b, err2 := os.ReadFile(filepath.Join(crds, dst))
		if err1 != nil || err2 != nil {
			t.Errorf("%v %v", err1, err2)
			continue
		}
		// update-crds.sh drops upstream's leading document separator (Helm
		// would render it as an empty document).
		if !bytes.Equal(bytes.TrimPrefix(a, []byte("---\n")), b) {
			t.Errorf("deploy/base/crds/%s differs from %s: run hack/update-crds.sh", dst, src)
		}
	}
}
