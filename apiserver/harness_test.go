package apiserver_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/fleetview"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	hearthserver "github.com/hearthvm/hearth/server"
)

const image = "ghcr.io/x/y:1"

var (
	key  = pool.Key{Template: image, Net: "none", Size: "small"}
	spec = nodeapi.PoolSpec{Template: image, Net: "none", Size: "small"}
)

// server is one in-process sandbox-apiserver on a random loopback port.
type server struct {
	URL        string
	Config     *rest.Config
	Kubeconfig string
	Dynamic    dynamic.Interface
	Fleet      *fleet.NodeFleet
	// Live is the live fleet view the server reads.
	Live *fleetview.Live
}

// startServer runs a standalone server (anonymous, always-allow,
// self-signed) over f as production runs one: its lists, watches and
// lookups read a live fleet view of f's nodes (f.StartLive: their change
// streams), and its fleet has its own, empty, claim index.
func startServer(t *testing.T, f *fleettest.Fleet) *server {
	t.Helper()
	return startServerWith(t, f, nil)
}

// startServerWith is startServer with the options adjusted by mut (after
// the live view and fleet are set).
func startServerWith(t *testing.T, f *fleettest.Fleet, mut func(*hearthserver.Options)) *server {
	t.Helper()
	o := hearthserver.NewStandaloneOptions()
	addr, err := o.ListenOn("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	live := f.StartLive(t)
	o.Live = live
	fl := fleet.New(fleet.Config{View: live, Secret: fleettest.Secret})
	o.Fleet = fl
	if mut != nil {
		mut(o)
		if nf, ok := o.Fleet.(*fleet.NodeFleet); ok {
			fl = nf
		}
	}
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.Config()
	if err != nil {
		t.Fatal(err)
	}
	srv, err := cfg.Complete().New()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Error("server did not stop")
		}
	})
	s := &server{URL: "https://" + addr, Fleet: fl, Live: live}
	s.Config = &rest.Config{Host: s.URL, BearerToken: "dummy", TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 1000, Burst: 1000}
	s.Dynamic = dynamic.NewForConfigOrDie(s.Config)
	s.Kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: hearth
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: dev
  user: {token: dummy-token}
contexts:
- name: hearth
  context: {cluster: hearth, user: dev, namespace: default}
current-context: hearth
`, s.URL)
	if err := os.WriteFile(s.Kubeconfig, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	fleettest.Eventually(t, 60*time.Second, func() bool {
		resp, err := rc.Get(s.URL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, "server never became ready")
	return s
}

// kubectl runs the real kubectl against s; it returns combined output.
func (s *server) kubectl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", s.Kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func needKubectl(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("kubectl"); err != nil {
		t.Skip("kubectl not on PATH")
	}
}
