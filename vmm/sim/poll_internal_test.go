package sim

import (
	"testing"
	"time"
)

// poll's waits back off from 1 ms, doubling, to 32 ms and stay there.
func TestPoll_BacksOffFrom1msTo32ms(t *testing.T) {
	next := pollBackoff.DelayFunc()
	want := []time.Duration{1, 2, 4, 8, 16, 32, 32, 32}
	for i, w := range want {
		if got := next(); got != w*time.Millisecond {
			t.Fatalf("wait %d is %v, want %v", i, got, w*time.Millisecond)
		}
	}
}

// poll returns once cond holds; at its timeout it gives cond a last call
// and only then times out.
func TestPoll_HoldsOrTimesOutAfterALastCall(t *testing.T) {
	n := 0
	if err := poll(5*time.Second, func() bool { n++; return n == 3 }); err != nil || n != 3 {
		t.Fatalf("poll = %v after %d calls, want nil after 3", err, n)
	}
	start := time.Now()
	if err := poll(50*time.Millisecond, func() bool { return false }); err == nil {
		t.Fatal("poll of a condition that never holds returned nil")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("poll timed out after %v, before its timeout", d)
	}
	deadline := time.Now().Add(30 * time.Millisecond)
	if err := poll(30*time.Millisecond, func() bool { return time.Now().After(deadline) }); err != nil {
		t.Fatalf("a condition holding at the timeout: %v", err)
	}
}
