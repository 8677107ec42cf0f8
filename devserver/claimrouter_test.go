package devserver_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/hearthvm/hearth/nodeapi"
)

// bearer adds a Kubernetes bearer token to every request (the client's
// HTTPTransport option).
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// agent-sandbox's own Go client (v1.0.3, unmodified, Direct URL mode at
// the gateway): Open creates a SandboxClaim on the default warm pool and
// waits for its Sandbox to be Ready; Run, Write, Read, Exists and List go
// through the router protocol to the agent's runtime API; Close deletes
// the claim, which releases the microVM.
func TestDevServer_AgentSandboxClientThroughClaimAndRouter(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole dev system")
	}
	dir := t.TempDir()
	d := start(t, dir)
	defer d.stop(t)
	eventually(t, 90*time.Second, "warm microVMs", func() (bool, string) {
		w := d.nodesWarm(t)
		return w > 0, "none"
	})
	cfg, err := clientcmd.BuildConfigFromFlags("", d.ready.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sb, err := sandbox.New(ctx, sandbox.Options{
		WarmPoolName: "rt",
		Namespace:    "default",
		APIURL:       d.ready.E2B,
		RestConfig:   cfg,
		// The router admits what the API admits: the kubeconfig's token.
		HTTPTransport:       bearer(cfg.BearerToken),
		Env:                 []extv1beta1.EnvVar{{Name: "GREETING", Value: "late-bound"}},
		SandboxReadyTimeout: time.Minute,
		Logger:              logr.Discard(),
		Quiet:               true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Open(ctx); err != nil {
		t.Fatalf("open: %v", err)
	}
	claim := sb.ClaimName()
	if sb.SandboxName() != claim {
		t.Errorf("sandbox name %q, want the claim's %q", sb.SandboxName(), claim)
	}

	res, err := sb.Run(ctx, "echo hello; echo $GREETING; echo oops >&2; exit 3")
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if res.Stdout != "hello\nlate-bound\n" || res.Stderr != "oops\n" || res.ExitCode != 3 {
		t.Errorf("run: %+v", res)
	}
	// The read-only kubeconfig's token (get, list, watch) runs nothing:
	// neither the runtime API (create sandboxes/exec) nor a port (create
	// sandboxes/portforward); the admin's token passes the same check.
	ro, err := os.ReadFile(filepath.Join(dir, "readonly-token"))
	if err != nil {
		t.Fatal(err)
	}
	routed := func(token, port, path string) int {
		req, _ := http.NewRequestWithContext(ctx, "POST", d.ready.E2B+path, strings.NewReader(`{"command":"id"}`))
		req.Header.Set("X-Sandbox-ID", claim)
		req.Header.Set("X-Sandbox-Namespace", "default")
		req.Header.Set("X-Sandbox-Port", port)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, port := range []string{"8888", "8080"} {
		if got := routed(strings.TrimSpace(string(ro)), port, "/execute"); got != http.StatusForbidden {
			t.Errorf("read-only token on port %s: %d, want 403", port, got)
		}
	}
	if got := routed(cfg.BearerToken, "8888", "/execute"); got != http.StatusOK {
		t.Errorf("admin token on the runtime port: %d, want 200", got)
	}
	if got := routed(cfg.BearerToken, "8080", "/"); got != http.StatusBadGateway {
		t.Errorf("admin token on a closed port: %d, want 502 (admitted, nothing listens)", got)
	}
	if err := sb.Write(ctx, "notes.txt", []byte("written through the router")); err != nil {
		t.Fatalf("write: %v", err)
	}
	got, err := sb.Read(ctx, "notes.txt")
	if err != nil || string(got) != "written through the router" {
		t.Fatalf("read: %q, %v", got, err)
	}
	if ok, err := sb.Exists(ctx, "notes.txt"); err != nil || !ok {
		t.Errorf("exists notes.txt: %v, %v", ok, err)
	}
	if ok, err := sb.Exists(ctx, "missing.txt"); err != nil || ok {
		t.Errorf("exists missing.txt: %v, %v", ok, err)
	}
	entries, err := sb.List(ctx, ".")
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	found := false
	for _, e := range entries {
		found = found || (e.Name == "notes.txt" && e.Type == sandbox.FileTypeFile && e.Size == int64(len("written through the router")))
	}
	if !found {
		t.Errorf("list: no notes.txt in %+v", entries)
	}

	if err := sb.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	// The claim's deletion released the microVM on its node.
	eventually(t, 30*time.Second, "released", func() (bool, string) {
		var held []string
		for _, addr := range d.ready.Nodes {
			l, err := nodeapi.NewClient(addr, d.ready.RootToken).GetByRef(ctx, "default/"+claim)
			if errors.Is(err, nodeapi.ErrNotFound) {
				continue
			}
			if err != nil {
				return false, err.Error()
			}
			for _, s := range l {
				held = append(held, s.ID)
			}
		}
		return len(held) == 0, strings.Join(held, ",")
	})
}
