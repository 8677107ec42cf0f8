package apiserver

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/klog/v2"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// AuthnConfigCheck is the /readyz check that turns ok once the front-proxy
// (requestheader) CA the delegated authentication verifies kube-apiserver's
// proxied requests with has loaded.
const AuthnConfigCheck = "front-proxy-ca-loaded"

// errAuthnNotLoaded is what a request gets before the front-proxy CA has
// loaded: 429 with Retry-After 1 (client-go retries it), never the 403 of
// "system:anonymous" a request proxied by kube-apiserver would get while
// its client certificate cannot be verified yet.
var errAuthnNotLoaded = apierrors.NewTooManyRequests("the API server is starting: its front-proxy (requestheader) client CA has not loaded yet", 1)

// authnLoaded reports whether the delegated authentication's front-proxy
// CA has content, latching true. It is nil when no requestheader
// authentication is configured (an embedder's own authenticator): there is
// nothing to wait for.
//
// The generic server loads that CA from the extension-apiserver-
// authentication ConfigMap through an informer it starts with the serving
// listener; until the informer syncs, the CA is empty, every request
// kube-apiserver proxies fails client-certificate verification and falls
// through to the anonymous user: a restarted sandbox-apiserver answered a
// burst of 403 Forbidden for "system:anonymous" (measured by the
// fault-injection suite, e2e/fault_test.go).
func authnLoaded(a *genericapiserver.AuthenticationInfo) func() bool {
	if a == nil || a.RequestHeaderConfig == nil || a.RequestHeaderConfig.CAContentProvider == nil {
		return nil
	}
	ca := a.RequestHeaderConfig.CAContentProvider
	var loaded atomic.Bool
	return func() bool {
		if loaded.Load() {
			return true
		}
		if len(ca.CurrentCABundleContent()) == 0 {
			return false
		}
		loaded.Store(true)
		klog.InfoS("Front-proxy client CA loaded; serving authenticated requests", "provider", ca.Name())
		return true
	}
}

// withAuthnLoaded answers every request but the health checks with
// errAuthnNotLoaded until loaded reports true. It runs outermost, before
// authentication.
func withAuthnLoaded(next http.Handler, loaded func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loaded() && !isHealthPath(r.URL.Path) {
			responsewriters.ErrorNegotiated(errAuthnNotLoaded, Codecs, sandboxv1beta1.GroupVersion, w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func isHealthPath(p string) bool {
	for _, h := range []string{"/healthz", "/livez", "/readyz"} {
		if p == h || strings.HasPrefix(p, h+"/") {
			return true
		}
	}
	return false
}

// authnLoadedCheck is the readyz check named AuthnConfigCheck.
func authnLoadedCheck(loaded func() bool) healthz.HealthChecker {
	return healthz.NamedCheck(AuthnConfigCheck, func(*http.Request) error {
		if !loaded() {
			return errors.New("the front-proxy (requestheader) client CA has not loaded yet")
		}
		return nil
	})
}
