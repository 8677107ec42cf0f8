package sandboxstore

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

func TestSynthesize(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	dl := metav1.NewTime(at.Add(5 * time.Minute))
	rec := nodeapi.Sandbox{ID: "sb_1", Node: "n1", Template: "ghcr.io/x/y:1", ClaimRef: "ns/web", AgentAddr: "10.1.2.3:4000",
		Deadline: dl.Time, ClaimedAt: at.Time, Paused: true, Token: "secret"}
	sb := synthesize(&rec, 42)
	want := map[string]string{
		"ns/name":  "ns/web",
		"rv":       "42",
		"labels":   fmt.Sprint(map[string]string{sandbox.LabelNode: "n1", sandbox.LabelPhase: "Paused", sandbox.LabelClaim: "web", sandbox.LabelTemplate: "ghcr.io/x/y:1"}),
		"claim-id": "sb_1",
		"deadline": "2026-01-02T03:09:05Z",
		"created":  "2026-01-02T03:04:05Z",
		"node":     "n1",
		"ready":    "False SandboxSuspended",
		"podIPs":   "[10.1.2.3]",
	}
	got := map[string]string{
		"ns/name":  sb.Namespace + "/" + sb.Name,
		"rv":       sb.ResourceVersion,
		"labels":   fmt.Sprint(sb.Labels),
		"claim-id": sb.Annotations[sandbox.AnnotationClaimID],
		"deadline": sb.Annotations[sandbox.AnnotationDeadline],
		"created":  sb.CreationTimestamp.UTC().Format(time.RFC3339),
		"node":     sb.Status.NodeName,
		"ready":    string(sb.Status.Conditions[0].Status) + " " + sb.Status.Conditions[0].Reason,
		"podIPs":   fmt.Sprint(sb.Status.PodIPs),
	}
	for k := range want {
		if got[k] != want[k] {
			t.Errorf("%s = %q, want %q", k, got[k], want[k])
		}
	}
	if sb.Annotations[sandbox.AnnotationToken] != "" {
		t.Error("a read carries the sandbox token")
	}
	// The node's record and the view's entry of one state are equal by
	// content (holds: the record then carries the entry's revision), and
	// the entry renders like the record.
	e := inventory.Entry{Name: "ns/web", ID: "sb_1", Phase: "Paused", Template: "ghcr.io/x/y:1", ClaimRef: "ns/web", AgentAddr: "10.1.2.3:4000", Deadline: &dl, ClaimedAt: &at}
	if re := inventory.EntryOf(&rec); inventory.Hash("n1", &re) != inventory.Hash("n1", &e) {
		t.Errorf("the record's entry %+v ≠ the view's %+v", re, e)
	}
	it := inventory.Item{Node: &inventory.Node{Name: "n1"}, Entry: &e, Hash: 7}
	if fromView := versionedObject(it, 9); fromView.Labels[sandbox.LabelPhase] != "Paused" || fromView.Annotations[sandbox.AnnotationAddress] != "10.1.2.3:4000" || fromView.ResourceVersion != "9" {
		t.Errorf("view read = %v %v rv %s", fromView.Labels, fromView.Annotations, fromView.ResourceVersion)
	}
	bare := synthesize(&nodeapi.Sandbox{ClaimRef: "default/plain", Node: "n1"}, 1)
	if bare.Namespace != "default" || bare.Annotations != nil || bare.Status.Conditions[0].Status != metav1.ConditionTrue ||
		bare.Status.Conditions[0].Reason != sandboxv1beta1.SandboxReasonDependenciesReady {
		t.Errorf("bare entry: ns=%q ann=%v cond=%v", bare.Namespace, bare.Annotations, bare.Status.Conditions)
	}
}

func TestFleetError(t *testing.T) {
	cases := []struct {
		err  error
		code int32
	}{
		{fleet.ErrNotFound, 404},
		{&nodeapi.HTTPError{Status: 404, Message: "no such sandbox"}, 404},
		{&nodeapi.HTTPError{Status: 409, Message: "paused"}, 409},
		{&nodeapi.HTTPError{Status: 400, Message: "bad"}, 400},
		{&nodeapi.HTTPError{Status: 429, Message: "this node's limit is 8 (--max-fork-children)"}, 429}, // a quota: "no warm" arrives as ErrNoWarmCapacity
		{&nodeapi.HTTPError{Status: 500, Message: "boom"}, 500},
		{&fleet.ErrNoWarmCapacity{Key: pool.Key{Template: "t"}}, 503},
		{errors.New("dial tcp: refused"), 500},
		{apierrors.NewBadRequest("x"), 400},
	}
	for _, c := range cases {
		got := fleetError(c.err, "web", "pause")
		var se apierrors.APIStatus
		if !errors.As(got, &se) || se.Status().Code != c.code {
			t.Errorf("fleetError(%v) = %v, want %d", c.err, got, c.code)
		}
	}
	if err := fleetError(&nodeapi.HTTPError{Status: 500, Message: "disk full"}, "web", "pause"); !contains(err.Error(), "disk full") {
		t.Errorf("500 loses the node's message: %v", err)
	}
	if http.StatusOK != 200 {
		t.Fatal()
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestNewFilter(t *testing.T) {
	rec := nodeapi.Sandbox{ID: "sb_1", Node: "n1", Template: "ghcr.io/x/y:1", ClaimRef: "ns/web"}
	cases := []struct {
		name, ns, labels, fields string
		bad, match               bool
		pinned                   string
	}{
		{name: "everything", match: true},
		{name: "namespace", ns: "ns", match: true},
		{name: "other namespace", ns: "other", match: false},
		{name: "template exists", labels: sandbox.LabelTemplate, match: true},
		{name: "template absent", labels: "!" + sandbox.LabelTemplate, match: false},
		{name: "template value", labels: sandbox.LabelTemplate + "=nginx", bad: true},
		{name: "template notin", labels: sandbox.LabelTemplate + " notin (nginx)", bad: true},
		{name: "phase", labels: sandbox.LabelPhase + "=Running", match: true},
		{name: "node label", labels: sandbox.LabelNode + "=n2", match: false},
		{name: "claim label", labels: sandbox.LabelClaim + "=web", match: true},
		{name: "name pinned", ns: "ns", fields: "metadata.name=web", match: true, pinned: "ns/web"},
		{name: "name pinned no ns", fields: "metadata.name=web", match: true},
		{name: "other name", fields: "metadata.name=x", match: false},
		{name: "nodeName", fields: "status.nodeName=n1", match: true},
		{name: "nodeName other", fields: "status.nodeName!=n1", match: false},
		{name: "namespace field", fields: "metadata.namespace=ns", match: true},
		{name: "unsupported field", fields: "spec.operatingMode=x", bad: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := &metainternalversion.ListOptions{}
			if c.labels != "" {
				sel, err := labels.Parse(c.labels)
				if err != nil {
					t.Fatal(err)
				}
				opts.LabelSelector = sel
			}
			if c.fields != "" {
				sel, err := fields.ParseSelector(c.fields)
				if err != nil {
					t.Fatal(err)
				}
				opts.FieldSelector = sel
			}
			f, err := newFilter(c.ns, opts)
			if c.bad {
				if !apierrors.IsBadRequest(err) {
					t.Fatalf("err = %v, want 400", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := f.matches(&rec); got != c.match {
				t.Fatalf("matches = %v, want %v", got, c.match)
			}
			if p, _ := f.pinned(); p != c.pinned {
				t.Fatalf("pinned = %q, want %q", p, c.pinned)
			}
		})
	}
}

func TestConvertFieldLabel(t *testing.T) {
	for _, l := range []string{"metadata.name", "metadata.namespace", "status.nodeName"} {
		if _, _, err := ConvertFieldLabel(l, "x"); err != nil {
			t.Errorf("%s: %v", l, err)
		}
	}
	if _, _, err := ConvertFieldLabel("spec.x", "x"); err == nil {
		t.Error("spec.x accepted")
	}
}

// FuzzFilter: any selector pair either parses into a filter that matches
// without panicking, or is refused.
func FuzzFilter(f *testing.F) {
	f.Add("sandbox.cocoonstack.io/template", "metadata.name=web", "ns/web")
	f.Add("sandbox.cocoonstack.io/phase in (Running,Paused)", "status.nodeName!=n1", "web")
	f.Fuzz(func(t *testing.T, lsel, fsel, name string) {
		opts := &metainternalversion.ListOptions{}
		if sel, err := labels.Parse(lsel); err == nil {
			opts.LabelSelector = sel
		}
		if sel, err := fields.ParseSelector(fsel); err == nil {
			opts.FieldSelector = sel
		}
		flt, err := newFilter("ns", opts)
		if err != nil {
			return
		}
		flt.matches(&nodeapi.Sandbox{ID: "sb_1", Node: "n1", Template: "t", ClaimRef: name})
		inventory.SplitName(name)
	})
}
