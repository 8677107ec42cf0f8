package fleet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/hearthvm/hearth/inventory"
	"github.com/hearthvm/hearth/nodeapi"
)

// Locator finds sandboxes in a live fleet view, as of its last applied
// change (*fleetview.Live is one: its store, fed by the nodes' change
// streams). It is what the fleet reads a sandbox's node from, so that a
// lookup never waits for an inventory.View to be rebuilt.
type Locator interface {
	// Current returns the entry that speaks for name ("<ns>/<name>").
	Current(name string) (inventory.Versioned, bool)
	// CurrentByID returns the entry of a claim id.
	CurrentByID(id string) (inventory.Versioned, bool)
	// List returns the entries keep accepts (nil: every one).
	List(keep func(inventory.Item) bool) ([]inventory.Versioned, uint64)
}

// ByRef finds the sandbox recorded under "<ns>/<name>".
func (f *NodeFleet) ByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error) {
	return f.lookup(ctx, ref, true)
}

// ByID finds a sandbox by claim id.
func (f *NodeFleet) ByID(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	return f.lookup(ctx, id, false)
}

// LiveByRef asks the nodes (the indexed one first, then every node of the
// view) for ref, ignoring the published entries. It answers ErrNotFound
// only when no reachable node holds ref.
func (f *NodeFleet) LiveByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error) {
	if s, ok := f.askIndexed(ctx, ref, true); ok {
		return s, nil
	}
	return f.askAll(ctx, ref, true)
}

// LiveByID is LiveByRef for a claim id.
func (f *NodeFleet) LiveByID(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	if s, ok := f.askIndexed(ctx, id, false); ok {
		return s, nil
	}
	return f.askAll(ctx, id, false)
}

// KnownByID asks the node that the claim-time index, else the view, names
// for sandbox id, and only that node: at most one node call, never a
// fan-out, so an unauthenticated caller naming random ids costs no node
// anything (the e2b gateway's public ports). ErrNotFound when neither
// knows id or that node no longer holds it.
func (f *NodeFleet) KnownByID(ctx context.Context, id string) (nodeapi.Sandbox, error) {
	return f.askKnown(ctx, id, false)
}

// ViewByID is the live view's entry of claim id, read from memory: no
// node call. Its record carries no token (inventory.Item.Sandbox); ok is
// false for an id the view does not hold (yet: a claim this fleet made
// reaches the view through its node's change stream). The e2b gateway
// checks its cached routes against it on every request.
func (f *NodeFleet) ViewByID(id string) (nodeapi.Sandbox, bool) {
	v, ok := f.cfg.View.CurrentByID(id)
	if !ok || v.Entry == nil || v.Node == nil {
		return nodeapi.Sandbox{}, false
	}
	return v.Sandbox(), true
}

// KnownByRef is KnownByID for a claim ref: at most the one node the
// claim-time index, else the view, names; never a fan-out (the e2b
// gateway's router, for a caller with no Kubernetes grant).
func (f *NodeFleet) KnownByRef(ctx context.Context, ref string) (nodeapi.Sandbox, error) {
	if ref == "" {
		return nodeapi.Sandbox{}, ErrNotFound
	}
	return f.askKnown(ctx, ref, true)
}

// Held asks the node that the claim-time index, else the view, names for
// ref whether it still holds it: a name check that costs one node call,
// never a fan-out. A sandbox claimed through another replica and not yet
// published is not seen (see the package doc).
func (f *NodeFleet) Held(ctx context.Context, ref string) (nodeapi.Sandbox, bool) {
	if ref == "" {
		return nodeapi.Sandbox{}, false
	}
	s, err := f.askKnown(ctx, ref, true)
	return s, err == nil
}

// askKnown asks only the node that the claim-time index, else the view,
// names for key (a claim ref or a claim id); ErrNotFound when neither
// knows it.
func (f *NodeFleet) askKnown(ctx context.Context, key string, byRef bool) (nodeapi.Sandbox, error) {
	if s, ok := f.askIndexed(ctx, key, byRef); ok {
		return s, nil
	}
	it, ok := f.find(key, byRef)
	if !ok || it.Node.Address == "" {
		return nodeapi.Sandbox{}, ErrNotFound
	}
	s, err := f.ask(ctx, it.Node.Name, it.Node.Address, key, byRef)
	if err != nil {
		return nodeapi.Sandbox{}, err
	}
	f.index.put(s)
	return s, nil
}

// AllByRef asks every routable node for the sandboxes recorded under ref
// and returns all of them (a node refuses a second claim of one ref, but
// two nodes may each hold one: see the package doc). None is ErrNotFound,
// with ErrIncomplete when some node did not answer.
func (f *NodeFleet) AllByRef(ctx context.Context, ref string) ([]nodeapi.Sandbox, error) {
	var (
		mu     sync.Mutex
		out    []nodeapi.Sandbox
		silent []string
	)
	f.eachNode(ctx, func(ctx context.Context, n inventory.Node) {
		all, err := f.client(n.Name, n.Address).GetByRef(ctx, ref)
		mu.Lock()
		defer mu.Unlock()
		switch err := nodeErr(err); {
		case err == nil:
			for _, s := range all {
				if s.ClaimRef == ref {
					out = append(out, located(s, n.Name, n.Address))
				}
			}
		case !errors.Is(err, ErrNotFound):
			silent = append(silent, n.Name)
		}
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ClaimedAt.Before(out[j].ClaimedAt) })
	if len(out) == 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if len(silent) > 0 {
			sort.Strings(silent)
			return nil, fmt.Errorf("%w; %w: %v", ErrNotFound, ErrIncomplete, silent)
		}
		return nil, ErrNotFound
	}
	return out, nil
}

// lookup returns the holding node's record of key (a claim ref or a claim
// id): the node the claim-time index, else the view, names is asked (one
// call); a key neither knows, or that node no longer holds, is asked of
// every node. The view says which node holds a sandbox; that node's record
// is the truth — spec, managed fields, metadata, version —, so a read on
// any replica, or after a restart, returns what the create stored. Only
// when the named node does not answer is the view's entry returned (what
// the stream or a publish last said of it: no spec, managed fields or
// version).
func (f *NodeFleet) lookup(ctx context.Context, key string, byRef bool) (nodeapi.Sandbox, error) {
	if key == "" {
		return nodeapi.Sandbox{}, ErrNotFound
	}
	if s, ok := f.askIndexed(ctx, key, byRef); ok {
		return s, nil
	}
	if it, ok := f.find(key, byRef); ok && it.Entry.ID != "" {
		if it.Node.Address == "" {
			return it.Sandbox(), nil
		}
		s, err := f.ask(ctx, it.Node.Name, it.Node.Address, key, byRef)
		switch {
		case err == nil:
			f.index.put(s)
			return s, nil
		case !errors.Is(err, ErrNotFound):
			if ctx.Err() != nil {
				return nodeapi.Sandbox{}, ctx.Err()
			}
			return it.Sandbox(), nil
		}
	}
	return f.askAll(ctx, key, byRef)
}

// find looks key (a name, or a claim id) up in the live view.
func (f *NodeFleet) find(key string, byRef bool) (inventory.Item, bool) {
	var v inventory.Versioned
	var ok bool
	if byRef {
		v, ok = f.cfg.View.Current(key)
	} else {
		v, ok = f.cfg.View.CurrentByID(key)
	}
	return v.Item, ok
}

// items returns every entry of the live view, sorted by name then claim id.
func (f *NodeFleet) items() []inventory.Item {
	vs, _ := f.cfg.View.List(nil)
	out := make([]inventory.Item, len(vs))
	for i := range vs {
		out[i] = vs[i].Item
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].Entry, out[j].Entry
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return a.ID < b.ID
	})
	return out
}

// askIndexed asks the node the claim-time index names for key.
func (f *NodeFleet) askIndexed(ctx context.Context, key string, byRef bool) (nodeapi.Sandbox, bool) {
	rec, ok := f.index.get(key, byRef)
	if !ok {
		return nodeapi.Sandbox{}, false
	}
	s, err := f.ask(ctx, rec.Node, rec.NodeAddr, key, byRef)
	if errors.Is(err, ErrNotFound) && !byRef {
		f.index.forget(rec.ClaimRef, rec.ID)
	}
	return s, err == nil
}

// ask asks one node live for key; ErrNotFound when it does not hold it.
// By ref, the newest claim under the name wins.
func (f *NodeFleet) ask(ctx context.Context, nodeName, addr, key string, byRef bool) (nodeapi.Sandbox, error) {
	c := f.client(nodeName, addr)
	var s nodeapi.Sandbox
	if byRef {
		all, err := c.GetByRef(ctx, key)
		if err != nil {
			return nodeapi.Sandbox{}, nodeErr(err)
		}
		found := false
		for _, x := range all {
			if x.ClaimRef == key && (!found || x.ClaimedAt.After(s.ClaimedAt)) {
				s, found = x, true
			}
		}
		if !found {
			return nodeapi.Sandbox{}, ErrNotFound
		}
	} else {
		x, err := c.Get(ctx, key)
		if err != nil {
			return nodeapi.Sandbox{}, nodeErr(err)
		}
		s = x
	}
	return located(s, nodeName, addr), nil
}

// askAll asks every routable node of the view for key concurrently (bounded);
// the first holder wins and is indexed.
func (f *NodeFleet) askAll(ctx context.Context, key string, byRef bool) (nodeapi.Sandbox, error) {
	nodes := f.cfg.View.View().Nodes()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	found := make(chan nodeapi.Sandbox, 1)
	var (
		g      errgroup.Group
		mu     sync.Mutex
		silent []string // nodes that did not answer
	)
	g.SetLimit(f.cfg.Concurrency)
	for _, n := range nodes {
		if ctx.Err() != nil { // found, or the caller gave up: ask no more
			break
		}
		if n.Address == "" {
			continue
		}
		g.Go(func() error {
			s, err := f.ask(ctx, n.Name, n.Address, key, byRef)
			switch {
			case err == nil:
				select {
				case found <- s:
					cancel()
				default:
				}
			case !errors.Is(err, ErrNotFound) && ctx.Err() == nil:
				mu.Lock()
				silent = append(silent, n.Name)
				mu.Unlock()
			}
			return nil
		})
	}
	_ = g.Wait()
	select {
	case s := <-found:
		f.index.put(s)
		return s, nil
	default:
	}
	if err := ctx.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return nodeapi.Sandbox{}, err
	}
	if len(silent) > 0 {
		sort.Strings(silent)
		return nodeapi.Sandbox{}, fmt.Errorf("%w; %w: %v", ErrNotFound, ErrIncomplete, silent)
	}
	return nodeapi.Sandbox{}, ErrNotFound
}

// ErrIncomplete accompanies ErrNotFound when some nodes did not answer a
// live lookup: the sandbox may still exist on one of them.
var ErrIncomplete = errors.New("some nodes did not answer")

// List returns every sandbox the live view knows, by name, then the
// indexed claims the view does not list yet, each verified live (one a
// node no longer holds is dropped from the index; one whose node does not
// answer is listed as indexed). Each record carries what the view's entry
// does — pool key, labels, annotations, e2b visibility and the claim's
// metadata, on every replica and after any restart (the nodes' streams
// carry them) —; the metadata of an entry the view read from a published
// object (and net and size, pruned by an older NodeInventory schema) is
// filled from the index. No record carries its token.
func (f *NodeFleet) List(ctx context.Context) ([]nodeapi.Sandbox, error) {
	items := f.items()
	out := make([]nodeapi.Sandbox, 0, len(items))
	seen := make(map[string]bool, len(items))
	for _, it := range items {
		s := it.Sandbox()
		if rec, ok := f.index.get(s.ID, false); ok {
			if s.Net == "" && s.Size == "" {
				s.Net, s.Size = rec.Net, rec.Size
			}
			if s.Metadata == nil {
				s.Metadata = rec.Metadata
			}
		}
		seen[s.ID] = true
		out = append(out, s)
	}
	pending := f.index.unlisted(seen)
	found := make([]*nodeapi.Sandbox, len(pending))
	var g errgroup.Group
	g.SetLimit(f.cfg.Concurrency)
	for i, rec := range pending {
		g.Go(func() error {
			s, err := f.ask(ctx, rec.Node, rec.NodeAddr, rec.ID, false)
			switch {
			case err == nil:
				s.Token = "" // a list carries no tokens, like the node's
				found[i] = &s
			case errors.Is(err, ErrNotFound):
				f.index.forget(rec.ClaimRef, rec.ID)
			default:
				rec.Token = ""
				found[i] = &rec
			}
			return nil
		})
	}
	_ = g.Wait()
	for _, s := range found {
		if s != nil {
			out = append(out, *s)
		}
	}
	return out, ctx.Err()
}

// Pools returns every routable node's advertised warm pools, as published.
func (f *NodeFleet) Pools(context.Context) ([]nodeapi.PoolInfo, error) {
	var out []nodeapi.PoolInfo
	for _, n := range f.cfg.View.View().Nodes() {
		for _, p := range n.Pools {
			out = append(out, nodeapi.PoolInfo{Template: p.Template, Net: p.Net, Size: p.Size, Warm: p.Warm, Target: p.Target})
		}
	}
	return out, nil
}
