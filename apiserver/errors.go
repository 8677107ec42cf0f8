package apiserver

import (
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/claim"
	"github.com/hearthvm/hearth/node"
)

var sandboxesResource = schema.GroupResource{Group: sandboxv1beta1.GroupVersion.Group, Resource: "sandboxes"}

// fleetError maps a fleet or node error about sandbox name to an API
// status: not found → 404, node 409 → 409, node 400 → 400, no warm
// capacity → 503 (retryable), anything else → 500 with the node's message.
func fleetError(err error, name, action string) error {
	var nw *claim.ErrNoWarmCapacity
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nw):
		return apierrors.NewServiceUnavailable(err.Error())
	case errors.Is(err, claim.ErrNotFound):
		return apierrors.NewNotFound(sandboxesResource, name)
	}
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	switch node.StatusOf(err) {
	case http.StatusNotFound:
		return apierrors.NewNotFound(sandboxesResource, name)
	case http.StatusConflict:
		return apierrors.NewConflict(sandboxesResource, name, fmt.Errorf("%s: %w", action, err))
	case http.StatusBadRequest:
		return apierrors.NewBadRequest(fmt.Sprintf("%s sandbox %s: %v", action, name, err))
	}
	return apierrors.NewInternalError(fmt.Errorf("%s sandbox %s: %w", action, name, err))
}

// errDryRun is the answer to every server-side dry-run: nothing is claimed,
// released, paused or forked.
func errDryRun(verb string) error {
	return apierrors.NewBadRequest(fmt.Sprintf("dry-run is not supported for %s on sandboxes: a sandbox is a real microVM, so nothing can be simulated", verb))
}
