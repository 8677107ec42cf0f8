package sandboxstore

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"

	"github.com/hearthvm/hearth/nodeapi"
)

// nameFleet holds the names in held (Held answers for them) and refuses a
// claim of a name in refused with the node's 409; it delivers every other
// claim. Create calls no other method (the embedded nil Fleet).
type nameFleet struct {
	Fleet
	held, refused map[string]bool
	claims        []string
}

func (f *nameFleet) Held(_ context.Context, ref string) (nodeapi.Sandbox, bool) {
	return nodeapi.Sandbox{ID: "sb_old", Node: "n1", ClaimRef: ref}, f.held[ref]
}

func (f *nameFleet) Claim(_ context.Context, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	f.claims = append(f.claims, req.ClaimRef)
	if f.refused[req.ClaimRef] {
		return nodeapi.Sandbox{}, &nodeapi.HTTPError{Status: 409, Message: "claim_ref held"}
	}
	return nodeapi.Sandbox{ID: "sb_new", Node: "n1", ClaimRef: req.ClaimRef, Template: req.Template,
		ClaimedAt: time.Now(), Deadline: time.Now().Add(time.Minute), Object: req.Object}, nil
}

func newSandbox(name, generateName string) *sandboxv1beta1.Sandbox {
	sb := &sandboxv1beta1.Sandbox{ObjectMeta: metav1.ObjectMeta{Name: name, GenerateName: generateName}}
	sb.Spec.PodTemplate.Spec.Containers = []corev1.Container{{Name: "m", Image: "img:1"}}
	return sb
}

func TestCreate_HeldNameIsAlreadyExistsBeforeAnyClaim(t *testing.T) {
	f := &nameFleet{held: map[string]bool{"ns/web": true}, refused: map[string]bool{"ns/raced": true}}
	s := &sandboxStorage{fleet: f, live: &fakeLive{}, now: time.Now}
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	if _, err := s.Create(ctx, newSandbox("web", ""), nil, &metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) || len(f.claims) != 0 {
		t.Fatalf("create of a held name = %v after claims %v; want AlreadyExists and no claim", err, f.claims)
	}
	if _, err := s.Create(ctx, newSandbox("raced", ""), nil, &metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create refused by the node = %v, want AlreadyExists", err)
	}
}

func TestCreate_GenerateNameRetriesAHeldName(t *testing.T) {
	f := &nameFleet{held: map[string]bool{}, refused: map[string]bool{}}
	// The first generated name is held.
	asked := 0
	hold := func(ref string) bool {
		asked++
		if asked == 1 {
			f.held[ref] = true
			return true
		}
		return false
	}
	s := &sandboxStorage{fleet: &heldOnce{nameFleet: f, hold: hold}, live: &fakeLive{}, now: time.Now}
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	out, err := s.Create(ctx, newSandbox("", "job-"), nil, &metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sb := out.(*sandboxv1beta1.Sandbox)
	if !strings.HasPrefix(sb.Name, "job-") || f.held["ns/"+sb.Name] || len(f.claims) != 1 {
		t.Fatalf("generated %q after held %v, claims %v", sb.Name, f.held, f.claims)
	}
}

// heldOnce reports the first name it is asked about as held.
type heldOnce struct {
	*nameFleet
	hold func(string) bool
}

func (h *heldOnce) Held(ctx context.Context, ref string) (nodeapi.Sandbox, bool) {
	if h.hold(ref) {
		return nodeapi.Sandbox{ID: "sb_old", Node: "n1", ClaimRef: ref}, true
	}
	return h.nameFleet.Held(ctx, ref)
}
