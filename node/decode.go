package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	sandboxapi "github.com/hearthvm/hearth/sandbox"
)

// Request limits.
const (
	maxBodyBytes    = 1 << 20
	maxTemplateLen  = 1024
	maxNameLen      = 253
	maxWarmPerPool  = 100000
	maxPoolsPerNode = 4096
)

// claimInput is a validated claim request.
type claimInput struct {
	key      pool.Key
	ttl      int64
	ref      string
	env      map[string]string
	metadata map[string]string
	object   nodeapi.Object
	life     nodeapi.Lifecycle
	egress   *egress.Policy
}

func badRequest(format string, args ...any) error {
	return errorf(http.StatusBadRequest, format, args...)
}

// decodeBody decodes exactly one JSON value from b into v. An empty body
// decodes to v's zero value when allowEmpty is set.
func decodeBody(b []byte, v any, allowEmpty bool) error {
	if len(bytes.TrimSpace(b)) == 0 {
		if allowEmpty {
			return nil
		}
		return badRequest("request body is empty; want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return badRequest("malformed JSON body: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return badRequest("malformed JSON body: trailing data after the object")
	}
	return nil
}

// normalizeKey validates the template and normalizes the pool axes
// (pool.Key.Normalize).
func normalizeKey(template, net, size string) (pool.Key, error) {
	if template == "" {
		return pool.Key{}, badRequest("template is required")
	}
	if len(template) > maxTemplateLen || strings.IndexFunc(template, unicode.IsControl) >= 0 {
		return pool.Key{}, badRequest("template %.64q is not a valid image reference", template)
	}
	k, err := pool.Key{Template: template, Net: net, Size: size}.Normalize()
	if err != nil {
		return pool.Key{}, badRequest("%v", err)
	}
	return k, nil
}

func checkTTL(ttl int64) error {
	if ttl < 0 {
		return badRequest("ttl_seconds must not be negative")
	}
	return nil
}

// parseClaim decodes and validates the body of POST /v1/claim.
func parseClaim(b []byte) (claimInput, error) {
	var req nodeapi.ClaimRequest
	if err := decodeBody(b, &req, false); err != nil {
		return claimInput{}, err
	}
	k, err := normalizeKey(req.Template, req.Net, req.Size)
	if err != nil {
		return claimInput{}, err
	}
	if errs := req.Validate(); len(errs) > 0 {
		return claimInput{}, errorf(nodeapi.ClaimStatus(errs), "%v", errs.ToAggregate())
	}
	normalizeObject(&req.Object)
	life := req.Lifecycle
	life.E2B = claimedForE2B(req.Object)
	return claimInput{key: k, ttl: req.TTLSeconds, ref: req.ClaimRef, env: req.Env, metadata: req.Metadata, object: req.Object, life: life, egress: req.Egress}, nil
}

// claimedForE2B is a claim's e2b visibility (nodeapi.Lifecycle.E2B),
// decided from its object alone: the label sandboxapi.LabelE2B "true".
// Whatever E2B a request asks for is ignored.
func claimedForE2B(o nodeapi.Object) bool { return o.Labels[sandboxapi.LabelE2B] == "true" }

// normalizeObject trims the opaque parts of an object that Object.Validate
// passed and drops a "null" one.
func normalizeObject(o *nodeapi.Object) {
	for _, raw := range []*json.RawMessage{&o.Spec, &o.ManagedFields} {
		if t := bytes.TrimSpace(*raw); len(t) == 0 || string(t) == "null" {
			*raw = nil
		} else {
			*raw = t
		}
	}
}

// parseLabels decodes and checks the body of PUT /v1/sandboxes/{id}/labels.
func parseLabels(b []byte) (nodeapi.LabelsRequest, error) {
	var req nodeapi.LabelsRequest
	if err := decodeBody(b, &req, false); err != nil {
		return req, err
	}
	o := nodeapi.Object{Labels: req.Labels, Annotations: req.Annotations, ManagedFields: req.ManagedFields}
	if errs := o.Validate(); len(errs) > 0 {
		return req, errorf(nodeapi.ClaimStatus(errs), "%v", errs.ToAggregate())
	}
	normalizeObject(&o)
	req.ManagedFields = o.ManagedFields
	if req.Version < 0 {
		return req, badRequest("version must not be negative")
	}
	return req, nil
}

// parseSnapshotClaim decodes the body of POST /v1/snapshots/{id}/claim.
func parseSnapshotClaim(b []byte) (nodeapi.SnapshotClaimRequest, error) {
	var req nodeapi.SnapshotClaimRequest
	if err := decodeBody(b, &req, true); err != nil {
		return req, err
	}
	if errs := req.Validate(); len(errs) > 0 {
		return req, errorf(nodeapi.ClaimStatus(errs), "%v", errs.ToAggregate())
	}
	return req, nil
}

// parsePools decodes and validates the body of PUT /v1/pools: the whole
// set, each key once (after normalization), no negative targets.
func parsePools(b []byte) ([]poolTarget, error) {
	var raw struct {
		Pools *[]nodeapi.PoolSpec `json:"pools"`
	}
	if err := decodeBody(b, &raw, false); err != nil {
		return nil, err
	}
	if raw.Pools == nil {
		return nil, badRequest(`"pools" is required (an empty list drains every pool)`)
	}
	if len(*raw.Pools) > maxPoolsPerNode {
		return nil, badRequest("too many pools (%d > %d)", len(*raw.Pools), maxPoolsPerNode)
	}
	seen := map[pool.Key]bool{}
	out := make([]poolTarget, 0, len(*raw.Pools))
	for i, p := range *raw.Pools {
		k, err := normalizeKey(p.Template, p.Net, p.Size)
		if err != nil {
			return nil, badRequest("pools[%d]: %v", i, err)
		}
		if p.Warm < 0 || p.Warm > maxWarmPerPool {
			return nil, badRequest("pools[%d]: warm %d is out of range [0, %d]", i, p.Warm, maxWarmPerPool)
		}
		if seen[k] {
			return nil, badRequest("pools[%d]: duplicate pool (%s)", i, k)
		}
		seen[k] = true
		if errs := p.Egress.Validate(field.NewPath("pools").Index(i).Child("egress")); len(errs) > 0 {
			return nil, badRequest("%v", errs.ToAggregate())
		}
		out = append(out, poolTarget{Template: k.Template, Net: k.Net, Size: k.Size, Warm: p.Warm, Egress: p.Egress})
	}
	return out, nil
}

func parseFork(b []byte) (count int, ttl int64, err error) {
	var req nodeapi.ForkRequest
	if err := decodeBody(b, &req, true); err != nil {
		return 0, 0, err
	}
	if req.Count == 0 {
		req.Count = 1
	}
	if req.Count < 0 || req.Count > MaxForkCount {
		return 0, 0, badRequest("count %d is out of range [1, %d]", req.Count, MaxForkCount)
	}
	if err := checkTTL(req.TTLSeconds); err != nil {
		return 0, 0, err
	}
	return req.Count, req.TTLSeconds, nil
}

// parseSnapshot validates a snapshot request; keep is nil when unset.
func parseSnapshot(b []byte) (name string, keep *bool, err error) {
	var req nodeapi.SnapshotRequest
	if err := decodeBody(b, &req, true); err != nil {
		return "", nil, err
	}
	if len(req.Name) > maxNameLen || strings.IndexFunc(req.Name, unicode.IsControl) >= 0 {
		return "", nil, badRequest("snapshot name %.64q is invalid", req.Name)
	}
	return req.Name, req.Keep, nil
}

func parseTTLBody(b []byte, allowEmpty bool) (int64, error) {
	var req struct {
		TTLSeconds *int64 `json:"ttl_seconds"`
	}
	if err := decodeBody(b, &req, allowEmpty); err != nil {
		return 0, err
	}
	if req.TTLSeconds == nil {
		if !allowEmpty {
			return 0, badRequest("ttl_seconds is required")
		}
		return 0, nil
	}
	return *req.TTLSeconds, checkTTL(*req.TTLSeconds)
}
