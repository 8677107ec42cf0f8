// Package sandboxclaim is the SandboxClaim controller (docs/API.md#sandboxclaim):
// a SandboxClaim (extensions.agents.x-k8s.io/v1beta1) naming a
// SandboxWarmPool takes a warm microVM of that pool's template — never a
// cold start — recorded on its node under claim_ref "<ns>/<claim name>",
// so the Sandbox the aggregated API synthesizes for it has the claim's
// name. The claim's env is late-bound into the warm microVM at claim time
// (the node posts it to the agent's /init). The claim carries its
// template's egress policy as its own (egress.FromTemplate; none on the
// none lane): the node holds the sandbox to it as well as to the pool's,
// which is the same unless an older template holds the key with another
// (pool.ErrEgressConflict) — a claim is never looser than its template.
//
// The claim is the only etcd object: the controller adds a finalizer before
// it claims, and on deletion releases every microVM recorded under the
// claim's ref before removing it, so no microVM outlives its claim and no
// per-sandbox object is ever written. Status carries status.sandbox.name
// and a Ready condition with agent-sandbox's own reasons and constants.
//
// Decide is the pure core (a claim and what the fleet holds → one action);
// the Controller is the loop around it: an informer on SandboxClaims, a
// work queue, a periodic resync (a sandbox reaped at its deadline turns
// the claim's Ready False with reason ClaimExpired), and leader election
// through a coordination Lease, like the warm-pool driver. It must not
// import the node daemon; it claims through a fleet.
//
// Events (events.k8s.io/v1 through internal/kubeevents): Bound when a
// claim takes a warm microVM, ClaimFailed (Warning) when its Ready
// condition turns False or changes reason or message — one per change, not
// per retry: a claim waiting a minute for warm capacity records one.
package sandboxclaim

import (
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
	extv1beta1 "sigs.k8s.io/agent-sandbox/extensions/api/v1beta1"
)

// Finalizer holds a claim until its microVM is released.
const Finalizer = "sandbox.cocoonstack.io/release"

// Condition reasons beyond agent-sandbox's exported constants; the
// strings are upstream's controller's.
const (
	ReasonWarmPoolNotFound = "WarmPoolNotFound"
	ReasonTemplateNotFound = "TemplateNotFound"
	ReasonReconcilerError  = "ReconcilerError"
	ReasonNoWarmCapacity   = "NoWarmCapacity"
	// ReasonInvalidClaim is Hearth's: the claim breaks a claim rule
	// (nodeapi.ClaimRequest.Validate: its env), so nothing is claimed
	// until it changes.
	ReasonInvalidClaim = "InvalidClaim"
)

// Action is what one reconcile of a claim does.
type Action int

const (
	// Nothing: the claim is settled.
	Nothing Action = iota
	// AddFinalizer before anything is claimed.
	AddFinalizer
	// Release every microVM under the claim's ref, then drop the finalizer.
	Release
	// Claim a warm microVM (the claim holds none yet).
	Claim
	// Bind writes status for the microVM the fleet already holds.
	Bind
	// Expire marks Ready False (ClaimExpired): the claim had a microVM
	// and the fleet no longer holds it, or its shutdownTime passed.
	Expire
	// Delete the claim: expired under ShutdownPolicy Delete.
	Delete
)

func (a Action) String() string {
	return [...]string{"Nothing", "AddFinalizer", "Release", "Claim", "Bind", "Expire", "Delete"}[a]
}

// Decide is the controller's decision for claim c at now, given whether the
// fleet holds a microVM under its ref.
func Decide(c *extv1beta1.SandboxClaim, held bool, now time.Time) Action {
	if c.DeletionTimestamp != nil {
		if hasFinalizer(c) {
			return Release
		}
		return Nothing
	}
	if !hasFinalizer(c) {
		return AddFinalizer
	}
	if lifecycleExpired(c, now) {
		if p := c.Spec.Lifecycle.ShutdownPolicy; p == extv1beta1.ShutdownPolicyDelete || p == extv1beta1.ShutdownPolicyDeleteForeground {
			return Delete
		}
		if held || !isExpired(c) {
			return Expire
		}
		return Nothing
	}
	bound := c.Status.SandboxStatus.Name != ""
	switch {
	case held && (!bound || !isReady(c)):
		return Bind
	case held:
		return Nothing
	case bound && !isExpired(c):
		return Expire
	case bound:
		return Nothing
	default:
		return Claim
	}
}

// TTLSeconds is the lease a claim asks for: its shutdownTime rounded up
// to whole seconds from now; 0 (the node's default) without one.
func TTLSeconds(c *extv1beta1.SandboxClaim, now time.Time) int64 {
	if lc := c.Spec.Lifecycle; lc != nil && lc.ShutdownTime != nil {
		return max(1, int64(math.Ceil(lc.ShutdownTime.Sub(now).Seconds())))
	}
	return 0
}

// Env is the claim's env as the node takes it. containerName is ignored:
// a microVM has one guest environment.
func Env(c *extv1beta1.SandboxClaim) map[string]string {
	if len(c.Spec.Env) == 0 {
		return nil
	}
	env := make(map[string]string, len(c.Spec.Env))
	for _, e := range c.Spec.Env {
		env[e.Name] = e.Value
	}
	return env
}

// ReadyCondition is the Ready condition of a bound claim.
func ReadyCondition(c *extv1beta1.SandboxClaim, id, node string) metav1.Condition {
	return metav1.Condition{
		Type:               string(sandboxv1beta1.SandboxConditionReady),
		Status:             metav1.ConditionTrue,
		Reason:             sandboxv1beta1.SandboxReasonDependenciesReady,
		Message:            fmt.Sprintf("warm sandbox %q on node %q", id, node),
		ObservedGeneration: c.Generation,
	}
}

// NotReadyCondition is Ready False with reason and message.
func NotReadyCondition(c *extv1beta1.SandboxClaim, reason, msg string) metav1.Condition {
	return metav1.Condition{
		Type:               string(sandboxv1beta1.SandboxConditionReady),
		Status:             metav1.ConditionFalse,
		Reason:             reason,
		Message:            msg,
		ObservedGeneration: c.Generation,
	}
}

// lifecycleExpired reports whether c's shutdownTime has come.
func lifecycleExpired(c *extv1beta1.SandboxClaim, now time.Time) bool {
	lc := c.Spec.Lifecycle
	return lc != nil && lc.ShutdownTime != nil && !now.Before(lc.ShutdownTime.Time)
}

func hasFinalizer(c *extv1beta1.SandboxClaim) bool {
	for _, f := range c.Finalizers {
		if f == Finalizer {
			return true
		}
	}
	return false
}

func isReady(c *extv1beta1.SandboxClaim) bool {
	return meta.IsStatusConditionTrue(c.Status.Conditions, string(sandboxv1beta1.SandboxConditionReady))
}

func isExpired(c *extv1beta1.SandboxClaim) bool {
	cond := meta.FindStatusCondition(c.Status.Conditions, string(sandboxv1beta1.SandboxConditionReady))
	return cond != nil && cond.Reason == extv1beta1.ClaimExpiredReason
}
