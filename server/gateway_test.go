package server_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hearthvm/hearth/e2b"
	"github.com/hearthvm/hearth/server"
)

func TestRunGateway_NoKeysFailsBeforeAnyIO(t *testing.T) {
	o := server.NewGatewayOptions()
	o.Kubeconfig = "/nonexistent/kubeconfig" // never read: keys are checked first
	if err := server.RunGateway(context.Background(), o); !errors.Is(err, e2b.ErrNoKeys) {
		t.Fatalf("RunGateway without keys: %v, want ErrNoKeys", err)
	}
}
