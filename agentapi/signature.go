package agentapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// Signed file URLs, as the e2b SDK makes them (Sandbox.downloadUrl,
// uploadUrl): GET or POST /files?path=<p>[&username=<u>]&signature=v1_<s>
// [&signature_expiration=<unix seconds>], where s is the unpadded standard
// base64 of sha256("<p>:<op>:<u>:<token>[:<expiration>]"), op is "read"
// for GET and "write" for POST and token is the sandbox's access token. A
// request so signed needs no access token (AccessTokenHeader); an expired
// or wrong signature is refused like a missing token. The agent acts for it
// as the user u names, else its default user — never one named in
// Authorization: Basic, which the signature does not cover.

// ErrSignatureExpired is returned by VerifyFileSignature for a signature
// past its expiration; its text is envd's, which clients match.
var ErrSignatureExpired = errors.New("signature is already expired")

// ErrBadSignature is returned by VerifyFileSignature for a signature that
// does not match the request under the sandbox's token.
var ErrBadSignature = errors.New("the URL signature is not valid for this request")

// HasFileSignature reports whether r is a /files request carrying a
// signature (well-formed enough to be worth a lookup); it says nothing
// about its validity.
func HasFileSignature(r *http.Request) bool {
	if r.URL.Path != "/files" || (r.Method != http.MethodGet && r.Method != http.MethodPost) {
		return false
	}
	s := r.URL.Query().Get("signature")
	return len(s) > 3 && len(s) <= 64 && s[:3] == "v1_"
}

// FileSignature is the signature of a file URL for path, op ("read" or
// "write") and user under token; expiration, when not zero, is part of it.
func FileSignature(path, op, user, token string, expiration int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if expiration != 0 {
		raw += ":" + strconv.FormatInt(expiration, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// VerifyFileSignature checks r's URL signature against token at now.
func VerifyFileSignature(r *http.Request, token string, now time.Time) error {
	if token == "" || !HasFileSignature(r) {
		return ErrBadSignature
	}
	q := r.URL.Query()
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	var exp int64
	if v := q.Get("signature_expiration"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return ErrBadSignature
		}
		exp = n
	}
	want := FileSignature(q.Get("path"), op, q.Get("username"), token, exp)
	if subtle.ConstantTimeCompare([]byte(q.Get("signature")), []byte(want)) != 1 {
		return ErrBadSignature
	}
	if exp != 0 && now.Unix() > exp {
		return ErrSignatureExpired
	}
	return nil
}
