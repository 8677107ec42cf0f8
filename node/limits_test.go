package node

import (
	"testing"
	"time"
)

func TestLimitsClamp(t *testing.T) {
	l := Limits{Default: 5 * time.Minute, Max: time.Hour}
	for _, tc := range []struct {
		ask  int64
		want time.Duration
	}{{0, 5 * time.Minute}, {-3, 5 * time.Minute}, {1, time.Second}, {3599, 3599 * time.Second}, {3600, time.Hour}, {999999, time.Hour}} {
		if got := l.Clamp(tc.ask); got != tc.want {
			t.Errorf("Clamp(%d) = %v, want %v", tc.ask, got, tc.want)
		}
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 700_000_000, time.UTC)
	if d := l.Deadline(now, 10); !d.Equal(time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC)) {
		t.Fatalf("Deadline = %v", d)
	}
}
