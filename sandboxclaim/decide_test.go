package sandboxclaim

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	past, future := metav1.NewTime(now.Add(-time.Second)), metav1.NewTime(now.Add(90*time.Second))
	ready := []metav1.Condition{{Type: string(sandboxv1beta1.SandboxConditionReady), Status: metav1.ConditionTrue, Reason: sandboxv1beta1.SandboxReasonDependenciesReady}}
	expired := []metav1.Condition{{Type: string(sandboxv1beta1.SandboxConditionReady), Status: metav1.ConditionFalse, Reason: extv1beta1.ClaimExpiredReason}}
	claim := func(mut func(*extv1beta1.SandboxClaim)) *extv1beta1.SandboxClaim {
		c := &extv1beta1.SandboxClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", Finalizers: []string{Finalizer}}}
		c.Spec.WarmPoolRef.Name = "rt"
		if mut != nil {
			mut(c)
		}
		return c
	}
	for _, tc := range []struct {
		name string
		c    *extv1beta1.SandboxClaim
		held bool
		want Action
	}{
		{"new claim gets the finalizer before anything is claimed", claim(func(c *extv1beta1.SandboxClaim) { c.Finalizers = nil }), false, AddFinalizer},
		{"finalized, unbound, nothing held: claim", claim(nil), false, Claim},
		{"held but status lost: bind", claim(nil), true, Bind},
		{"bound and held and ready: settled", claim(func(c *extv1beta1.SandboxClaim) {
			c.Status.SandboxStatus.Name = "c"
			c.Status.Conditions = ready
		}), true, Nothing},
		{"bound, no longer held: expired, never re-claimed", claim(func(c *extv1beta1.SandboxClaim) {
			c.Status.SandboxStatus.Name = "c"
			c.Status.Conditions = ready
		}), false, Expire},
		{"already expired: settled", claim(func(c *extv1beta1.SandboxClaim) {
			c.Status.SandboxStatus.Name = "c"
			c.Status.Conditions = expired
		}), false, Nothing},
		{"deleting with the finalizer: release", claim(func(c *extv1beta1.SandboxClaim) { c.DeletionTimestamp = &past }), true, Release},
		{"deleting without it: nothing", claim(func(c *extv1beta1.SandboxClaim) {
			c.DeletionTimestamp = &past
			c.Finalizers = nil
		}), false, Nothing},
		{"shutdownTime passed, Retain: expire", claim(func(c *extv1beta1.SandboxClaim) {
			c.Spec.Lifecycle = &extv1beta1.Lifecycle{ShutdownTime: &past, ShutdownPolicy: extv1beta1.ShutdownPolicyRetain}
		}), true, Expire},
		{"shutdownTime passed, Delete: delete the claim", claim(func(c *extv1beta1.SandboxClaim) {
			c.Spec.Lifecycle = &extv1beta1.Lifecycle{ShutdownTime: &past, ShutdownPolicy: extv1beta1.ShutdownPolicyDelete}
		}), true, Delete},
		{"shutdownTime ahead: claim", claim(func(c *extv1beta1.SandboxClaim) {
			c.Spec.Lifecycle = &extv1beta1.Lifecycle{ShutdownTime: &future}
		}), false, Claim},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.c, tc.held, now); got != tc.want {
				t.Errorf("Decide = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestTTLSecondsAndEnv(t *testing.T) {
	now := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	at := metav1.NewTime(now.Add(90*time.Second + time.Millisecond))
	c := &extv1beta1.SandboxClaim{}
	if got := TTLSeconds(c, now); got != 0 {
		t.Errorf("no lifecycle: %d, want 0 (the node's default)", got)
	}
	c.Spec.Lifecycle = &extv1beta1.Lifecycle{ShutdownTime: &at}
	if got := TTLSeconds(c, now); got != 91 {
		t.Errorf("ttl %d, want 91 (rounded up)", got)
	}
	c.Spec.Env = []extv1beta1.EnvVar{{Name: "A", Value: "1"}, {Name: "B", Value: ""}}
	if env := Env(c); len(env) != 2 || env["A"] != "1" {
		t.Errorf("env %v", env)
	}
}
