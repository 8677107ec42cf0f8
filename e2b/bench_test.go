package e2b

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestConcurrentClients(t *testing.T) {
	g := startGateway(t)
	g.f.addWarm("rt", 20)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s sandboxJSON
			resp, b := g.call("POST", "/v2/sandboxes", map[string]any{"templateID": "rt"}, &s)
			if resp.StatusCode != 201 {
				t.Errorf("create: %d %s", resp.StatusCode, b)
				return
			}
			status, out, _ := g.run(s.SandboxID, *s.EnvdAccessToken, "echo "+strconv.Itoa(i))
			if status != 200 || out != strconv.Itoa(i)+"\n" {
				t.Errorf("run: %d %q", status, out)
			}
			var list []listedJSON
			g.call("GET", "/v2/sandboxes", nil, &list)
			if resp, _ := g.call("DELETE", "/sandboxes/"+s.SandboxID, nil, nil); resp.StatusCode != 204 {
				t.Errorf("kill: %d", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	var list []listedJSON
	g.call("GET", "/v2/sandboxes", nil, &list)
	require.Empty(t, list)
}

// BenchmarkDataPlaneHealth: one envd call through the gateway (route cache
// warm) to a real agent.
func BenchmarkDataPlaneHealth(b *testing.B) {
	g := startGatewayB(b)
	var s sandboxJSON
	g.call("POST", "/v2/sandboxes", map[string]any{"templateID": "rt"}, &s)
	req, _ := http.NewRequest("GET", g.url+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", s.SandboxID)
	req.Header.Set("X-Access-Token", *s.EnvdAccessToken)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 204 {
			b.Fatal(err, resp)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func BenchmarkPageList10k(b *testing.B) {
	items := make([]listItem, 10000)
	base := time.Now()
	for i := range items {
		items[i] = listItem{ID: fmt.Sprintf("sb-%05d", i), StartedAt: base.Add(time.Duration(i)), Metadata: map[string]string{"k": strconv.Itoa(i % 7)}}
	}
	q := listQuery{Limit: 100, Metadata: map[string]string{"k": "3"}}
	b.ReportAllocs()
	for b.Loop() {
		pageList(items, q)
	}
}

func BenchmarkRenderID(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		RenderID("sb_0123456789abcdef")
	}
}
