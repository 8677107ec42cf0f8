package sandboxstore

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/hearthvm/hearth/nodeapi"
)

// envFleet records the env of each claim.
type envFleet struct {
	nameFleet
	env []map[string]string
}

func (f *envFleet) Claim(ctx context.Context, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	f.env = append(f.env, req.Env)
	return f.nameFleet.Claim(ctx, req)
}

func TestCreate_FirstContainersLiteralEnvIsLateBound(t *testing.T) {
	f := &envFleet{nameFleet: nameFleet{held: map[string]bool{}, refused: map[string]bool{}}}
	s := &sandboxStorage{fleet: f, live: &fakeLive{}, now: time.Now}
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	sb := newSandbox("web", "")
	sb.Spec.PodTemplate.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", Value: "1"}, {Name: "EMPTY"}}
	if _, err := s.Create(ctx, sb, nil, &metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(f.env) != 1 || f.env[0]["A"] != "1" || len(f.env[0]) != 2 {
		t.Fatalf("claims carried env %v", f.env)
	}

	ref := newSandbox("secret", "")
	ref.Spec.PodTemplate.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "K", ValueFrom: &corev1.EnvVarSource{
		SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Key: "k"}}}}
	if _, err := s.Create(ctx, ref, nil, &metav1.CreateOptions{}); !apierrors.IsBadRequest(err) || len(f.env) != 1 {
		t.Fatalf("valueFrom: %v after %d claims; want 400 before any claim", err, len(f.env))
	}
}
