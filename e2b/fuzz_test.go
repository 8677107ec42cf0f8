package e2b

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzListQuery: the list endpoint's query decoding (state, metadata,
// startedAfter, order, limit, nextToken) never panics and accepts only a
// limit in range and a token that parses.
func FuzzListQuery(f *testing.F) {
	for _, s := range []string{"", "state=running,paused&limit=10", "metadata=user%3Dalice%26app%3Dprod", "nextToken=1700000000000000000.sb_x&order=asc",
		"startedAfter=2026-12-01T00:00:00Z", "limit=0", "metadata=%ZZ", "state=dead"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		lq, err := parseListQuery(q)
		if err != nil {
			return
		}
		if lq.Limit < 1 || lq.Limit > maxListLimit {
			t.Fatalf("accepted limit %d", lq.Limit)
		}
		if lq.NextToken != "" {
			if _, _, err := parseToken(lq.NextToken); err != nil {
				t.Fatalf("accepted token %q", lq.NextToken)
			}
		}
	})
}

// FuzzIDs: id rendering is DNS-label safe with no '-', never empty for a
// non-empty id, and matches its own source.
func FuzzIDs(f *testing.F) {
	for _, s := range []string{"sb_0123abcd", "sb-0123abcd", "SB_X", "", "ünï", "a.b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		r := RenderID(id)
		for i := 0; i < len(r); i++ {
			if !idByte(r[i]) {
				t.Fatalf("RenderID(%q) = %q has %q", id, r, r[i])
			}
		}
		if id != "" && (r == "" || !MatchID(id, id) || !MatchID(id, r)) {
			t.Fatalf("%q does not match itself or its rendering %q", id, r)
		}
		_ = idCandidates(id)
	})
}

// FuzzHandlers drives the control-plane API with arbitrary methods,
// paths, queries and JSON bodies: no handler panics, every answer is a
// valid status, and a JSON answer is valid JSON.
func FuzzHandlers(f *testing.F) {
	seeds := []struct{ method, path, query, body string }{
		{"POST", "/sandboxes", "", `{"templateID":"rt","timeout":30,"metadata":{"a":"b"},"envVars":{"K":"V"}}`},
		{"POST", "/sandboxes", "", `{"templateID":"rt","timeout":-1}`},
		{"GET", "/v2/sandboxes", "state=running&limit=5&metadata=a%3Db", ""},
		{"GET", "/sandboxes", "", ""},
		{"POST", "/sandboxes/sb-x/timeout", "", `{"timeout":1e99}`},
		{"POST", "/sandboxes/sb-x/refreshes", "", `{"duration":"x"}`},
		{"POST", "/sandboxes/sb-x/fork", "", `{"count":-3}`},
		{"POST", "/sandboxes/sb-x/snapshots", "", `{"name":null}`},
		{"GET", "/snapshots", "limit=0&sandboxID=&nextToken=zz", ""},
		{"DELETE", "/templates/%2e%2e", "", ""},
		{"GET", "/sandboxes/sb-x/metrics", "start=-1&end=x", ""},
		{"GET", "/sandboxes/sb-x/logs", "start=-1&limit=x", ""},
		{"GET", "/v2/sandboxes/sb-x/logs", "cursor=1&direction=backward&level=warn&search=%00", ""},
	}
	for _, s := range seeds {
		f.Add(s.method, s.path, s.query, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, method, path, query string, body []byte) {
		switch method {
		case "GET", "POST", "DELETE", "PUT", "PATCH":
		default:
			return
		}
		u, err := url.Parse("http://gw.local" + path)
		if err != nil || !strings.HasPrefix(path, "/") {
			return
		}
		u.RawQuery = query
		req, err := http.NewRequest(method, u.String(), bytes.NewReader(body))
		if err != nil {
			return
		}
		// A fleet per input: its sandboxes' agents live in t's temp dirs.
		fl := newFakeFleet(t)
		fl.addWarm("rt", 2)
		h, err := New(Config{Fleet: fl, APIKeys: []string{apiKey}, Domain: "gw.local"})
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-API-Key", apiKey)
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code < 100 || w.Code > 599 {
			t.Fatalf("%s %s?%s: status %d", method, path, query, w.Code)
		}
		if strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") && w.Body.Len() > 0 && !json.Valid(w.Body.Bytes()) {
			t.Fatalf("%s %s?%s: invalid JSON answer %q", method, path, query, w.Body.String())
		}
	})
}
