// Package elect runs a loop only while this process holds a Lease: the
// leader election the in-process controllers (the warm-pool driver, the
// SandboxClaim controller) share, so that one replica drives at a time.
// It owns nothing but the Lease it is given.
package elect

import (
	"context"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Lease names the Lease and this replica's identity in it; What names the
// loop in logs. Run defaults Namespace to DefaultNamespace and Identity to
// the hostname plus a random suffix.
type Lease struct {
	Namespace, Name, Identity, What string
}

// DefaultNamespace holds the controllers' Leases unless told otherwise.
const DefaultNamespace = "sandbox-system"

func (l Lease) withDefaults() Lease {
	if l.Namespace == "" {
		l.Namespace = DefaultNamespace
	}
	if l.Identity == "" {
		h, _ := os.Hostname()
		l.Identity = h + "-" + rand.String(6)
	}
	return l
}

// Run calls loop whenever this process leads the Lease, until ctx ends. A
// lost lease cancels loop's context; Run then campaigns again. An error
// from loop is logged, not returned: the next term starts it afresh.
func Run(ctx context.Context, cfg *rest.Config, l Lease, loop func(context.Context) error) error {
	l = l.withDefaults()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: l.Namespace, Name: l.Name},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: l.Identity},
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   15 * time.Second,
			RenewDeadline:   10 * time.Second,
			RetryPeriod:     2 * time.Second,
			ReleaseOnCancel: true,
			Name:            l.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					klog.InfoS(l.What+" leading", "identity", l.Identity)
					if err := loop(ctx); err != nil && ctx.Err() == nil {
						klog.ErrorS(err, l.What+" loop")
					}
				},
				OnStoppedLeading: func() { klog.InfoS(l.What+" stopped leading", "identity", l.Identity) },
			},
		})
		if err != nil {
			return err
		}
		le.Run(ctx) // returns when leadership is lost or ctx ends
	}
	return nil
}
