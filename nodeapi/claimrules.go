package nodeapi

import (
	"bytes"
	"maps"
	"net/http"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Bounds on a claim's Env (ClaimRequest.Env): the node posts it to the
// agent's /init and records it with the claim, so it is bounded like the
// metadata.
const (
	// MaxEnvVars bounds the number of variables.
	MaxEnvVars = 1000
	// MaxEnvBytes bounds the names and values, summed (MetadataBytes).
	MaxEnvBytes = 64 << 10
)

// MaxClaimRefBytes bounds a claim ref ("<namespace>/<name>").
const MaxClaimRefBytes = 512

// Validate checks r against the claim rules that need no node
// (docs/API.md#claim-rules) and returns every breach, or none:
//
//   - env: at most MaxEnvVars variables and MaxEnvBytes of names and
//     values; a name is non-empty valid UTF-8 without '=' or a control
//     character (NUL included), a value holds no NUL;
//   - metadata: at most MaxMetadataKeys keys and MaxMetadataBytes of keys
//     and values; no empty key;
//   - labels and annotations: as Kubernetes validates an object's
//     (metav1 label keys and values, annotation keys); labels,
//     annotations and spec at most MaxObjectBytes together, managed
//     fields at most MaxManagedFieldsBytes; spec a JSON object and
//     managed_fields a JSON array when present;
//   - ttl_seconds not negative; claim_ref empty or "<namespace>/<name>"
//     (both parts, at most MaxClaimRefBytes, no control character);
//     on_timeout empty, OnTimeoutKill or OnTimeoutPause.
//
// The node calls it on receipt of POST /v1/claim, and every front door (a
// Kubernetes Create, an e2b create, a SandboxClaim) before any node is
// asked, so a claim breaking a rule never costs a node round trip and the
// doors agree. The pool key is not checked here: pool.Key.Normalize owns
// it. Field paths are the body's JSON names ("env", "metadata", "labels",
// "annotations", "spec", "managed_fields", "ttl_seconds", "claim_ref",
// "on_timeout"; "object" for the bound on labels, annotations and spec
// together). ClaimStatus is the node's status for them.
func (r *ClaimRequest) Validate() field.ErrorList {
	errs := validateEnv(r.Env, field.NewPath("env"))
	errs = append(errs, validateMetadata(r.Metadata, field.NewPath("metadata"))...)
	errs = append(errs, r.Object.Validate()...)
	if r.TTLSeconds < 0 {
		errs = append(errs, field.Invalid(field.NewPath("ttl_seconds"), r.TTLSeconds, "must not be negative"))
	}
	errs = append(errs, validateClaimRef(r.ClaimRef, field.NewPath("claim_ref"))...)
	errs = append(errs, r.Egress.Validate(field.NewPath("egress"))...)
	return append(errs, r.Lifecycle.Validate()...)
}

// Validate checks a snapshot claim against the rules it shares with a
// claim (ClaimRequest.Validate): metadata, ttl_seconds, claim_ref,
// on_timeout.
func (r *SnapshotClaimRequest) Validate() field.ErrorList {
	errs := validateMetadata(r.Metadata, field.NewPath("metadata"))
	if r.TTLSeconds < 0 {
		errs = append(errs, field.Invalid(field.NewPath("ttl_seconds"), r.TTLSeconds, "must not be negative"))
	}
	errs = append(errs, validateClaimRef(r.ClaimRef, field.NewPath("claim_ref"))...)
	return append(errs, r.Lifecycle.Validate()...)
}

// Validate checks l's on_timeout (empty, OnTimeoutKill or OnTimeoutPause).
func (l *Lifecycle) Validate() field.ErrorList {
	switch l.OnTimeout {
	case "", OnTimeoutKill, OnTimeoutPause:
		return nil
	}
	return field.ErrorList{field.NotSupported(field.NewPath("on_timeout"), l.OnTimeout, []string{OnTimeoutKill, OnTimeoutPause})}
}

// Validate checks what a claim (or PUT .../labels) records of a
// Kubernetes object: labels and annotations as Kubernetes validates them,
// the bounds (MaxObjectBytes, MaxManagedFieldsBytes) and the JSON shapes
// of spec (an object) and managed_fields (an array).
func (o *Object) Validate() field.ErrorList {
	errs := metav1validation.ValidateLabels(o.Labels, field.NewPath("labels"))
	errs = append(errs, apivalidation.ValidateAnnotations(o.Annotations, field.NewPath("annotations"))...)
	if n := o.Bytes(); n > MaxObjectBytes {
		errs = append(errs, field.TooLong(field.NewPath("object"), n, MaxObjectBytes))
	}
	if n := len(o.ManagedFields); n > MaxManagedFieldsBytes {
		errs = append(errs, field.TooLong(field.NewPath("managed_fields"), n, MaxManagedFieldsBytes))
	}
	for _, part := range []struct {
		raw        []byte
		name, kind string
		open       byte
	}{{o.Spec, "spec", "object", '{'}, {o.ManagedFields, "managed_fields", "array", '['}} {
		t := bytes.TrimSpace(part.raw)
		if len(t) > 0 && string(t) != "null" && t[0] != part.open {
			errs = append(errs, field.Invalid(field.NewPath(part.name), "", "must be a JSON "+part.kind))
		}
	}
	return errs
}

// validateEnv checks an env's bounds and each name (first breach of each
// kind, in name order).
func validateEnv(env map[string]string, p *field.Path) field.ErrorList {
	errs := validateMapBounds(env, p, MaxEnvVars, MaxEnvBytes)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		switch {
		case k == "":
			errs = append(errs, field.Required(p.Key(""), "a variable needs a name"))
		case !utf8.ValidString(k) || strings.ContainsRune(k, '=') || strings.IndexFunc(k, unicode.IsControl) >= 0:
			errs = append(errs, field.Invalid(p.Key(truncate(k, 64)), truncate(k, 64), "a name is valid UTF-8 without '=' or a control character"))
		case strings.ContainsRune(env[k], 0):
			errs = append(errs, field.Invalid(p.Key(truncate(k, 64)), "", "a value holds no NUL byte"))
		default:
			continue
		}
		break
	}
	return errs
}

// validateMetadata checks a claim's metadata: its bounds and no empty key.
func validateMetadata(m map[string]string, p *field.Path) field.ErrorList {
	errs := validateMapBounds(m, p, MaxMetadataKeys, MaxMetadataBytes)
	if _, ok := m[""]; ok {
		errs = append(errs, field.Invalid(p.Key(""), "", "a key is not empty"))
	}
	return errs
}

// validateMapBounds checks a map's bounds (env, metadata): at most
// maxKeys keys (TooMany) and maxBytes of keys and values (MetadataBytes,
// TooLong) — the breaches ClaimStatus answers 413.
func validateMapBounds(m map[string]string, p *field.Path, maxKeys, maxBytes int) field.ErrorList {
	var errs field.ErrorList
	if len(m) > maxKeys {
		errs = append(errs, field.TooMany(p, len(m), maxKeys))
	}
	if n := MetadataBytes(m); n > maxBytes {
		errs = append(errs, field.TooLong(p, n, maxBytes))
	}
	return errs
}

// validateClaimRef checks a claim ref: empty, or "<namespace>/<name>".
func validateClaimRef(ref string, p *field.Path) field.ErrorList {
	if ref == "" {
		return nil
	}
	ns, name, ok := strings.Cut(ref, "/")
	if !ok || ns == "" || name == "" || len(ref) > MaxClaimRefBytes || strings.IndexFunc(ref, unicode.IsControl) >= 0 {
		return field.ErrorList{field.Invalid(p, truncate(ref, 64), "is not <namespace>/<name>")}
	}
	return nil
}

// ClaimStatus is the node's answer to a claim that Validate refuses: 413
// when one of errs passes a bound (field.ErrorTypeTooLong or TooMany),
// else 400.
func ClaimStatus(errs field.ErrorList) int {
	for _, e := range errs {
		if e.Type == field.ErrorTypeTooLong || e.Type == field.ErrorTypeTooMany {
			return http.StatusRequestEntityTooLarge
		}
	}
	return http.StatusBadRequest
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
