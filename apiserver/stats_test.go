package apiserver_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/sandbox"
)

// TestStats_SubresourceMeasuresTheSandboxOnItsNode: GET
// .../sandboxes/NAME/stats is a SandboxStats of the sandbox, measured by
// its node — vCPUs and memory from its size, a paused one answers with
// paused set and no memory use, an unknown name is a 404.
func TestStats_SubresourceMeasuresTheSandboxOnItsNode(t *testing.T) {
	f := fleettest.Start(t, 1)
	f.SetWarm(t, spec, 1)
	s := startServer(t, f)
	ctx := context.Background()
	if _, err := sandboxes(s, "default").Create(ctx, sandboxObj("measured", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	get := func(name string) (int, sandbox.SandboxStats, string) {
		resp, err := hc.Get(s.URL + "/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes/" + name + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var st sandbox.SandboxStats
		if resp.StatusCode == http.StatusOK {
			if err := json.Unmarshal(b, &st); err != nil {
				t.Fatalf("stats: %v\n%s", err, b)
			}
		}
		return resp.StatusCode, st, string(b)
	}
	code, st, body := get("measured")
	if code != http.StatusOK || st.Kind != "SandboxStats" || st.APIVersion != "agents.x-k8s.io/v1beta1" ||
		st.Name != "measured" || st.Namespace != "default" || st.Paused || st.CPUCount < 1 ||
		st.MemoryLimitBytes <= 0 || st.Timestamp.IsZero() {
		t.Fatalf("stats: %d %s", code, body)
	}
	loc, err := s.Fleet.ByRef(ctx, "default/measured")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Fleet.Pause(ctx, loc); err != nil {
		t.Fatal(err)
	}
	if code, st, body := get("measured"); code != http.StatusOK || !st.Paused || st.MemoryUsedBytes != nil {
		t.Fatalf("stats of a paused sandbox: %d %s", code, body)
	}
	if code, _, body := get("nope"); code != http.StatusNotFound {
		t.Fatalf("unknown sandbox: %d %s", code, body)
	}
}
