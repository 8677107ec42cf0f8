package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/fleet/fleettest"
	"github.com/hearthvm/hearth/inventory"
)

// BenchmarkFleet_LookupMissAsksEveryNode is a lookup of an id no view or
// index knows: the bounded fan-out (askAll) asks each of 32 nodes, all of
// which answer 404 — the fan-out's own cost beside its HTTP calls.
func BenchmarkFleet_LookupMissAsksEveryNode(b *testing.B) {
	notFound := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"not found"}`))
	}))
	b.Cleanup(notFound.Close)
	addr := strings.TrimPrefix(notFound.URL, "http://")
	invs := make([]*inventory.NodeInventory, 32)
	for i := range invs {
		name := fmt.Sprintf("n%02d", i)
		invs[i] = &inventory.NodeInventory{ObjectMeta: metav1.ObjectMeta{Name: name}, Node: name, Address: addr}
	}
	f := fleet.New(fleet.Config{View: fleettest.StaticView{Static: inventory.NewStatic(invs...)}})
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := f.ByID(ctx, "sb_missing"); !errors.Is(err, fleet.ErrNotFound) {
			b.Fatal(err)
		}
	}
}
