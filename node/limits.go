package node

import "time"

// Limits are a node's lease bounds: the default and the longest lease it grants.
type Limits struct {
	Default time.Duration // granted when the ask is 0
	Max     time.Duration // the longest lease granted; 0 = unbounded
}

// DefaultLimits are 5 minutes by default, at most 24 hours.
var DefaultLimits = Limits{Default: 5 * time.Minute, Max: 24 * time.Hour}

// Clamp turns an ask in seconds into the granted lease: 0 (or negative)
// becomes the default, anything above the maximum the maximum.
func (l Limits) Clamp(askSeconds int64) time.Duration {
	if askSeconds <= 0 {
		return l.Default
	}
	if l.Max > 0 && askSeconds >= int64(l.Max/time.Second) {
		return l.Max
	}
	return time.Duration(askSeconds) * time.Second
}

// Deadline is the end of the lease granted for an ask made at now, truncated to whole
// seconds (UTC) so it round-trips through the deadline annotation.
func (l Limits) Deadline(now time.Time, askSeconds int64) time.Time {
	return now.Add(l.Clamp(askSeconds)).Truncate(time.Second).UTC()
}
