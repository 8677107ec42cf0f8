package e2b

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/hearthvm/hearth/egress"
	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/sandbox"
)

// newClaimName returns "e2b-" and 10 random lowercase alphanumerics.
func newClaimName() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "e2b-" + string(b)
}

type createRequest struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	// AutoPause (the SDK's lifecycle.onTimeout "pause") pauses the
	// sandbox at its timeout instead of killing it.
	AutoPause *bool `json:"autoPause"`
	// AutoPauseMemory false makes that pause one without memory (file
	// system only).
	AutoPauseMemory *bool `json:"autoPauseMemory"`
	// AutoResume resumes an auto-paused sandbox on its next data-plane
	// request.
	AutoResume *struct {
		Enabled bool `json:"enabled"`
	} `json:"autoResume"`
	// Network.AllowPublicTraffic false opens the sandbox's ports (other
	// than envd's) only to its traffic access token; absent or true, they
	// are public, as on e2b. Network.AllowOut and DenyOut, with
	// AllowInternetAccess, are the sandbox's egress policy (egressOf).
	Network *struct {
		AllowPublicTraffic *bool    `json:"allowPublicTraffic"`
		AllowOut           []string `json:"allowOut"`
		DenyOut            []string `json:"denyOut"`
	} `json:"network"`
}

// egressOf is a create's egress policy and whether it needs the egress
// lane (docs/API.md#egress-policy): egress.FromE2B of allow_internet_access
// and network.{allowOut,denyOut}. allow_internet_access true alone is the
// egress lane unfiltered (nil policy); false with no lists stays the none
// lane (no network at all, which denies everything already); any list is
// the egress lane filtered by the policy. Errors name the request's field
// (network.allowOut[i], ...): a 400 before any node is asked.
func egressOf(req createRequest) (p *egress.Policy, lane bool, errs field.ErrorList) {
	in := egress.E2B{AllowInternetAccess: req.AllowInternetAccess}
	if req.Network != nil {
		in.AllowOut, in.DenyOut = req.Network.AllowOut, req.Network.DenyOut
	}
	allow := req.AllowInternetAccess != nil && *req.AllowInternetAccess
	if len(in.AllowOut) == 0 && len(in.DenyOut) == 0 {
		return nil, allow, nil
	}
	// Bounded before translation: a body's worth of bad entries would be
	// as many errors, an answer many times the request's size.
	if n := len(in.AllowOut) + len(in.DenyOut); n > egress.MaxRules {
		return nil, false, field.ErrorList{field.TooMany(field.NewPath("network"), n, egress.MaxRules)}
	}
	p, errs = egress.FromE2B(in)
	if len(errs) > 0 {
		return nil, false, errs
	}
	return p, true, nil
}

// lifecycleOf is the node lifecycle a create asks for.
func lifecycleOf(req createRequest) (nodeapi.Lifecycle, error) {
	var l nodeapi.Lifecycle
	if req.AutoPause != nil && *req.AutoPause {
		l.OnTimeout = nodeapi.OnTimeoutPause
	}
	if req.AutoPauseMemory != nil && !*req.AutoPauseMemory && l.OnTimeout == nodeapi.OnTimeoutPause {
		l.PauseWithoutMemory = true
	}
	if req.AutoResume != nil && req.AutoResume.Enabled {
		if l.OnTimeout != nodeapi.OnTimeoutPause {
			return l, errors.New("autoResume can only be enabled with autoPause")
		}
		if l.PauseWithoutMemory {
			return l, errors.New("autoResume cannot be enabled with autoPauseMemory false: a pause without memory is resumed by connect")
		}
		l.AutoResume = true
	}
	// Public ports are e2b's default, and only an e2b create's.
	if req.Network != nil && req.Network.AllowPublicTraffic != nil && !*req.Network.AllowPublicTraffic {
		l.PrivateTraffic = true
	} else {
		l.PublicTraffic = true
	}
	return l, nil
}

// maxTemplateIDLen bounds a create's templateID (the body as a whole is
// bounded by maxBodyBytes).
const maxTemplateIDLen = 512

// validateCreate checks a create's templateID; the claim it becomes is
// checked by nodeapi.ClaimRequest.Validate (docs/API.md#claim-rules).
func validateCreate(req createRequest) error {
	id := req.TemplateID
	if strings.TrimSpace(id) == "" {
		return errors.New("templateID is required")
	}
	if len(id) > maxTemplateIDLen || strings.IndexFunc(id, unicode.IsControl) >= 0 || !utf8.ValidString(id) {
		return fmt.Errorf("templateID %.64q is not a valid template or snapshot id", id)
	}
	return nil
}

func (g *gateway) handleCreate(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if err := validateCreate(req); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	life, err := lifecycleOf(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	policy, internet, errs := egressOf(req)
	if len(errs) > 0 {
		writeError(w, http.StatusBadRequest, "%v", errs.ToAggregate())
		return
	}
	if policy != nil && isSnapshotID(req.TemplateID) {
		writeError(w, http.StatusBadRequest, "%v", errSnapshotEgress)
		return
	}
	if len(req.EnvVars) > 0 && isSnapshotID(req.TemplateID) {
		writeError(w, http.StatusBadRequest, "%v", errSnapshotEnv)
		return
	}
	// The claim, checked against the claim rules before any node is asked
	// (lease bounds, templates): every breach is e2b's 400. The key's
	// namespace; labelled for e2b, which makes the node record the claim
	// as e2b's (visible; nodeapi.Lifecycle.E2B), as its fork children and
	// snapshot clones are. The label stays for display.
	freq := nodeapi.ClaimFor(pool.Key{}, g.namespaceOf(r.Context())+"/"+newClaimName())
	freq.Env, freq.Metadata, freq.Lifecycle, freq.Egress = req.EnvVars, req.Metadata, life, policy
	freq.Object = nodeapi.Object{Labels: map[string]string{sandbox.LabelE2B: "true"}}
	if errs := freq.Validate(); len(errs) > 0 {
		for _, e := range errs { // the field as the request names it
			if e.Field == "env" || strings.HasPrefix(e.Field, "env[") {
				e.Field = "envVars" + strings.TrimPrefix(e.Field, "env")
			}
		}
		writeError(w, http.StatusBadRequest, "%v", errs.ToAggregate())
		return
	}
	ttl, ok := g.leaseSeconds(r.Context(), req.Timeout)
	if !ok {
		writeError(w, http.StatusBadRequest, "timeout must be >= 0, got %d", *req.Timeout)
		return
	}
	if g.tooLong(w, r, req.Timeout) {
		return
	}
	freq.TTLSeconds = ttl
	if !isSnapshotID(req.TemplateID) { // a snapshot's key is its clone's
		key, err := pool.KeyForE2B(g.template(r.Context(), req.TemplateID), internet)
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		freq.Template, freq.Net, freq.Size = key.Template, key.Net, key.Size
	}
	// The claim runs to its outcome even if the client goes away, and what
	// a client gone will never learn of is released (fleet.Detached).
	sbs, err := fleet.Detached(r.Context(), g.fleet, func(ctx context.Context) ([]nodeapi.Sandbox, error) {
		s, err := g.claim(ctx, req.TemplateID, freq)
		if err != nil {
			return nil, err
		}
		return []nodeapi.Sandbox{s}, nil
	})
	var unknown *unknownTemplate
	switch {
	case errors.Is(err, fleet.ErrAbandoned):
		return
	case errors.As(err, &unknown):
		writeError(w, http.StatusNotFound, "%v", unknown)
		return
	case errors.Is(err, errSnapshotEgress), errors.Is(err, errSnapshotEnv):
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	case err != nil:
		fail(w, err, "template "+strconv.Quote(req.TemplateID))
		return
	}
	g.unmiss(sbs[0])
	writeJSON(w, http.StatusCreated, g.sandboxOf(sbs[0]))
}

// unknownTemplate is a create's templateID that no node has a pool of, no
// alias names and no snapshot the key sees goes by (a 404).
type unknownTemplate struct{ id, known string }

func (e *unknownTemplate) Error() string {
	return fmt.Sprintf("template %q not found: %s", e.id, e.known)
}

// claim claims a create's sandbox: a clone of the snapshot id names, else
// one of req.Key()'s pool, else a clone of the snapshot named id.
func (g *gateway) claim(ctx context.Context, id string, req nodeapi.ClaimRequest) (nodeapi.Sandbox, error) {
	if isSnapshotID(id) {
		return g.claimSnapshot(ctx, id, req)
	}
	s, err := g.fleet.Claim(ctx, req)
	var noCap *fleet.ErrNoWarmCapacity
	if !errors.As(err, &noCap) || g.isPool(ctx, req.Key()) {
		return s, err
	}
	// Not a template any node serves: a snapshot may go by its name.
	snap, ok := g.snapshotNamed(ctx, id)
	if !ok {
		return nodeapi.Sandbox{}, &unknownTemplate{id: id, known: g.knownTemplates(ctx)}
	}
	return g.cloneSnapshot(ctx, snap, req)
}

// releaseOrphans releases sandboxes claimed for a create that fails after
// the claim, on a context of their own.
func (g *gateway) releaseOrphans(ctx context.Context, sbs ...nodeapi.Sandbox) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fleet.ClaimTimeout)
	defer cancel()
	for _, s := range sbs {
		_ = g.fleet.Release(ctx, s)
	}
}
