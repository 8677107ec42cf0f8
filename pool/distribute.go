package pool

import (
	"errors"
	"fmt"
	"sort"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"

	"github.com/hearthvm/hearth/egress"
)

// This file is the pure core of the warm-pool controller (docs/API.md#warm-capacity): from the
// SandboxWarmPools, what their templates resolve to and the schedulable
// nodes, it decides every node's whole set of warm targets and what each
// pool's status should say. No I/O, no clock; the loop in pool/controller does
// the reads and the PUTs.

// Distribute spreads replicas over nodes: the nodes are taken in name order,
// each gets replicas/len(nodes) and the first replicas%len(nodes) get one
// more. The sum is exactly max(replicas, 0) and the spread is at most 1.
// With no nodes there are no targets (nil).
func Distribute(replicas int32, nodes []string) map[string]int32 {
	if len(nodes) == 0 {
		return nil
	}
	sorted := append([]string(nil), nodes...)
	sort.Strings(sorted)
	out := make(map[string]int32, len(sorted))
	distributeSorted(replicas, sorted, func(i int, w int32) { out[sorted[i]] += w })
	return out
}

// distributeSorted calls add(i, warm) for each of the already sorted nodes.
func distributeSorted(replicas int32, sorted []string, add func(i int, w int32)) {
	total := max(replicas, 0)
	n := int32(len(sorted))
	base, rem := total/n, total%n
	for i := range sorted {
		w := base
		if int32(i) < rem {
			w++
		}
		add(i, w)
	}
}

// Ref names a namespaced object (a SandboxWarmPool or a SandboxTemplate).
type Ref struct {
	Namespace string
	Name      string
}

func (r Ref) String() string { return r.Namespace + "/" + r.Name }

// WarmPool is what the controller reads from one SandboxWarmPool.
type WarmPool struct {
	Ref Ref
	// Replicas is spec.replicas (nil already defaulted to 1 by the caller).
	Replicas int32
	// Template is spec.sandboxTemplateRef.name, in the pool's namespace.
	Template string
}

// ErrTemplateNotFound marks a template read that proved the template does
// not exist. Such a pool provisions nothing: its key is drained and its
// status reports 0.
var ErrTemplateNotFound = errors.New("sandbox template not found")

// ErrInvalidEgress marks a template whose egress policy (spec.networkPolicy,
// networkPolicyManagement) does not translate (egress.FromTemplate): its
// pools provision nothing rather than warm VMs without the policy it asked
// for.
var ErrInvalidEgress = errors.New("invalid egress policy")

// ErrEgressConflict marks a template whose key another template already
// provisions with a different egress policy (MakePlan): a key's warm VMs
// carry one policy, so the template's pools provision nothing.
var ErrEgressConflict = errors.New("egress policy conflict")

// TemplateRead is the outcome of reading one SandboxTemplate: its key and
// the egress policy of that key's warm VMs, or an error. An error wrapping
// ErrTemplateNotFound, ErrInvalidKey or ErrInvalidEgress is definitive (the
// pool is drained); any other error is transient and the pool keeps the
// key and policy it last resolved to.
type TemplateRead struct {
	Key Key
	// Egress is the policy every sandbox of the key's pools is held to
	// (nil: none, e.g. an Unmanaged template or the none lane).
	Egress *egress.Policy
	// Created is the template's creationTimestamp: of two templates with
	// one key and different policies, the older keeps the key.
	Created time.Time
	Err     error
}

// Target is one warm target on one node.
type Target struct {
	Key  Key
	Warm int32
}

// Plan is the controller's decision for one tick.
type Plan struct {
	// Keys holds the key each provisioning pool resolved to (or kept from
	// the last tick after a transient error). A pool absent here provisions
	// nothing and reports 0.
	Keys map[Ref]Key
	// Targets is every node's whole target set, sorted by key, with warm 0
	// entries kept; keys shared by several pools are summed into one entry.
	Targets map[string][]Target
	// Egress is the egress policy of each provisioned key that has one
	// (nodeapi.PoolSpec.Egress).
	Egress map[Key]*egress.Policy
	// Problems explains, per pool, why it is absent from Keys or runs on a
	// last known key.
	Problems map[Ref]error
}

// IsDefinitive reports whether a template read error is final (the template
// is gone or does not derive a key) rather than transient.
func IsDefinitive(err error) bool {
	return errors.Is(err, ErrTemplateNotFound) || errors.Is(err, ErrInvalidKey) ||
		errors.Is(err, ErrInvalidEgress) || errors.Is(err, ErrEgressConflict)
}

// MakePlan resolves every pool to a key and spreads its replicas over nodes.
//
//   - templates maps a template Ref to its read; a template missing from the
//     map counts as not found.
//   - last is the previous plan: a pool whose template read failed
//     transiently keeps its last key, targets and policy (it is not drained).
//   - A pool with an empty template name, a missing template or a template
//     that derives no key or no valid egress policy is left out: its key
//     drains on every node unless another pool provisions it.
//   - One key, one policy: when the templates of several pools resolve to
//     one key with different egress policies, the oldest template (by
//     Created, then namespace/name) holds the key with its policy, and the
//     pools of every other one provision nothing (ErrEgressConflict): a
//     sandbox claimed from a key is never held to another template's
//     looser policy, and a new template cannot change the policy of
//     sandboxes an older one provisions.
func MakePlan(pools []WarmPool, templates map[Ref]TemplateRead, last Plan, nodes []string) Plan {
	p := Plan{Keys: map[Ref]Key{}, Targets: map[string][]Target{}, Egress: map[Key]*egress.Policy{}, Problems: map[Ref]error{}}
	holders := egressHolders(pools, templates)
	sorted := append([]string(nil), nodes...)
	sort.Strings(sorted)
	sum := make([]map[Key]int32, len(sorted))
	for i := range sorted {
		sum[i] = map[Key]int32{}
	}
	for _, wp := range pools {
		key, pol, err := resolve(wp, templates, last)
		if key != nil {
			if h, ok := holders[*key]; ok && !apiequality.Semantic.DeepEqual(h.read.Egress, pol) {
				key, err = nil, fmt.Errorf("%w: SandboxTemplate %s/%s provisions %s with another egress policy than SandboxTemplate %s (the older holds the key)",
					ErrEgressConflict, wp.Ref.Namespace, wp.Template, *key, h.ref)
			}
		}
		if err != nil {
			p.Problems[wp.Ref] = err
		}
		if key == nil {
			continue
		}
		p.Keys[wp.Ref] = *key
		if pol != nil {
			p.Egress[*key] = pol
		}
		if len(sorted) > 0 {
			k := *key
			distributeSorted(wp.Replicas, sorted, func(i int, w int32) { sum[i][k] += w })
		}
	}
	for i, byKey := range sum {
		n := sorted[i]
		ts := make([]Target, 0, len(byKey))
		for k, w := range byKey {
			ts = append(ts, Target{Key: k, Warm: w})
		}
		sort.Slice(ts, func(i, j int) bool { return keyLess(ts[i].Key, ts[j].Key) })
		p.Targets[n] = ts
	}
	return p
}

type holder struct {
	ref  Ref
	read TemplateRead
}

// egressHolders picks, per key, the template whose policy the key's warm
// VMs carry: the oldest (then the least namespace/name) of the templates
// the pools name that read without error.
func egressHolders(pools []WarmPool, templates map[Ref]TemplateRead) map[Key]holder {
	out := map[Key]holder{}
	for _, wp := range pools {
		ref := Ref{Namespace: wp.Ref.Namespace, Name: wp.Template}
		tr, ok := templates[ref]
		if wp.Template == "" || !ok || tr.Err != nil {
			continue
		}
		h, ok := out[tr.Key]
		if !ok || tr.Created.Before(h.read.Created) || (tr.Created.Equal(h.read.Created) && ref.String() < h.ref.String()) {
			out[tr.Key] = holder{ref: ref, read: tr}
		}
	}
	return out
}

// resolve returns the pool's key (nil when it provisions nothing), its
// egress policy and the problem, if any.
func resolve(wp WarmPool, templates map[Ref]TemplateRead, last Plan) (*Key, *egress.Policy, error) {
	if wp.Template == "" {
		return nil, nil, errors.New("spec.sandboxTemplateRef.name is required")
	}
	tr, ok := templates[Ref{Namespace: wp.Ref.Namespace, Name: wp.Template}]
	if !ok {
		return nil, nil, ErrTemplateNotFound
	}
	if tr.Err == nil {
		k := tr.Key
		return &k, tr.Egress, nil
	}
	if IsDefinitive(tr.Err) {
		return nil, nil, tr.Err
	}
	if k, ok := last.Keys[wp.Ref]; ok {
		return &k, last.Egress[k], tr.Err
	}
	return nil, nil, tr.Err
}

func keyLess(a, b Key) bool {
	if a.Template != b.Template {
		return a.Template < b.Template
	}
	if a.Net != b.Net {
		return a.Net < b.Net
	}
	return a.Size < b.Size
}

// Observed sums, per pool, the warm microVMs the nodes hold for its key
// (exact key match). warm maps node → key → warm count. Pools sharing a key
// each report the shared total. A pool absent from keys reports 0.
func Observed(pools []WarmPool, keys map[Ref]Key, warm map[string]map[Key]int32) map[Ref]int32 {
	out := make(map[Ref]int32, len(pools))
	for _, wp := range pools {
		k, ok := keys[wp.Ref]
		if !ok {
			out[wp.Ref] = 0
			continue
		}
		var total int32
		for _, byKey := range warm {
			total += byKey[k]
		}
		out[wp.Ref] = total
	}
	return out
}
