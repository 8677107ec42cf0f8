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

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

// TestFork_CountsPastTheNodesBoundAre400BeforeAnyLookup: the fork
// subresource refuses a count no node forks in one call
// (nodeapi.MaxForkCount) itself, naming the bound, before the sandbox is
// looked up (the fleet here has no ByRef: a lookup would panic), as the
// e2b API does.
func TestFork_CountsPastTheNodesBoundAre400BeforeAnyLookup(t *testing.T) {
	s := &sandboxStorage{fleet: &nameFleet{}, view: &inventory.Static{}, now: time.Now}
	fork := s.verbs()["fork"]
	ctx := genericapirequest.WithNamespace(context.Background(), "ns")
	for _, count := range []int32{-1, nodeapi.MaxForkCount + 1, 100} {
		_, err := fork.Create(ctx, "web", &sandbox.SandboxForkOptions{Count: count}, nil, &metav1.CreateOptions{})
		if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), fmt.Sprintf("[1, %d]", nodeapi.MaxForkCount)) {
			t.Fatalf("fork of %d = %v; want a 400 naming [1, %d]", count, err, nodeapi.MaxForkCount)
		}
	}
}
