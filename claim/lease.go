package claim

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
// (CONTRACT §2): spec.shutdownTime wins, rounded up to whole seconds; else the
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

// Limits are a node's lease bounds.
type Limits struct {
	Default time.Duration // granted when the ask is 0
	Max     time.Duration // the longest lease granted
}

// DefaultLimits are the node's defaults: 5 minutes, at most 24 hours.
var DefaultLimits = Limits{Default: 5 * time.Minute, Max: 24 * time.Hour}

// Clamp turns an ask in seconds into the granted lease: 0 (or negative)
// becomes the default, anything above the maximum becomes the maximum.
func (l Limits) Clamp(askSeconds int64) time.Duration {
	if askSeconds <= 0 {
		return l.Default
	}
	if l.Max > 0 && askSeconds >= int64(l.Max/time.Second) {
		return l.Max
	}
	return time.Duration(askSeconds) * time.Second
}

// Deadline is the granted expiry for an ask made at now, truncated to whole
// seconds so it round-trips through the deadline annotation.
func (l Limits) Deadline(now time.Time, askSeconds int64) time.Time {
	return now.Add(l.Clamp(askSeconds)).Truncate(time.Second).UTC()
}
