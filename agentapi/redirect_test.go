package agentapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hearthvm/hearth/agentapi"
)

// TestClient_FollowsNoRedirectAGuestAnswers is an attack: guest root
// replaces its agent with a server that answers every call with a
// redirect to an address of its choosing (here a listener standing for
// the host's loopback, the cluster, or the cloud's metadata server). The
// node's client must not follow it — with the default HTTP client, with a
// caller's client that would follow redirects, and on a log follow — so
// nothing reaches the target, and the call is an *HTTPError naming the
// redirect.
func TestClient_FollowsNoRedirectAGuestAnswers(t *testing.T) {
	var hits atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte(`{"oom_kills":1,"entries":[]}`))
	}))
	defer target.Close()
	for _, status := range []int{http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		guest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+"/latest/meta-data/?from="+r.URL.Path, status)
		}))
		addr := strings.TrimPrefix(guest.URL, "http://")
		following := &http.Client{} // its CheckRedirect is nil: it would follow
		for _, c := range []*agentapi.Client{{Addr: addr, Token: "tok"}, {Addr: addr, Token: "tok", HTTP: following}} {
			ctx := context.Background()
			calls := map[string]error{
				"health":   c.Health(ctx),
				"init":     c.Init(ctx, map[string]string{"K": "v"}),
				"open":     c.Open(ctx, nil),
				"identity": c.SetIdentity(ctx, "new"),
			}
			_, calls["logs"] = c.Logs(ctx, agentapi.LogsQuery{})
			_, calls["oom-kills"] = c.OOMKills(ctx)
			st, err := c.FollowLogs(ctx, agentapi.LogsQuery{})
			if err == nil {
				st.Close()
			}
			calls["follow"] = err
			for name, err := range calls {
				if got := agentapi.StatusOf(err); got != status {
					t.Errorf("%d, %s (own client %v): %v, want an *HTTPError %d", status, name, c.HTTP != nil, err, status)
				}
			}
		}
		guest.Close()
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the guest's redirects reached their target %d times", n)
	}
}
