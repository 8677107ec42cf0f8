package devserver_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/hearthvm/hearth/devserver"
	"github.com/hearthvm/hearth/e2b"
	"github.com/hearthvm/hearth/nodeapi"
)

var templates = schema.GroupVersionResource{Group: "extensions.agents.x-k8s.io", Version: "v1beta1", Resource: "sandboxtemplates"}

func dynFor(t *testing.T, kubeconfig string) dynamic.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return dynamic.NewForConfigOrDie(cfg)
}

// The dev system authenticates: no token is 401, the read-only kubeconfig
// reads but cannot write (403), the admin kubeconfig can; credentials are
// 0600; etcd refuses a client without its certificate; a node refuses the
// token derived for another node.
func TestDevServer_AuthenticatesAndAuthorizes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the dev system")
	}
	dir := t.TempDir()
	d := start(t, dir, func(o *devserver.Options) { o.DefaultPool = true })
	defer d.stop(t)
	ctx := context.Background()

	insecure := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	for _, tok := range []string{"", "not-a-token", d.ready.RootToken} {
		req, _ := http.NewRequest(http.MethodGet, d.ready.APIServer+"/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := insecure.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("token %q: %d, want 401", tok, resp.StatusCode)
		}
	}

	for _, f := range []string{"admin-token", "readonly-token", "root-token", "kubeconfig", "kubeconfig-readonly", "e2b-api-key", "etcd-pki/client.key"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: mode %v, want 0600", f, st.Mode().Perm())
		}
	}
	// The e2b key is in e2b's format: its Python SDK refuses other keys.
	if key, _ := os.ReadFile(filepath.Join(dir, "e2b-api-key")); !e2b.IsAPIKeyFormat(strings.TrimSpace(string(key))) {
		t.Fatalf("e2b-api-key %q is not in e2b's format", key)
	}
	admin, err := os.ReadFile(filepath.Join(dir, "admin-token"))
	if err != nil {
		t.Fatal(err)
	}
	if kc, _ := os.ReadFile(d.ready.Kubeconfig); !strings.Contains(string(kc), "token: "+strings.TrimSpace(string(admin))) {
		t.Fatal("the kubeconfig does not carry admin-token as a bearer token")
	}
	for _, kc := range []string{d.ready.Kubeconfig, d.ready.ReadOnlyKubeconfig} {
		if b, _ := os.ReadFile(kc); strings.Contains(string(b), "insecure-skip-tls-verify") {
			t.Fatalf("%s skips verifying the serving certificate", kc)
		}
	}

	ro := dynFor(t, d.ready.ReadOnlyKubeconfig)
	list, err := ro.Resource(templates).Namespace("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("read-only list: %v", err)
	}
	if len(list.Items) == 0 {
		t.Fatal("read-only list: the default template is missing")
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxTemplate",
		"metadata": map[string]any{"name": "ro-attempt", "namespace": "default"},
		"spec":     list.Items[0].Object["spec"],
	}}
	if _, err := ro.Resource(templates).Namespace("default").Create(ctx, obj, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("read-only create: %v, want 403", err)
	}
	if err := ro.Resource(templates).Namespace("default").Delete(ctx, list.Items[0].GetName(), metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("read-only delete: %v, want 403", err)
	}
	if _, err := dynFor(t, d.ready.Kubeconfig).Resource(templates).Namespace("default").Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("admin create: %v", err)
	}

	// Non-resource paths: the read-only token reaches discovery, version
	// and health, not the profiles or the metrics; the admin token does.
	readOnly, err := os.ReadFile(filepath.Join(dir, "readonly-token"))
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string][]byte{"readonly-token": readOnly, "admin-token": admin}
	for _, tc := range []struct {
		token, path string
		want        int
	}{
		{"readonly-token", "/debug/pprof/", http.StatusForbidden},
		{"readonly-token", "/metrics", http.StatusForbidden},
		{"readonly-token", "/version", http.StatusOK},
		{"readonly-token", "/apis", http.StatusOK},
		{"readonly-token", "/healthz", http.StatusOK},
		{"admin-token", "/metrics", http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, d.ready.APIServer+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tokens[tc.token])))
		resp, err := insecure.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET %s with %s: %d, want %d", tc.path, tc.token, resp.StatusCode, tc.want)
		}
	}

	// etcd: not over plain TCP, not over TLS without the client certificate.
	plain := strings.Replace(d.ready.Etcd, "https://", "http://", 1)
	if err := etcdGet(plain, nil); err == nil {
		t.Fatal("etcd served a plain client")
	}
	caOnly, err := (transport.TLSInfo{TrustedCAFile: d.ready.EtcdCA}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := etcdGet(d.ready.Etcd, caOnly); err == nil {
		t.Fatal("etcd served a TLS client without a certificate")
	}
	if keys := etcdKeys(t, d.ready); len(keys) == 0 {
		t.Fatal("etcd with the client certificate: no keys")
	}

	// Nodes: each accepts its own token and root-token, not another's.
	a, b := devserver.NodeName(0), devserver.NodeName(1)
	if _, err := nodeapi.NewClient(d.ready.Nodes[a], nodeapi.NodeToken(d.ready.RootToken, a)).Info(ctx); err != nil {
		t.Fatalf("%s with its own token: %v", a, err)
	}
	if _, err := nodeapi.NewClient(d.ready.Nodes[a], nodeapi.NodeToken(d.ready.RootToken, b)).Info(ctx); nodeapi.StatusOf(err) != http.StatusUnauthorized {
		t.Fatalf("%s with %s's token: %v, want 401", a, b, err)
	}
}

func etcdGet(endpoint string, tlsCfg *tls.Config) error {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 2 * time.Second, TLS: tlsCfg})
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = c.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	return err
}
