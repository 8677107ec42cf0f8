package e2b

import (
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"

	"github.com/hearthvm/hearth/nodeapi"
)

type metricJSON struct {
	Timestamp     string  `json:"timestamp"`
	TimestampUnix int64   `json:"timestampUnix"`
	CPUCount      int     `json:"cpuCount"`
	CPUUsedPct    float64 `json:"cpuUsedPct"`
	MemUsed       int64   `json:"memUsed"`
	MemTotal      int64   `json:"memTotal"`
	MemCache      int64   `json:"memCache"`
	DiskUsed      int64   `json:"diskUsed"`
	DiskTotal     int64   `json:"diskTotal"`
}

// metricsRange decodes getMetrics' optional start and end (unix seconds,
// inclusive).
func metricsRange(q url.Values) (start, end int64, err error) {
	start, end = math.MinInt64, math.MaxInt64
	for _, b := range []struct {
		name string
		to   *int64
	}{{"start", &start}, {"end", &end}} {
		n, ok, err := nonNegativeParam(q, b.name, "a unix time in seconds")
		if err != nil {
			return 0, 0, err
		}
		if ok {
			*b.to = n
		}
	}
	if end < start {
		return 0, 0, fmt.Errorf("end %d is before start %d", end, start)
	}
	return start, end, nil
}

// handleMetrics answers the sandbox's metrics in [start, end]: the node
// measures on demand, so the one sample is now's, and a range that does
// not hold now is an empty list.
func (g *gateway) handleMetrics(w http.ResponseWriter, r *http.Request) {
	start, end, err := metricsRange(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	s, ok := g.sandboxFor(w, r)
	if !ok {
		return
	}
	st, err := g.fleet.Stats(r.Context(), s)
	if err != nil {
		failSandbox(w, r, err)
		return
	}
	at := st.MeasuredAt
	if at.IsZero() {
		at = g.now()
	}
	out := []metricJSON{}
	if at.Unix() >= start && at.Unix() <= end {
		out = append(out, metricJSON{
			Timestamp: rfc3339(at), TimestampUnix: at.Unix(), CPUCount: st.CPUCount, CPUUsedPct: cpuUsedPct(st),
			MemUsed: st.MemUsedBytes, MemTotal: st.MemTotalBytes,
			DiskUsed: st.DiskUsedBytes, DiskTotal: st.DiskTotalBytes,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// cpuUsedPct is e2b's cpuUsedPct: the share of the sandbox's CPUs it used
// over the node's rate window (nodeapi.Stats.CPURateCores), in percent,
// two decimals; 0 while the node has no rate yet (a first measurement).
func cpuUsedPct(st nodeapi.Stats) float64 {
	if st.CPURateCores == nil || st.CPUCount <= 0 || *st.CPURateCores < 0 {
		return 0
	}
	return math.Round(*st.CPURateCores/float64(st.CPUCount)*10000) / 100
}

// nonNegativeParam reads query parameter name as a non-negative integer:
// ok is false when it is absent or empty; a value that is not one is an
// error saying it should be what.
func nonNegativeParam(q url.Values, name, what string) (n int64, ok bool, err error) {
	v := q.Get(name)
	if v == "" {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("%s %q is not %s", name, v, what)
	}
	return n, true, nil
}
