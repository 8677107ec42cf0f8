package devserver

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/hearthvm/hearth/pool/controller"
)

// DefaultPoolManager is the server-side-apply field manager of the default pool.
const DefaultPoolManager = "sandbox-dev"

// defaultPool is what --default-pool applies, in order: the
// SandboxTemplate rt, then the SandboxWarmPool rt. It is
// examples/l3/template.yaml and examples/l3/warmpool.yaml (the copy users
// read and apply) joined by "---"; a test keeps them identical.
//
//go:embed defaultpool.yaml
var defaultPool []byte

// defaultPoolDocs splits defaultPool into its YAML documents.
func defaultPoolDocs() [][]byte {
	return bytes.Split(defaultPool, []byte("\n---\n"))
}

// applyDefaultPool server-side-applies the default pool without force: a
// field a user changed since (e.g. spec.replicas through kubectl patch)
// makes the apply conflict, and the user's value stays.
func applyDefaultPool(ctx context.Context, dyn dynamic.Interface) error {
	for _, doc := range defaultPoolDocs() {
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(js, &u.Object); err != nil {
			return err
		}
		// Record the manifest the way `kubectl apply` does, so the tour's
		// `kubectl apply -f examples/l3/` merges without a warning.
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		ann[corev1.LastAppliedConfigAnnotation] = string(js)
		u.SetAnnotations(ann)
		if js, err = json.Marshal(u.Object); err != nil {
			return err
		}
		gvr := controller.WarmPools
		if u.GetKind() == "SandboxTemplate" {
			gvr = controller.Templates
		}
		_, err = dyn.Resource(gvr).Namespace(u.GetNamespace()).Patch(ctx, u.GetName(), types.ApplyPatchType, js,
			metav1.PatchOptions{FieldManager: DefaultPoolManager})
		switch {
		case apierrors.IsConflict(err):
			klog.InfoS("default pool: keeping the user's edits", "kind", u.GetKind(), "name", u.GetName(), "conflict", err.Error())
		case err != nil:
			return fmt.Errorf("default pool: apply %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}
