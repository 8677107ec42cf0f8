package sandboxstore

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/hearthvm/hearth/nodeapi"
)

// askFleet counts the calls that reach a node (Held asks the one node the
// index or view names; Claim asks the nodes it routes to).
type askFleet struct {
	nameFleet
	asks int
}

func (f *askFleet) Held(ctx context.Context, ref string) (nodeapi.Sandbox, bool) {
	f.asks++
	return f.nameFleet.Held(ctx, ref)
}

func (f *askFleet) Claim(ctx context.Context, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	f.asks++
	return f.nameFleet.Claim(ctx, req)
}

// TestCreate_ClaimRulesRefuseBeforeAnyNodeIsAsked: a Create whose claim
// breaks a claim rule (docs/API.md#claim-rules) is refused with the
// Kubernetes surface's status — 400 for env names and values, 422 for
// labels, annotations and the recorded object's size — and no node is asked, not even whether the name is held.
func TestCreate_ClaimRulesRefuseBeforeAnyNodeIsAsked(t *testing.T) {
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	env := func(vars ...corev1.EnvVar) func(sb *corev1.Container) {
		return func(c *corev1.Container) { c.Env = vars }
	}
	many := make([]corev1.EnvVar, nodeapi.MaxEnvVars+1)
	for i := range many {
		many[i] = corev1.EnvVar{Name: "V" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + strings.Repeat("y", i/26)}
	}
	for _, tc := range []struct {
		name   string
		env    func(c *corev1.Container)
		labels map[string]string
		want   func(error) bool
	}{
		{"env name with =", env(corev1.EnvVar{Name: "A=B", Value: "1"}), nil, apierrors.IsBadRequest},
		{"env name empty", env(corev1.EnvVar{Value: "1"}), nil, apierrors.IsBadRequest},
		{"env name with a NUL", env(corev1.EnvVar{Name: "A\x00", Value: "1"}), nil, apierrors.IsBadRequest},
		{"env value with a NUL", env(corev1.EnvVar{Name: "A", Value: "1\x00"}), nil, apierrors.IsBadRequest},
		// The env is part of the recorded spec: MaxObjectBytes (422) bounds
		// it before MaxEnvBytes and MaxEnvVars can.
		{"env over MaxEnvBytes", env(corev1.EnvVar{Name: "A", Value: strings.Repeat("x", nodeapi.MaxEnvBytes)}), nil, apierrors.IsInvalid},
		{"env over MaxEnvVars", env(many...), nil, apierrors.IsInvalid},
		{"label key invalid", nil, map[string]string{"bad key!": "x"}, apierrors.IsInvalid},
		{"label value invalid", nil, map[string]string{"k": "not ok!"}, apierrors.IsInvalid},
	} {
		f := &askFleet{nameFleet: nameFleet{held: map[string]bool{}, refused: map[string]bool{}}}
		s := &sandboxStorage{fleet: f, now: time.Now}
		sb := newSandbox("web", "")
		if tc.env != nil {
			tc.env(&sb.Spec.PodTemplate.Spec.Containers[0])
		}
		sb.Labels = tc.labels
		_, err := s.Create(ctx, sb, nil, &metav1.CreateOptions{})
		if !tc.want(err) || f.asks != 0 {
			t.Errorf("%s: Create = %v after %d node calls; want the surface's status before any", tc.name, err, f.asks)
		}
	}
}
