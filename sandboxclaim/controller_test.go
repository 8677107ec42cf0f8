package sandboxclaim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

// askFleet counts the claims that reach the fleet (and so a node).
type askFleet struct {
	Fleet
	claims []nodeapi.ClaimRequest
}

func (f *askFleet) Claim(_ context.Context, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	f.claims = append(f.claims, req)
	return nodeapi.Sandbox{ID: "sb_1", Node: "n1", ClaimRef: req.ClaimRef}, nil
}

func unstructuredOf(t *testing.T, obj any, kind string) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(extv1beta1.GroupVersion.String())
	u.SetKind(kind)
	return u
}

// TestController_ClaimRulesRefuseBeforeAnyNodeIsAsked: a SandboxClaim whose
// claim breaks a claim rule (docs/API.md#claim-rules: here its env) is
// Ready False with reason InvalidClaim and never reaches the fleet; a
// valid one does.
func TestController_ClaimRulesRefuseBeforeAnyNodeIsAsked(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	wp := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "rt", Namespace: "ns"}}
	wp.Spec.TemplateRef.Name = "rt"
	tpl := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "rt", Namespace: "ns"}}
	tpl.Spec.PodTemplate = sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "m", Image: "img:1"}}}}
	for _, tc := range []struct {
		name  string
		env   []extv1beta1.EnvVar
		valid bool
	}{
		{"env name with =", []extv1beta1.EnvVar{{Name: "A=B", Value: "1"}}, false},
		{"env name empty", []extv1beta1.EnvVar{{Value: "1"}}, false},
		{"env value with a NUL", []extv1beta1.EnvVar{{Name: "A", Value: "1\x00"}}, false},
		{"env over MaxEnvBytes", []extv1beta1.EnvVar{{Name: "A", Value: strings.Repeat("x", nodeapi.MaxEnvBytes)}}, false},
		{"valid env", []extv1beta1.EnvVar{{Name: "TASK", Value: "42"}}, true},
	} {
		claim := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "ns", Finalizers: []string{Finalizer}}}
		claim.Spec.WarmPoolRef.Name = "rt"
		claim.Spec.Env = tc.env
		dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(),
			unstructuredOf(t, claim, "SandboxClaim"), unstructuredOf(t, wp, "SandboxWarmPool"), unstructuredOf(t, tpl, "SandboxTemplate"))
		f := &askFleet{}
		c := &Controller{cfg: Config{Fleet: f, Now: func() time.Time { return now }}, dyn: dyn}
		if _, err := c.claim(ctx, claim, now); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.valid {
			if len(f.claims) != 1 || f.claims[0].Template != "img:1" || f.claims[0].Env["TASK"] != "42" || f.claims[0].ClaimRef != "ns/job" {
				t.Errorf("%s: claims %+v, want one of img:1 under ns/job with the env", tc.name, f.claims)
			}
			continue
		}
		if len(f.claims) != 0 {
			t.Errorf("%s: %d claims reached the fleet", tc.name, len(f.claims))
		}
		u, err := dyn.Resource(Claims).Namespace("ns").Get(ctx, "job", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got extv1beta1.SandboxClaim
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &got); err != nil {
			t.Fatal(err)
		}
		cond := meta.FindStatusCondition(got.Status.Conditions, string(sandboxv1beta1.SandboxConditionReady))
		if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != ReasonInvalidClaim || !strings.Contains(cond.Message, "env") {
			t.Errorf("%s: Ready %+v, want False %s naming the env", tc.name, cond, ReasonInvalidClaim)
		}
	}
}

// TestController_ClaimCarriesItsTemplatesEgressPolicy: a SandboxClaim's
// claim carries its template's egress policy as its own (ClaimRequest.Egress)
// so that a claim whose key another template holds with a different policy
// (pool.ErrEgressConflict) is never looser than its own template; none on
// the none lane and for Unmanaged; a policy that does not translate
// reaches no node.
func TestController_ClaimCarriesItsTemplatesEgressPolicy(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	wp := &extv1beta1.SandboxWarmPool{ObjectMeta: metav1.ObjectMeta{Name: "rt", Namespace: "ns"}}
	wp.Spec.TemplateRef.Name = "rt"
	block := &extv1beta1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{
		To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "203.0.113.0/24"}}}}}}
	selector := &extv1beta1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{
		To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}}}}
	allow := &egress.Policy{Otherwise: egress.Deny, Rules: []egress.Rule{{Action: egress.Allow, CIDR: "203.0.113.0/24"}}}
	for _, tc := range []struct {
		name   string
		net    string
		mgmt   extv1beta1.NetworkPolicyManagement
		policy *extv1beta1.NetworkPolicySpec
		want   *egress.Policy
		refuse bool
	}{
		{name: "egress lane, networkPolicy", net: "egress", policy: block, want: allow},
		{name: "egress lane, no networkPolicy: the default", net: "egress", want: egress.Default()},
		{name: "egress lane, Unmanaged", net: "egress", mgmt: extv1beta1.NetworkPolicyManagementUnmanaged, policy: block},
		{name: "none lane", net: "none", policy: block},
		{name: "pod selector", net: "egress", policy: selector, refuse: true},
	} {
		tpl := &extv1beta1.SandboxTemplate{ObjectMeta: metav1.ObjectMeta{Name: "rt", Namespace: "ns",
			Annotations: map[string]string{sandbox.AnnotationNet: tc.net}}}
		tpl.Spec.PodTemplate = sandboxv1beta1.PodTemplate{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "m", Image: "img:1"}}}}
		tpl.Spec.NetworkPolicy, tpl.Spec.NetworkPolicyManagement = tc.policy, tc.mgmt
		claim := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: "job", Namespace: "ns", Finalizers: []string{Finalizer}}}
		claim.Spec.WarmPoolRef.Name = "rt"
		dyn := dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(),
			unstructuredOf(t, claim, "SandboxClaim"), unstructuredOf(t, wp, "SandboxWarmPool"), unstructuredOf(t, tpl, "SandboxTemplate"))
		f := &askFleet{}
		c := &Controller{cfg: Config{Fleet: f, Now: func() time.Time { return now }}, dyn: dyn}
		if _, err := c.claim(ctx, claim, now); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if tc.refuse {
			if len(f.claims) != 0 {
				t.Errorf("%s: %d claims reached the fleet", tc.name, len(f.claims))
			}
			continue
		}
		if len(f.claims) != 1 {
			t.Fatalf("%s: %d claims", tc.name, len(f.claims))
		}
		if d := cmp.Diff(tc.want, f.claims[0].Egress); d != "" {
			t.Errorf("%s: claim's egress -want +got:\n%s", tc.name, d)
		}
	}
}
