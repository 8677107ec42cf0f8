package apiserver_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/hearthvm/hearth/fleet/fleettest"
)

// A Sandbox whose pod template asks for "1e55555555309" of memory gets 422
// at once, instead of pinning a core in ParseQuantity; an ordinary
// quantity still decodes.
func TestQuantityGuard_HugeExponentIs422(t *testing.T) {
	s := startServer(t, fleettest.Start(t, 1))
	hc, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	post := func(mem string) (int, string) {
		body := `{"apiVersion":"agents.x-k8s.io/v1beta1","kind":"Sandbox","metadata":{"name":"q"},"spec":{"podTemplate":{"spec":{"containers":[{"name":"c","image":"` + image + `","resources":{"limits":{"memory":"` + mem + `"}}}]}}}}`
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/apis/agents.x-k8s.io/v1beta1/namespaces/default/sandboxes?dryRun=All", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("memory %q: %v", mem, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := post("1e55555555309")
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `"reason":"Invalid"`) || !strings.Contains(body, "exponent") {
		t.Fatalf("huge exponent: %d %s", code, body)
	}
	if code, body := post("64Mi"); code == http.StatusUnprocessableEntity || code >= 500 {
		t.Fatalf("64Mi: %d %s", code, body)
	}
}
