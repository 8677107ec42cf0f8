package fleet

import (
	"errors"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

func TestLeaseFor(t *testing.T) {
	now := time.Date(2026, 8, 17, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *metav1.Time { m := metav1.NewTime(now.Add(d)); return &m }
	cases := []struct {
		name    string
		st      *metav1.Time
		ann     string
		want    int64
		wantErr bool
	}{
		{"neither is node default", nil, "", 0, false},
		{"annotation", nil, "600", 600, false},
		{"annotation zero", nil, "0", 0, false},
		{"annotation plus sign", nil, "+5", 5, false},
		{"annotation negative", nil, "-1", 0, true},
		{"annotation malformed", nil, "ten", 0, true},
		{"annotation float", nil, "1.5", 0, true},
		{"shutdownTime whole", at(90 * time.Second), "", 90, false},
		{"shutdownTime rounds up", at(90*time.Second + 500*time.Millisecond), "", 91, false},
		{"shutdownTime wins over malformed annotation", at(10 * time.Second), "junk", 10, false},
		{"shutdownTime now is past", at(0), "", 0, true},
		{"shutdownTime past", at(-time.Minute), "60", 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sb := &sandboxv1beta1.Sandbox{}
			sb.Spec.ShutdownTime = tc.st
			if tc.ann != "" {
				sb.Annotations = map[string]string{"sandbox.cocoonstack.io/ttl-seconds": tc.ann}
			}
			got, err := LeaseFor(sb, now)
			var le *LeaseError
			if tc.wantErr != errors.As(err, &le) {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("got %d, want %d", got, tc.want)
			}
		})
	}
}
