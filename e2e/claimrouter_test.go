package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	asclient "sigs.k8s.io/agent-sandbox/clients/go/sandbox"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/hearthvm/hearth/e2e/cluster"
	"github.com/hearthvm/hearth/nodeapi"
)

// bearer adds a Kubernetes bearer token to every request: how a caller
// authenticates to the router (the client's HTTPTransport option).
type bearer string

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}

// claimRouter: agent-sandbox's own Go client (v1.0.3, Direct URL mode at
// sandbox-apiserver's gateway) against the real kube-apiserver: its
// SandboxClaim (a CRD) is reconciled by the elected controller inside
// sandbox-apiserver into a warm microVM; commands and files go through the
// router, authorized by TokenReview + SubjectAccessReview; bob, who may not
// get sandboxes, is refused; deleting the claim releases the microVM.
func (e *env) claimRouter(t *testing.T) {
	if e.gateway == "" {
		t.Skip("sandbox-apiserver serves no gateway")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := asclient.New(ctx, asclient.Options{
		WarmPoolName:        "python",
		Namespace:           e.ns,
		APIURL:              e.gateway,
		RestConfig:          e.cp.Config(cluster.AdminToken),
		HTTPTransport:       bearer(cluster.AdminToken),
		Env:                 []extv1beta1.EnvVar{{Name: "GREETING", Value: "late-bound"}},
		SandboxReadyTimeout: 90 * time.Second,
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
	defer func() { _ = sb.Close(context.Background()) }()
	res, err := sb.Run(ctx, "echo $GREETING")
	if err != nil || res.Stdout != "late-bound\n" || res.ExitCode != 0 {
		t.Fatalf("run: %+v, %v", res, err)
	}
	if err := sb.Write(ctx, "e2e.txt", []byte("through kube-apiserver")); err != nil {
		t.Fatalf("write: %v", err)
	}
	if got, err := sb.Read(ctx, "e2e.txt"); err != nil || string(got) != "through kube-apiserver" {
		t.Fatalf("read: %q, %v", got, err)
	}

	// bob has no grant on sandboxes: the router refuses his token.
	req, _ := http.NewRequestWithContext(ctx, "POST", e.gateway+"/execute", strings.NewReader(`{"command":"id"}`))
	req.Header.Set("X-Sandbox-ID", claim)
	req.Header.Set("X-Sandbox-Namespace", e.ns)
	req.Header.Set("Authorization", "Bearer "+cluster.BobToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("bob through the router: %d, want 403", resp.StatusCode)
	}

	if err := sb.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	err = cluster.Poll(nil, 60*time.Second, 250*time.Millisecond, func() (bool, error) {
		for name, addr := range e.nodes {
			l, err := nodeapi.NewClient(addr, nodeapi.NodeToken(fleetToken, name)).GetByRef(ctx, e.ns+"/"+claim)
			if errors.Is(err, nodeapi.ErrNotFound) {
				continue
			}
			if err != nil {
				return false, fmt.Errorf("%s: %w", name, err)
			}
			if len(l) > 0 {
				return false, errors.New(name + " still holds the claim's microVM")
			}
		}
		return true, nil
	})
	if err != nil {
		t.Error(err)
	}
}
