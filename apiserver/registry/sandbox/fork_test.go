package sandboxstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

// TestFork_CountsPastTheNodesBoundAre400BeforeAnyLookup: the fork
// subresource refuses a count no node forks in one call
// (nodeapi.MaxForkCount) itself, naming the bound, before the sandbox is
// looked up (the fleet here has no ByRef: a lookup would panic), as the
// e2b API does.
func TestFork_CountsPastTheNodesBoundAre400BeforeAnyLookup(t *testing.T) {
	s := &sandboxStorage{fleet: &nameFleet{}, live: &fakeLive{}, now: time.Now}
	fork := s.verbs()["fork"]
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	for _, count := range []int32{-1, nodeapi.MaxForkCount + 1, 100} {
		_, err := fork.Create(ctx, "web", &sandbox.SandboxForkOptions{Count: count}, nil, &metav1.CreateOptions{})
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), fmt.Sprintf("[1, %d]", nodeapi.MaxForkCount)) {
			t.Fatalf("fork of %d = %v; want a 400 naming [1, %d]", count, err, nodeapi.MaxForkCount)
		}
	}
}

// quotaFleet holds one sandbox whose node refuses every fork with its
// quota's 429.
type quotaFleet struct{ Fleet }

func (quotaFleet) ByRef(_ context.Context, ref string) (nodeapi.Sandbox, error) {
	return nodeapi.Sandbox{ID: "sb_1", Node: "n1", ClaimRef: ref}, nil
}

func (quotaFleet) Fork(context.Context, nodeapi.Sandbox, int, int64) ([]nodeapi.Sandbox, error) {
	return nil, &nodeapi.HTTPError{Status: 429, Message: "forking 2 would make 9 children in this sandbox tree; this node's limit is 8 (--max-fork-children)"}
}

// TestFork_PastTheTreesLimitIs429: a fork the node's fork limits refuse is
// 429 TooManyRequests with the node's words, as on the e2b API — not a 503
// ("no capacity, retry"): retrying does not help until something is freed.
func TestFork_PastTheTreesLimitIs429(t *testing.T) {
	s := &sandboxStorage{fleet: quotaFleet{}, live: &fakeLive{}, now: time.Now}
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	_, err := s.verbs()["fork"].Create(ctx, "web", &sandbox.SandboxForkOptions{Count: 2}, nil, &metav1.CreateOptions{})
	if !apierrors.IsTooManyRequests(err) || !strings.Contains(err.Error(), "--max-fork-children") {
		t.Fatalf("fork past the tree's limit = %v; want 429 TooManyRequests naming the limit", err)
	}
	if _, ok := apierrors.SuggestsClientDelay(err); ok {
		t.Fatal("a quota's 429 suggests a retry")
	}
}
