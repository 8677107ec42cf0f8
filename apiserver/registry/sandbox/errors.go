package sandboxstore

import (
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/fleet"
)

var sandboxesResource = schema.GroupResource{Group: sandboxv1beta1.GroupVersion.Group, Resource: "sandboxes"}

// fleetError maps a fleet or node error about sandbox name to an API
// status, with the status fleet.HTTPStatus gives it (the e2b surface uses
// the same mapping): 404 NotFound, 409 Conflict, 400 BadRequest, 429
// TooManyRequests (a node's quota: fork limits, non-pool VMs, snapshot
// bytes; no Retry-After, as retrying does not help until something is
// freed), 503 ServiceUnavailable (retryable: no warm capacity, a node's
// 503), 504 Timeout, anything else 500 with the node's message.
func fleetError(err error, name, action string) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	switch fleet.HTTPStatus(err) {
	case http.StatusNotFound:
		return apierrors.NewNotFound(sandboxesResource, name)
	case http.StatusConflict:
		return apierrors.NewConflict(sandboxesResource, name, fmt.Errorf("%s: %w", action, err))
	case http.StatusBadRequest:
		return apierrors.NewBadRequest(fmt.Sprintf("%s sandbox %s: %v", action, name, err))
	case http.StatusTooManyRequests:
		return apierrors.NewTooManyRequests(fmt.Sprintf("%s sandbox %s: %v", action, name, err), 0)
	case http.StatusServiceUnavailable:
		return apierrors.NewServiceUnavailable(err.Error())
	case http.StatusGatewayTimeout:
		return apierrors.NewTimeoutError(fmt.Sprintf("%s sandbox %s: %v", action, name, err), 1)
	}
	return apierrors.NewInternalError(fmt.Errorf("%s sandbox %s: %w", action, name, err))
}

// errDryRun is the answer to every server-side dry-run: nothing is claimed,
// released, paused or forked.
func errDryRun(verb string) error {
	return apierrors.NewBadRequest(fmt.Sprintf("dry-run is not supported for %s on sandboxes: a sandbox is a real microVM, so nothing can be simulated", verb))
}
