package apiserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apiserver/pkg/endpoints/request"
)

func TestViewSynced_SandboxesAre429UntilSynced(t *testing.T) {
	var synced atomic.Bool
	h := withViewSynced(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}), synced.Load)
	sandboxes := &request.RequestInfo{IsResourceRequest: true, APIGroup: "agents.x-k8s.io", APIVersion: "v1beta1", Resource: "sandboxes", Verb: "list"}
	fork := &request.RequestInfo{IsResourceRequest: true, APIGroup: "agents.x-k8s.io", APIVersion: "v1beta1", Resource: "sandboxes", Subresource: "fork", Verb: "create"}
	pools := &request.RequestInfo{IsResourceRequest: true, APIGroup: "extensions.agents.x-k8s.io", APIVersion: "v1beta1", Resource: "sandboxwarmpools", Verb: "list"}
	discovery := &request.RequestInfo{IsResourceRequest: false, Path: "/apis/agents.x-k8s.io/v1beta1"}
	serve := func(info *request.RequestInfo) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/x", nil)
		r = r.WithContext(request.WithRequestInfo(r.Context(), info))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for _, c := range []struct {
		name string
		info *request.RequestInfo
		want int
	}{
		{"sandboxes", sandboxes, http.StatusTooManyRequests},
		{"subresource", fork, http.StatusTooManyRequests},
		{"other group", pools, http.StatusTeapot},
		{"discovery", discovery, http.StatusTeapot},
	} {
		w := serve(c.info)
		if w.Code != c.want {
			t.Fatalf("%s before sync: %d, want %d", c.name, w.Code, c.want)
		}
		if c.want == http.StatusTooManyRequests && (w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), `"reason":"TooManyRequests"`)) {
			t.Fatalf("%s before sync: Retry-After %q, body %s", c.name, w.Header().Get("Retry-After"), w.Body)
		}
	}
	if err := viewSyncedCheck(synced.Load).Check(nil); err == nil {
		t.Fatal("readyz check ok before sync")
	}
	synced.Store(true)
	if w := serve(sandboxes); w.Code != http.StatusTeapot {
		t.Fatalf("sandboxes after sync: %d", w.Code)
	}
	if err := viewSyncedCheck(synced.Load).Check(nil); err != nil {
		t.Fatalf("readyz check after sync: %v", err)
	}
}
