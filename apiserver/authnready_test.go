package apiserver

import (
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// fakeCA is a front-proxy CA provider whose content appears later, as the
// generic server's ConfigMap-backed one does once its informer syncs.
type fakeCA struct{ bundle atomic.Pointer[[]byte] }

func (f *fakeCA) Name() string { return "fake-requestheader-ca" }
func (f *fakeCA) CurrentCABundleContent() []byte {
	if b := f.bundle.Load(); b != nil {
		return *b
	}
	return nil
}
func (f *fakeCA) VerifyOptions() (x509.VerifyOptions, bool) { return x509.VerifyOptions{}, false }
func (f *fakeCA) AddListener(dynamiccertificates.Listener)  {}
func (f *fakeCA) load()                                     { b := []byte("-----BEGIN CERTIFICATE-----"); f.bundle.Store(&b) }

// A restarted sandbox-apiserver must not answer kube-apiserver's proxied
// requests 403 (system:anonymous) while its front-proxy CA is still
// loading: every request but the health checks is 429 with Retry-After
// until it has, and /readyz says why. Found by e2e/fault_test.go
// (sandbox-apiserver kill -9 + restart).
func TestAuthnLoaded_429UntilTheFrontProxyCALoads(t *testing.T) {
	ca := &fakeCA{}
	info := &genericapiserver.AuthenticationInfo{RequestHeaderConfig: &authenticatorfactory.RequestHeaderConfig{
		CAContentProvider: ca, UsernameHeaders: headerrequest.StaticStringSlice{"X-Remote-User"},
	}}
	loaded := authnLoaded(info)
	if loaded == nil {
		t.Fatal("no gate with requestheader authentication configured")
	}
	h := withAuthnLoaded(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	}), loaded)
	serve := func(path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, path, nil))
		return w
	}
	for _, p := range []string{"/apis/agents.x-k8s.io/v1beta1/namespaces/x/sandboxes", "/apis/agents.x-k8s.io/v1beta1", "/openapi/v2"} {
		w := serve(p)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" || !strings.Contains(w.Body.String(), `"reason":"TooManyRequests"`) {
			t.Fatalf("%s before the CA loaded: %d, Retry-After %q, body %s", p, w.Code, w.Header().Get("Retry-After"), w.Body)
		}
	}
	for _, p := range []string{"/healthz", "/livez", "/readyz", "/readyz/" + AuthnConfigCheck} {
		if w := serve(p); w.Code != http.StatusTeapot {
			t.Fatalf("%s before the CA loaded: %d, want it served", p, w.Code)
		}
	}
	if err := authnLoadedCheck(loaded).Check(nil); err == nil {
		t.Fatal("readyz check ok before the CA loaded")
	}
	ca.load()
	if w := serve("/apis/agents.x-k8s.io/v1beta1/namespaces/x/sandboxes"); w.Code != http.StatusTeapot {
		t.Fatalf("after the CA loaded: %d", w.Code)
	}
	if err := authnLoadedCheck(loaded).Check(nil); err != nil {
		t.Fatalf("readyz check after the CA loaded: %v", err)
	}
	ca.bundle.Store(nil) // latched: a later rotation to empty does not gate again
	if !loaded() {
		t.Fatal("gate re-closed after it had opened")
	}
}

func TestAuthnLoaded_NoGateWithoutRequestHeaderAuthentication(t *testing.T) {
	if authnLoaded(nil) != nil || authnLoaded(&genericapiserver.AuthenticationInfo{}) != nil {
		t.Fatal("a gate without requestheader authentication (an embedder's own authenticator)")
	}
}

// Complete puts the gate outermost in the handler chain.
func TestComplete_InstallsTheAuthnGate(t *testing.T) {
	rc := NewRecommendedConfig()
	rc.ExternalAddress = "127.0.0.1:443" // no listener in this test
	ca := &fakeCA{}
	rc.Authentication.RequestHeaderConfig = &authenticatorfactory.RequestHeaderConfig{CAContentProvider: ca}
	cc := (&Config{GenericConfig: rc}).Complete()
	if cc.authnLoaded == nil {
		t.Fatal("Complete did not keep the gate for the readyz check")
	}
	var reached bool
	h := cc.GenericConfig.BuildHandlerChainFunc(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }), cc.GenericConfig.Config)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/apis/agents.x-k8s.io/v1beta1/namespaces/x/sandboxes", nil))
	if w.Code != http.StatusTooManyRequests || reached {
		t.Fatalf("before the CA loaded: %d (handler reached %v), want 429", w.Code, reached)
	}
}
