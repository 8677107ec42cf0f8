package agentapi

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The SDK's own vector: getSignature({path:'/tmp/a.txt', operation:'read',
// user: undefined, envdAccessToken:'envd-token-abc'}).
func TestFileSignature_MatchesTheSDK(t *testing.T) {
	require.Equal(t, "v1_+kmtg", FileSignature("/tmp/a.txt", "read", "", "envd-token-abc", 0)[:8])
}

// signed is a request for path signed with sig (and its expiration, when
// not zero) and the extra query values.
func signed(method, path, sig string, exp int64, extra ...string) *http.Request {
	q := url.Values{"path": {"a.txt"}, "signature": {sig}}
	if exp != 0 {
		q.Set("signature_expiration", strconv.FormatInt(exp, 10))
	}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	r, _ := http.NewRequest(method, "http://agent"+path+"?"+q.Encode(), nil)
	return r
}

// TestVerifyFileSignature_AcceptsOnlyTheSignedRequest: a signature opens
// the one path, operation, user and expiration it was made for, under the
// one token, and nothing once expired.
func TestVerifyFileSignature_AcceptsOnlyTheSignedRequest(t *testing.T) {
	const tok = "sandbox-token-0123456789"
	now := time.Unix(1_700_000_000, 0)
	past, future := now.Unix()-60, now.Unix()+60
	read := FileSignature("a.txt", "read", "", tok, 0)
	write := FileSignature("a.txt", "write", "", tok, 0)
	for _, tc := range []struct {
		name  string
		r     *http.Request
		token string
		want  error
	}{
		{"read", signed("GET", "/files", read, 0), tok, nil},
		{"write", signed("POST", "/files", write, 0), tok, nil},
		{"a user's", signed("GET", "/files", FileSignature("a.txt", "read", "root", tok, 0), 0, "username", "root"), tok, nil},
		{"not yet expired", signed("GET", "/files", FileSignature("a.txt", "read", "", tok, future), future), tok, nil},
		{"expired", signed("GET", "/files", FileSignature("a.txt", "read", "", tok, past), past), tok, ErrSignatureExpired},
		{"read signature used to write", signed("POST", "/files", read, 0), tok, ErrBadSignature},
		{"write signature used to read", signed("GET", "/files", write, 0), tok, ErrBadSignature},
		{"another token's", signed("GET", "/files", FileSignature("a.txt", "read", "", "other-token", 0), 0), tok, ErrBadSignature},
		{"no token", signed("GET", "/files", FileSignature("a.txt", "read", "", "", 0), 0), "", ErrBadSignature},
		{"another path", signed("GET", "/files", FileSignature("b.txt", "read", "", tok, 0), 0), tok, ErrBadSignature},
		{"a user added", signed("GET", "/files", read, 0, "username", "root"), tok, ErrBadSignature},
		{"the expiration dropped", signed("GET", "/files", FileSignature("a.txt", "read", "", tok, future), 0), tok, ErrBadSignature},
		{"the expiration moved", signed("GET", "/files", FileSignature("a.txt", "read", "", tok, past), future), tok, ErrBadSignature},
		{"a zero expiration", signed("GET", "/files", read, 0, "signature_expiration", "0"), tok, ErrBadSignature},
		{"a negative expiration", signed("GET", "/files", read, 0, "signature_expiration", "-1"), tok, ErrBadSignature},
		{"a non-numeric expiration", signed("GET", "/files", read, 0, "signature_expiration", "soon"), tok, ErrBadSignature},
		{"another route", signed("GET", "/process.Process/List", read, 0), tok, ErrBadSignature},
		{"another method", signed("PUT", "/files", write, 0), tok, ErrBadSignature},
		{"no v1_ prefix", signed("GET", "/files", strings.TrimPrefix(read, "v1_"), 0), tok, ErrBadSignature},
		{"too long", signed("GET", "/files", read+strings.Repeat("A", 64), 0), tok, ErrBadSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := VerifyFileSignature(tc.r, tc.token, now)
			if tc.want == nil {
				require.NoError(t, err)
				return
			}
			require.True(t, errors.Is(err, tc.want), "got %v, want %v", err, tc.want)
		})
	}
}

func TestHasFileSignature_OnlyForSignedFileRequests(t *testing.T) {
	sig := FileSignature("a.txt", "read", "", "t", 0)
	for _, tc := range []struct {
		r    *http.Request
		want bool
	}{
		{signed("GET", "/files", sig, 0), true},
		{signed("POST", "/files", sig, 0), true},
		{signed("PUT", "/files", sig, 0), false},
		{signed("DELETE", "/files", sig, 0), false},
		{signed("GET", "/files/", sig, 0), false},
		{signed("GET", "/health", sig, 0), false},
		{signed("GET", "/files", "", 0), false},
		{signed("GET", "/files", "v1_", 0), false},
		{signed("GET", "/files", "v2_abc", 0), false},
		{signed("GET", "/files", "v1_"+strings.Repeat("A", 62), 0), false},
	} {
		require.Equal(t, tc.want, HasFileSignature(tc.r), "%s %s", tc.r.Method, tc.r.URL)
	}
}
