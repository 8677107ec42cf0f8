package fleet

import (
	"fmt"
	"math"
	"strconv"
	"time"

	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/sandbox"
)

// LeaseError reports an unusable lease request. It is always the caller's
// fault (HTTP 400), and it is returned before any warm microVM is spent.
type LeaseError struct{ Reason string }

func (e *LeaseError) Error() string { return e.Reason }

// LeaseFor derives the lease (in seconds) a Sandbox asks for at time now
// (docs/API.md#lease): spec.shutdownTime wins, rounded up to whole seconds; else the
// ttl-seconds annotation; neither (or 0) asks for the node default (0).
func LeaseFor(sb *sandboxv1beta1.Sandbox, now time.Time) (int64, error) {
	if st := sb.Spec.ShutdownTime; st != nil {
		remaining := st.Time.Sub(now)
		if remaining <= 0 {
			return 0, &LeaseError{Reason: fmt.Sprintf("spec.shutdownTime %s is not in the future", st.UTC().Format(time.RFC3339))}
		}
		return int64(math.Ceil(remaining.Seconds())), nil
	}
	return ParseTTL(sb.Annotations[sandbox.AnnotationTTLSeconds])
}

// ParseTTL parses the ttl-seconds annotation value: empty is 0, otherwise a
// non-negative base-10 integer.
func ParseTTL(raw string) (int64, error) {
	if raw == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || n < 0 {
		return 0, &LeaseError{Reason: fmt.Sprintf("invalid %s=%q: want a non-negative integer of seconds", sandbox.AnnotationTTLSeconds, raw)}
	}
	return n, nil
}
