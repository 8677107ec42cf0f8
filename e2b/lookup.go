package e2b

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/hearthvm/hearth/fleet"
	"github.com/hearthvm/hearth/nodeapi"
)

// namespaceOfRef is the namespace part of a claim ref ("" without one).
func namespaceOfRef(ref string) string {
	ns, _, ok := strings.Cut(ref, "/")
	if !ok {
		return ""
	}
	return ns
}

// visible reports whether an API key of namespace ns sees s: s is in ns
// and e2b's (nodeapi.Lifecycle.E2B: every e2b create, its fork children
// and snapshot clones, and a Kubernetes-created sandbox whose object
// carried sandbox.LabelE2B "true" when it was created). Its labels do
// not count: `patch sandboxes` would otherwise hand anyone's sandbox, and
// its token, to a namespace's e2b key.
func visible(ns string, s nodeapi.Sandbox) bool {
	return namespaceOfRef(s.ClaimRef) == ns && s.E2B
}

// errNotVisible is a lookup's not-found for a sandbox that exists but is
// not the caller's to see: never cached as a miss (another key may see it).
var errNotVisible = fmt.Errorf("%w (not visible to this API key)", fleet.ErrNotFound)

// lookup resolves a client-supplied sandbox id (raw or rendered) through
// the fleet, live, for the control plane: only the sandboxes the request's
// API key sees (visible) are found.
//
// A not-found is remembered for missTTL, so a burst of requests for an
// unknown id costs one fleet lookup, not one each.
func (g *gateway) lookup(ctx context.Context, given string) (nodeapi.Sandbox, error) {
	ns := g.namespaceOf(ctx)
	return g.lookupBy(ctx, given, g.fleet.LiveByID, true, func(s nodeapi.Sandbox) bool { return visible(ns, s) })
}

// lookupKnown is lookup for the data plane, where no credential can be
// checked before the sandbox's record is found: each spelling of given is
// asked of the node the fleet's index or view names, never of every node
// (Fleet.KnownByID), and the fleet's list is not scanned for other
// spellings.
// A sandbox token opens its sandbox whatever its labels, in any of the
// keys' namespaces.
func (g *gateway) lookupKnown(ctx context.Context, given string) (nodeapi.Sandbox, error) {
	return g.lookupBy(ctx, given, g.fleet.KnownByID, false, func(s nodeapi.Sandbox) bool { return g.namespaces[namespaceOfRef(s.ClaimRef)] })
}

// lookupBy is lookup with find asking for one claim id and sees telling
// which records the caller may see; scan also tries the ids of the
// fleet's list that given may spell.
func (g *gateway) lookupBy(ctx context.Context, given string, find func(context.Context, string) (nodeapi.Sandbox, error), scan bool, sees func(nodeapi.Sandbox) bool) (nodeapi.Sandbox, error) {
	given = strings.TrimSpace(given)
	if given == "" || len(given) > maxIDLen {
		return nodeapi.Sandbox{}, fleet.ErrNotFound
	}
	if g.missed(given) {
		return nodeapi.Sandbox{}, fleet.ErrNotFound
	}
	s, err := g.lookupFleet(ctx, given, find, scan, sees)
	if errors.Is(err, fleet.ErrNotFound) && !errors.Is(err, fleet.ErrIncomplete) && !errors.Is(err, errNotVisible) {
		g.miss(given)
	}
	return s, err
}

// maxIDLen bounds a client-supplied sandbox id (the node's are ~20 bytes).
const maxIDLen = 128

func (g *gateway) lookupFleet(ctx context.Context, given string, find func(context.Context, string) (nodeapi.Sandbox, error), scan bool, sees func(nodeapi.Sandbox) bool) (nodeapi.Sandbox, error) {
	tried := map[string]bool{}
	hidden := false
	try := func(id string) (nodeapi.Sandbox, bool, error) {
		tried[id] = true
		s, err := find(ctx, id)
		switch {
		case err == nil:
			if !MatchID(s.ID, given) {
				return s, false, nil
			}
			if !sees(s) {
				hidden = true
				return s, false, nil
			}
			return s, true, nil
		case errors.Is(err, fleet.ErrNotFound):
			return s, false, nil
		}
		return s, false, err
	}
	for _, c := range idCandidates(given) {
		if s, ok, err := try(c); ok || err != nil {
			return s, err
		}
	}
	notFound := func() error {
		if hidden {
			return errNotVisible
		}
		return fleet.ErrNotFound
	}
	if !scan {
		return nodeapi.Sandbox{}, notFound()
	}
	// An id in a spelling we cannot invert: scan the fleet's list.
	all, err := g.fleet.List(ctx)
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	for _, l := range all {
		if !tried[l.ID] && MatchID(l.ID, given) {
			if s, ok, err := try(l.ID); ok || err != nil {
				return s, err
			}
		}
	}
	return nodeapi.Sandbox{}, notFound()
}

func (g *gateway) forget(s nodeapi.Sandbox) { g.dropRoute(s.ID) }
