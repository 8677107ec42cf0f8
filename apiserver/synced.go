package apiserver

import (
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/healthz"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// ViewSyncedCheck is the /readyz check that turns ok once the fleet view
// has synced (ExtraConfig.ViewSynced).
const ViewSyncedCheck = "sandbox-view-synced"

// errViewNotSynced is what a sandboxes request gets before the view
// syncs: 429 with Retry-After 1, as kube-apiserver answers while its watch
// cache initializes.
var errViewNotSynced = apierrors.NewTooManyRequests("the sandbox view is (re)initializing: NodeInventory has not synced yet", 1)

// withViewSynced answers every sandboxes request (and its subresources)
// with errViewNotSynced until synced reports true. Discovery, OpenAPI,
// health and other groups pass: they do not read the view. It runs
// innermost in the handler chain, after authentication, authorization and
// request info.
func withViewSynced(next http.Handler, synced func() bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !synced() {
			if info, ok := request.RequestInfoFrom(r.Context()); ok && info.IsResourceRequest &&
				info.APIGroup == sandboxv1beta1.GroupVersion.Group && info.Resource == "sandboxes" {
				responsewriters.ErrorNegotiated(errViewNotSynced, Codecs, sandboxv1beta1.GroupVersion, w, r)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// viewSyncedCheck is the readyz check named ViewSyncedCheck.
func viewSyncedCheck(synced func() bool) healthz.HealthChecker {
	return healthz.NamedCheck(ViewSyncedCheck, func(*http.Request) error {
		if !synced() {
			return errors.New("the NodeInventory view has not synced yet")
		}
		return nil
	})
}
