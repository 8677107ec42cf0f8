package fleet

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/sandbox"
)

// FuzzLeaseFor: the lease derived from a Sandbox's ttl annotation or
// shutdownTime is never negative, and every refusal is a *LeaseError (a
// 400 before any warm VM is spent).
func FuzzLeaseFor(f *testing.F) {
	f.Add("", int64(0), false)
	f.Add("300", int64(0), false)
	f.Add("-1", int64(0), false)
	f.Add("9223372036854775808", int64(0), false)
	f.Add("", int64(90_500), true)
	f.Add("", int64(-1), true)
	f.Fuzz(func(t *testing.T, ttl string, shutdownInMs int64, hasShutdown bool) {
		now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
		sb := &sandboxv1beta1.Sandbox{}
		sb.Annotations = map[string]string{sandbox.AnnotationTTLSeconds: ttl}
		if hasShutdown {
			st := metav1.NewTime(now.Add(time.Duration(shutdownInMs) * time.Millisecond))
			sb.Spec.ShutdownTime = &st
		}
		secs, err := LeaseFor(sb, now)
		if err != nil {
			var le *LeaseError
			if !errors.As(err, &le) {
				t.Fatalf("error %v is not a *LeaseError", err)
			}
			return
		}
		if secs < 0 {
			t.Fatalf("lease %d for ttl %q shutdown %v/%d", secs, ttl, hasShutdown, shutdownInMs)
		}
	})
}
