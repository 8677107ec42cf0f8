package e2b

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hearthvm/hearth/nodeapi"
)

// DecodeMetadataQuery decodes the list endpoint's metadata filter. The SDK
// encodes each key and value with encodeURIComponent, joins them as a query
// string (escaping again) and sends that as one query value; value is that
// query value as already unescaped once by the HTTP layer.
func DecodeMetadataQuery(value string) (map[string]string, error) {
	if value == "" {
		return nil, nil
	}
	inner, err := url.QueryUnescape(value)
	if err != nil {
		return nil, fmt.Errorf("metadata filter %q: %v", value, err)
	}
	out := map[string]string{}
	for _, pair := range strings.Split(inner, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		dk, err := url.QueryUnescape(k)
		if err != nil {
			return nil, fmt.Errorf("metadata filter key %q: %v", k, err)
		}
		dv, err := url.QueryUnescape(v)
		if err != nil {
			return nil, fmt.Errorf("metadata filter value %q: %v", v, err)
		}
		if dk == "" {
			return nil, fmt.Errorf("metadata filter has an empty key")
		}
		out[dk] = dv
	}
	return out, nil
}

// listItem is what filtering and paging need of a sandbox.
type listItem struct {
	ID        string // rendered
	Template  string
	Paused    bool
	StartedAt time.Time
	Metadata  map[string]string
}

// listQuery is a decoded list request.
type listQuery struct {
	States   map[string]bool // nil = running and paused
	Metadata map[string]string
	Template string
	// StartedAfter and StartedBefore bound the start time, both inclusive
	// (like e2b), at the millisecond precision startedAt is served with;
	// zero is unbounded.
	StartedAfter, StartedBefore time.Time
	Ascending                   bool
	Limit                       int
	NextToken                   string
}

const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

// parseListQuery decodes the query of GET /v2/sandboxes.
func parseListQuery(q url.Values) (listQuery, error) {
	lq := listQuery{Limit: defaultListLimit, NextToken: q.Get("nextToken")}
	if s := q.Get("state"); s != "" {
		lq.States = map[string]bool{}
		for _, st := range strings.Split(s, ",") {
			switch st = strings.TrimSpace(st); st {
			case "running", "paused":
				lq.States[st] = true
			default:
				return lq, fmt.Errorf("unknown state %q (want running or paused)", st)
			}
		}
	}
	md, err := DecodeMetadataQuery(q.Get("metadata"))
	if err != nil {
		return lq, err
	}
	lq.Metadata = md
	lq.Template = q.Get("template")
	for _, b := range []struct {
		name string
		to   *time.Time
	}{{"startedAfter", &lq.StartedAfter}, {"startedBefore", &lq.StartedBefore}} {
		if s := q.Get(b.name); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return lq, fmt.Errorf("%s %q is not an RFC3339 time", b.name, s)
			}
			*b.to = t
		}
	}
	if !lq.StartedAfter.IsZero() && !lq.StartedBefore.IsZero() && lq.StartedBefore.Before(lq.StartedAfter) {
		return lq, fmt.Errorf("startedBefore %s is before startedAfter %s", q.Get("startedBefore"), q.Get("startedAfter"))
	}
	switch o := q.Get("order"); o {
	case "", "desc":
	case "asc":
		lq.Ascending = true
	default:
		return lq, fmt.Errorf("order %q (want asc or desc)", o)
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxListLimit {
			return lq, fmt.Errorf("limit %q must be an integer in [1, %d]", s, maxListLimit)
		}
		lq.Limit = n
	}
	if lq.NextToken != "" {
		if _, _, err := parseToken(lq.NextToken); err != nil {
			return lq, err
		}
	}
	return lq, nil
}

func (q listQuery) keep(it listItem) bool {
	state := "running"
	if it.Paused {
		state = "paused"
	}
	if q.States != nil && !q.States[state] {
		return false
	}
	for k, v := range q.Metadata {
		if got, ok := it.Metadata[k]; !ok || got != v {
			return false
		}
	}
	if q.Template != "" && it.Template != q.Template {
		return false
	}
	at := it.StartedAt.Truncate(time.Millisecond)
	if !q.StartedAfter.IsZero() && at.Before(q.StartedAfter) {
		return false
	}
	if !q.StartedBefore.IsZero() && at.After(q.StartedBefore) {
		return false
	}
	return true
}

// token encodes a position in the order: the last item's start time and id.
func token(it listItem) string {
	return strconv.FormatInt(it.StartedAt.UnixNano(), 10) + "." + it.ID
}

func parseToken(t string) (int64, string, error) {
	ns, id, ok := strings.Cut(t, ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return 0, "", fmt.Errorf("invalid nextToken %q", t)
	}
	return n, id, nil
}

// before orders items: by start time (full precision), then id, ascending;
// the id makes it total, so equal start times never tie.
func before(an int64, aid string, bn int64, bid string) bool {
	if an != bn {
		return an < bn
	}
	return aid < bid
}

// pageList filters, orders and pages items. next is empty on the last page.
// The token names a position, not an item, so deletions between pages
// neither repeat nor skip the rest.
func pageList(items []listItem, q listQuery) (page []listItem, next string) {
	kept := make([]listItem, 0, len(items))
	for _, it := range items {
		if q.keep(it) {
			kept = append(kept, it)
		}
	}
	less := func(a, b listItem) bool {
		return before(a.StartedAt.UnixNano(), a.ID, b.StartedAt.UnixNano(), b.ID)
	}
	sort.SliceStable(kept, func(i, j int) bool {
		if q.Ascending {
			return less(kept[i], kept[j])
		}
		return less(kept[j], kept[i])
	})
	start := 0
	if q.NextToken != "" {
		tn, tid, _ := parseToken(q.NextToken)
		start = len(kept)
		for i, it := range kept {
			n := it.StartedAt.UnixNano()
			after := before(tn, tid, n, it.ID)
			if !q.Ascending {
				after = before(n, it.ID, tn, tid)
			}
			if after {
				start = i
				break
			}
		}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultListLimit
	}
	end := min(start+limit, len(kept))
	page = kept[start:end]
	if end < len(kept) {
		next = token(page[len(page)-1])
	}
	return page, next
}

// view returns every sandbox the request's key sees (visible) that the
// fleet lists (published or claimed through the fleet and not published yet).
func (g *gateway) view(ctx context.Context) ([]nodeapi.Sandbox, error) {
	all, err := g.fleet.List(ctx)
	if err != nil {
		return nil, err
	}
	ns := g.namespaceOf(ctx)
	seen := map[string]bool{}
	out := make([]nodeapi.Sandbox, 0, len(all))
	for _, s := range all {
		if visible(ns, s) && !seen[s.ID] {
			seen[s.ID] = true
			out = append(out, s)
		}
	}
	return out, nil
}

func (g *gateway) handleList(w http.ResponseWriter, r *http.Request) {
	q, err := parseListQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	g.serveList(w, r, q)
}

// handleListV1 is the v1 list: running sandboxes, metadata filter only.
func (g *gateway) handleListV1(w http.ResponseWriter, r *http.Request) {
	md, err := DecodeMetadataQuery(r.URL.Query().Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	g.serveList(w, r, listQuery{States: map[string]bool{"running": true}, Metadata: md, Limit: maxListLimit})
}

func (g *gateway) serveList(w http.ResponseWriter, r *http.Request, q listQuery) {
	locs, err := g.view(r.Context())
	if err != nil {
		fail(w, err, "sandboxes")
		return
	}
	items := make([]listItem, len(locs))
	byID := make(map[string]nodeapi.Sandbox, len(locs))
	for i, l := range locs {
		id := RenderID(l.ID)
		items[i] = listItem{ID: id, Template: l.Template, Paused: l.Paused, StartedAt: l.ClaimedAt, Metadata: l.Metadata}
		byID[id] = l
	}
	page, next := pageList(items, q)
	out := make([]listedJSON, 0, len(page))
	for _, it := range page {
		out = append(out, g.listedOf(byID[it.ID]))
	}
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	writeJSON(w, http.StatusOK, out)
}
