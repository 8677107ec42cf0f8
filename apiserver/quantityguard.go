package apiserver

import (
	"bytes"
	"io"
	"net/http"
	"regexp"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/endpoints/request"
	sandboxv1beta1 "sigs.k8s.io/agent-sandbox/api/v1beta1"
)

// hugeExponent matches a number with a decimal exponent of four or more
// digits ("1e55555555309", "5E+1000") standing alone as a JSON or YAML
// value: after a quote, colon, comma, bracket or whitespace, and before a
// quote, comma, bracket, brace or whitespace. apimachinery's
// resource.ParseQuantity, which decoding a pod template's resources calls,
// does not return on such a value for minutes (measured: more than 30 s of
// CPU for "1e55555555309"); no real quantity needs that exponent.
var hugeExponent = regexp.MustCompile(`(^|["\s:,\[])[+-]?[0-9]+(\.[0-9]*)?[eE][+-]?[0-9]{4,}($|["\s,\]}])`)

// defaultMaxBody is the generic server's default request body limit.
const defaultMaxBody = 3 << 20

// withQuantityGuard answers 422 to a write (create, update, patch) in
// Hearth's API groups whose body holds a number with a huge exponent,
// before the decoder sees it. Only the first maxBody+1 bytes are read
// (the decoder rejects longer bodies with 413 itself); the body is handed
// on unchanged. It runs innermost, after authentication and authorization:
// an anonymous client cannot make it read a byte.
func withQuantityGuard(next http.Handler, maxBody int64) http.Handler {
	if maxBody <= 0 {
		maxBody = defaultMaxBody
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok := request.RequestInfoFrom(r.Context())
		if !ok || !info.IsResourceRequest || r.Body == nil || !guardedGroup(info.APIGroup) ||
			(info.Verb != "create" && info.Verb != "update" && info.Verb != "patch") {
			next.ServeHTTP(w, r)
			return
		}
		head, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			responsewriters.ErrorNegotiated(apierrors.NewBadRequest("reading the request body: "+err.Error()), Codecs, sandboxv1beta1.GroupVersion, w, r)
			return
		}
		if m := hugeExponent.Find(head); m != nil {
			v := string(bytes.Trim(m, "\"\t\r\n :,[]}"))
			if len(v) > 64 {
				v = v[:64] + "..."
			}
			gk := schema.GroupKind{Group: info.APIGroup, Kind: info.Resource}
			errs := field.ErrorList{field.Invalid(field.NewPath("body"), v, "a number's exponent has at most 3 digits (a quantity such as 4Gi, 500m or 1e9)")}
			responsewriters.ErrorNegotiated(apierrors.NewInvalid(gk, info.Name, errs), Codecs, sandboxv1beta1.GroupVersion, w, r)
			return
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
		next.ServeHTTP(w, r)
	})
}

// guardedGroup reports whether group is one of the groups this server
// serves (agents.x-k8s.io and its extensions.agents.x-k8s.io).
func guardedGroup(group string) bool {
	return group == sandboxv1beta1.GroupVersion.Group || group == "extensions."+sandboxv1beta1.GroupVersion.Group
}
