package httpjson_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/hearthvm/hearth/internal/httpjson"
)

type echo struct {
	Got    string `json:"got"`
	Header string `json:"header"`
	CT     string `json:"ct"`
}

func TestCall_Do(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		switch r.URL.Path {
		case "/ok":
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(echo{Got: string(b), Header: r.Header.Get("X-Cred"), CT: r.Header.Get("Content-Type")})
		case "/none":
			w.WriteHeader(http.StatusNoContent)
		case "/big-error":
			w.WriteHeader(http.StatusTeapot)
			_, _ = io.WriteString(w, strings.Repeat("x", 10_000))
		case "/huge-answer":
			_, _ = io.WriteString(w, `{"got":"`+strings.Repeat("y", httpjson.MaxAnswer)+`"}`)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	for _, tc := range []struct {
		name     string
		call     httpjson.Call
		want     echo
		status   int
		errBytes int
		anyErr   bool
	}{
		{name: "body, credential and answer", call: httpjson.Call{Method: "POST", URL: srv.URL + "/ok", Header: "X-Cred", Value: "secret", In: map[string]int{"a": 1}, Out: &echo{}},
			want: echo{Got: `{"a":1}`, Header: "secret", CT: "application/json"}},
		{name: "no value, no header; no body, no content type", call: httpjson.Call{Method: "GET", URL: srv.URL + "/ok", Header: "X-Cred", Out: &echo{}},
			want: echo{}},
		{name: "204 decodes nothing", call: httpjson.Call{Method: "GET", URL: srv.URL + "/none", Out: &echo{}}},
		{name: "error body bounded by ErrLimit", call: httpjson.Call{Method: "GET", URL: srv.URL + "/big-error", ErrLimit: 100}, status: http.StatusTeapot, errBytes: 100},
		{name: "error body bounded by default", call: httpjson.Call{Method: "GET", URL: srv.URL + "/big-error"}, status: http.StatusTeapot, errBytes: 10_000},
		{name: "answer past MaxAnswer is an error", call: httpjson.Call{Method: "GET", URL: srv.URL + "/huge-answer", Out: &echo{}}, anyErr: true},
		{name: "unmarshalable body", call: httpjson.Call{Method: "POST", URL: srv.URL + "/ok", In: func() {}}, anyErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call.Do(ctx, http.DefaultClient)
			var he *httpjson.Error
			switch {
			case tc.status != 0:
				require.True(t, errors.As(err, &he), "%v", err)
				require.Equal(t, tc.status, he.Status)
				require.Len(t, he.Body, tc.errBytes)
			case tc.anyErr:
				require.Error(t, err)
				require.False(t, errors.As(err, &he))
			default:
				require.NoError(t, err)
				if out, ok := tc.call.Out.(*echo); ok {
					require.Equal(t, tc.want, *out)
				}
			}
		})
	}
}
