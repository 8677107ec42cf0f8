package sandbox

import (
	"fmt"
	"net/url"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// SandboxLogOptions are the query parameters of GET
// .../sandboxes/{name}/log, the sandbox's log as text (pods/log's words):
// the processes started through the agent's API, their stdout and stderr
// lines and the agent's errors, never their environment
// (docs/API.md#sandbox-logs).
type SandboxLogOptions struct {
	metav1.TypeMeta `json:",inline"`
	// TailLines keeps the newest n lines.
	TailLines *int64 `json:"tailLines,omitempty"`
	// LimitBytes cuts the answer after n bytes.
	LimitBytes *int64 `json:"limitBytes,omitempty"`
	// SinceSeconds keeps the lines of the last n seconds.
	SinceSeconds *int64 `json:"sinceSeconds,omitempty"`
	// SinceTime keeps the lines at or after it (RFC 3339).
	SinceTime *metav1.Time `json:"sinceTime,omitempty"`
	// Timestamps starts each line with its RFC 3339 time.
	Timestamps bool `json:"timestamps,omitempty"`
	// Follow streams the log: the selected lines, then each entry as it
	// is written, until the client goes away or the sandbox is paused or
	// released.
	Follow bool `json:"follow,omitempty"`
}

// DeepCopyInto copies in into out.
func (in *SandboxLogOptions) DeepCopyInto(out *SandboxLogOptions) {
	*out = *in
	for _, p := range []**int64{&out.TailLines, &out.LimitBytes, &out.SinceSeconds} {
		if *p != nil {
			v := **p
			*p = &v
		}
	}
	if in.SinceTime != nil {
		out.SinceTime = in.SinceTime.DeepCopy()
	}
}

// DeepCopyObject is runtime.Object's copy.
func (in *SandboxLogOptions) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := new(SandboxLogOptions)
	in.DeepCopyInto(out)
	return out
}

// DecodeLogOptions reads SandboxLogOptions from a query; an error names
// the bad parameter. Unknown parameters are ignored, as the API server's
// own options decoding does.
func DecodeLogOptions(q url.Values, into *SandboxLogOptions) error {
	ints := []struct {
		name string
		to   **int64
	}{{"tailLines", &into.TailLines}, {"limitBytes", &into.LimitBytes}, {"sinceSeconds", &into.SinceSeconds}}
	for _, p := range ints {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%s %q is not an integer", p.name, v)
			}
			*p.to = &n
		}
	}
	if v := q.Get("sinceTime"); v != "" {
		var t metav1.Time
		if err := t.UnmarshalQueryParameter(v); err != nil {
			return fmt.Errorf("sinceTime %q is not an RFC 3339 time", v)
		}
		into.SinceTime = &t
	}
	for _, p := range []struct {
		name string
		to   *bool
	}{{"timestamps", &into.Timestamps}, {"follow", &into.Follow}} {
		if v := q.Get(p.name); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("%s %q is not a boolean", p.name, v)
			}
			*p.to = b
		}
	}
	return nil
}
