package sandboxstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/nodeapi"
)

// Update serves PUT and every PATCH (merge, JSON, strategic merge,
// server-side apply: objInfo is the patched or replacing object, with the
// managedFields the field manager computed). What may change (docs/API.md#update-and-patch):
//
//   - labels and annotations (the stamped keys are not the user's: a
//     change to them is ignored), and managedFields: recorded on the node
//     (PUT /v1/sandboxes/{id}/labels), conditional on the version of the
//     record the update was computed from;
//   - spec.operatingMode: Suspended pauses the microVM, Running (or unset)
//     resumes it;
//   - spec.shutdownTime: renews or shortens the lease, clamped by the node
//     like a Create's.
//
// Any other spec change is 422 (field.Forbidden naming the field); a
// resourceVersion other than the current one is 409 Conflict. Status is
// synthesized: a change to it is ignored. The current resourceVersion is
// the live view's revision of the node's record (read); while the view
// does not hold that record's state, an update naming a resourceVersion is
// 409 (one naming none, as a merge patch does, proceeds). An apply to a
// name no sandbox holds creates it (forceAllowCreate).
func (s *sandboxStorage) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, opts *metav1.UpdateOptions) (runtime.Object, bool, error) {
	if opts != nil && isDryRun(opts.DryRun) {
		return nil, false, errDryRun("update")
	}
	ref := refOf(ctx, name)
	cur, err := s.fleet.LiveByRef(ctx, ref)
	if errors.Is(err, fleet.ErrNotFound) && !errors.Is(err, fleet.ErrIncomplete) && forceAllowCreate {
		obj, err := objInfo.UpdatedObject(ctx, &sandboxv1beta1.Sandbox{})
		if err != nil {
			return nil, false, err
		}
		out, err := s.Create(ctx, obj, createValidation, &metav1.CreateOptions{})
		return out, err == nil, err
	}
	if err != nil {
		return nil, false, fleetError(err, name, "get")
	}
	// The current resourceVersion is the live source's revision of cur;
	// while the source does not hold cur (its node's stream is down), none
	// is current and an update that names one is 409.
	rv, held := s.revisionOf(ctx, &cur)
	old := synthesize(&cur, rv)
	if !held {
		old.ResourceVersion = ""
	}
	obj, err := objInfo.UpdatedObject(ctx, old)
	if err != nil {
		return nil, false, err
	}
	in, ok := obj.(*sandboxv1beta1.Sandbox)
	if !ok {
		return nil, false, apierrors.NewBadRequest(fmt.Sprintf("not a Sandbox: %T", obj))
	}
	if in.ResourceVersion != "" && in.ResourceVersion != old.ResourceVersion {
		why := fmt.Errorf("resourceVersion %s is not the current %s: the object has been modified; please apply your changes to the latest version and try again", in.ResourceVersion, old.ResourceVersion)
		if !held {
			why = fmt.Errorf("resourceVersion %s cannot be checked: this API server's live view does not hold the sandbox's current state yet (node %q's change stream); read it again and retry", in.ResourceVersion, cur.Node)
		}
		return nil, false, apierrors.NewConflict(sandboxesResource, name, why)
	}
	if in.UID != "" && in.UID != old.UID {
		return nil, false, apierrors.NewConflict(sandboxesResource, name, fmt.Errorf("metadata.uid %s is not the current %s", in.UID, old.UID))
	}
	if updateValidation != nil {
		if err := updateValidation(ctx, in, old); err != nil {
			return nil, false, err
		}
	}
	errs := immutableSpec(in.Spec, specOf(&cur))
	rec, err := recordOf(in, recordedSpec(in.Spec))
	var inv *apierrors.StatusError
	if errors.As(err, &inv) && inv.ErrStatus.Details != nil {
		for _, c := range inv.ErrStatus.Details.Causes {
			errs = append(errs, &field.Error{Type: field.ErrorType(c.Type), Field: c.Field, Detail: c.Message})
		}
	} else if err != nil {
		return nil, false, err
	}
	now := s.now()
	var renew *int64
	if st := in.Spec.ShutdownTime; st != nil && !st.UTC().Truncate(time.Second).Equal(cur.Deadline.UTC().Truncate(time.Second)) {
		ttl, err := fleet.LeaseFor(&sandboxv1beta1.Sandbox{Spec: in.Spec}, now)
		if err != nil {
			errs = append(errs, field.Invalid(field.NewPath("spec", "shutdownTime"), st.UTC().Format(time.RFC3339), err.Error()))
		}
		renew = &ttl
	}
	if len(errs) > 0 {
		return nil, false, apierrors.NewInvalid(sandboxKind, name, errs)
	}

	if !maps.Equal(rec.Labels, cur.Labels) || !maps.Equal(rec.Annotations, cur.Annotations) || !bytes.Equal(rec.ManagedFields, cur.ManagedFields) {
		if _, err := s.fleet.SetLabels(ctx, cur, nodeapi.LabelsRequest{Labels: rec.Labels, Annotations: rec.Annotations,
			ManagedFields: rec.ManagedFields, Version: cur.Version}); err != nil {
			if errors.Is(err, nodeapi.ErrConflict) {
				return nil, false, apierrors.NewConflict(sandboxesResource, name, fmt.Errorf("the sandbox changed while this update was computed; please apply your changes to the latest version and try again"))
			}
			return nil, false, fleetError(err, name, "update")
		}
	}
	switch pause := in.Spec.OperatingMode == sandboxv1beta1.SandboxOperatingModeSuspended; {
	case pause && !cur.Paused:
		err = s.fleet.Pause(ctx, cur)
	case !pause && cur.Paused:
		err = s.fleet.Resume(ctx, cur)
	}
	if err != nil {
		return nil, false, fleetError(err, name, "update")
	}
	if renew != nil {
		if _, err := s.fleet.Renew(ctx, cur, *renew); err != nil {
			return nil, false, fleetError(err, name, "renew")
		}
	}
	before := s.live.Rev()
	now2, err := s.fleet.LiveByID(ctx, cur.ID)
	if err != nil {
		return nil, false, fleetError(err, name, "get")
	}
	return s.read(ctx, now2, before), false, nil
}

// immutableSpec names every part of spec that differs from the current
// one cur other than operatingMode and shutdownTime: a warm microVM is not
// re-templated.
func immutableSpec(spec, cur sandboxv1beta1.SandboxSpec) field.ErrorList {
	const why = "a sandbox's spec is immutable except spec.operatingMode and spec.shutdownTime: a claimed microVM cannot be re-templated"
	p := field.NewPath("spec")
	var errs field.ErrorList
	for _, part := range []struct {
		name     string
		new, cur any
	}{
		{"podTemplate", spec.PodTemplate, cur.PodTemplate},
		{"volumeClaimTemplates", spec.VolumeClaimTemplates, cur.VolumeClaimTemplates},
		{"service", spec.Service, cur.Service},
		{"shutdownPolicy", spec.ShutdownPolicy, cur.ShutdownPolicy},
	} {
		if !apiequality.Semantic.DeepEqual(part.new, part.cur) {
			errs = append(errs, field.Forbidden(p.Child(part.name), why))
		}
	}
	if len(errs) == 0 && !apiequality.Semantic.DeepEqual(recordedSpec(spec), recordedSpec(cur)) {
		errs = append(errs, field.Forbidden(p, why))
	}
	return errs
}
