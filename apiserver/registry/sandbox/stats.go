package sandboxstore

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/sandbox"
)

// statsStorage serves GET .../sandboxes/{name}/stats: the sandbox measured
// now by its node (nodeapi's GET /v1/sandboxes/{id}/stats) as a
// SandboxStats. A paused sandbox answers, Paused set; an unknown one is a
// 404. RBAC: get on sandboxes/stats.
type statsStorage struct {
	s *sandboxStorage
}

var _ rest.Getter = (*statsStorage)(nil)

func (st *statsStorage) New() runtime.Object { return &sandbox.SandboxStats{} }
func (st *statsStorage) Destroy()            {}

func (st *statsStorage) Get(ctx context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	sb, err := st.s.fleet.ByRef(ctx, refOf(ctx, name))
	if err != nil {
		return nil, fleetError(err, name, "stats")
	}
	m, err := st.s.fleet.Stats(ctx, sb)
	if err != nil {
		return nil, fleetError(err, name, "stats")
	}
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	return statsOf(name, ns, m, st.s.now()), nil
}

// statsOf is the node's measurement m as the API's SandboxStats: what the
// node could not measure (0, or mem_used_measured false; a CPU rate it did
// not answer or that is out of range) is absent.
func statsOf(name, ns string, m nodeapi.Stats, now time.Time) *sandbox.SandboxStats {
	at := m.MeasuredAt
	if at.IsZero() {
		at = now
	}
	out := &sandbox.SandboxStats{
		TypeMeta:         metav1.TypeMeta{APIVersion: sandbox.SchemeGroupVersion.String(), Kind: "SandboxStats"},
		ObjectMeta:       metav1.ObjectMeta{Name: name, Namespace: ns},
		Timestamp:        metav1.NewTime(at.UTC()),
		Paused:           m.Paused,
		CPUCount:         int32(min(max(m.CPUCount, 0), 1<<20)),
		MemoryLimitBytes: max(m.MemTotalBytes, 0),
	}
	positive := func(v int64) *int64 {
		if v <= 0 {
			return nil
		}
		return &v
	}
	if m.CPUSeconds > 0 && m.CPUSeconds < 1<<33 { // < ~270 years: fits int64 ns
		out.CPUUsageCoreNanoSeconds = positive(int64(m.CPUSeconds * 1e9))
	}
	if r := m.CPURateCores; r != nil && *r >= 0 && *r < 1<<20 && m.CPURateWindowSeconds > 0 && m.CPURateWindowSeconds < 1<<20 {
		v := int64(*r * 1e9)
		out.CPUUsageNanoCores = &v
		out.Window = &metav1.Duration{Duration: time.Duration(m.CPURateWindowSeconds * float64(time.Second)).Round(time.Millisecond)}
	}
	if m.MemUsedMeasured {
		v := max(m.MemUsedBytes, 0)
		out.MemoryUsedBytes = &v
	}
	out.DiskLimitBytes = positive(m.DiskTotalBytes)
	if out.DiskLimitBytes != nil {
		v := max(m.DiskUsedBytes, 0)
		out.DiskUsedBytes = &v
	}
	return out
}
