package devserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// After sandbox-dev restarts on its data dir (a new API server and e2b
// gateway: empty claim-time indexes, a new live view), a Get returns what
// the Create stored — managedFields, labels, spec — and e2b's list filter
// finds a sandbox by the metadata its create gave (docs/API.md#get): the
// nodes store both with the claim and their change streams carry the
// metadata. Before, the Get was the view's entry (no managedFields, no
// spec) and the list's metadata came only from the creating process's
// index.
func TestDevServer_RestartKeepsWhatCreateStored(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole dev system")
	}
	dir := t.TempDir()
	d := start(t, dir) // stopped at the test's end if it fails first
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for d.nodesWarm(t) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no two warm VMs within 2m")
		}
		time.Sleep(50 * time.Millisecond) // poll interval
	}
	in := sandboxObject("kept")
	in.SetLabels(map[string]string{"team": "a"})
	if _, err := sandboxClient(t, d).Create(ctx, in, metav1.CreateOptions{FieldManager: "me"}); err != nil {
		t.Fatal(err)
	}
	status, body := e2bCall(t, d, "POST", "/v2/sandboxes", `{"templateID":"base","metadata":{"bar":"x"}}`)
	if status != http.StatusCreated {
		t.Fatalf("e2b create: %d %s", status, body)
	}
	var created struct {
		SandboxID string `json:"sandboxID"`
	}
	if err := json.Unmarshal(body, &created); err != nil || created.SandboxID == "" {
		t.Fatalf("e2b create answer %s: %v", body, err)
	}

	d.stop(t)
	d = start(t, dir)
	eventually(t, 30*time.Second, "Get after the restart returns what Create stored", func() (bool, string) {
		got, err := sandboxClient(t, d).Get(ctx, "kept", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		mf := got.GetManagedFields()
		ctrs, _, _ := unstructured.NestedSlice(got.Object, "spec", "podTemplate", "spec", "containers")
		ok := len(mf) > 0 && mf[0].Manager == "me" && got.GetLabels()["team"] == "a" && len(ctrs) == 1
		b, _ := json.Marshal(got.Object)
		return ok, string(b)
	})
	eventually(t, 30*time.Second, "e2b ?metadata=bar=x after the restart", func() (bool, string) {
		status, body := e2bCall(t, d, "GET", "/v2/sandboxes?metadata=bar%3Dx", "")
		var items []struct {
			SandboxID string `json:"sandboxID"`
		}
		if status != http.StatusOK || json.Unmarshal(body, &items) != nil {
			return false, string(body)
		}
		var ids []string
		for _, it := range items {
			ids = append(ids, it.SandboxID)
		}
		return slices.Equal(ids, []string{created.SandboxID}), string(body)
	})
	d.stop(t)
}

func sandboxClient(t *testing.T, d *dev) dynamic.ResourceInterface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", d.ready.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return dynamic.NewForConfigOrDie(cfg).Resource(sandboxesGVR).Namespace("default")
}

// e2bCall sends one request to the dev e2b gateway with its API key.
func e2bCall(t *testing.T, d *dev, method, path, body string) (int, []byte) {
	t.Helper()
	keys, err := os.ReadFile(d.ready.E2BKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	var key string
	for _, l := range strings.Split(string(keys), "\n") {
		if f := strings.Fields(l); len(f) > 0 && !strings.HasPrefix(f[0], "#") {
			key = f[0]
			break
		}
	}
	req, err := http.NewRequest(method, d.ready.E2B+path, bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-API-KEY", key)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}
