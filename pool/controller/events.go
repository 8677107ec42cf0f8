package controller

import (
	"fmt"
	"sort"

	"github.com/hearthvm/hearth/internal/kubeevents"
	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
)

// Event reasons of the warm-pool controller (on a SandboxWarmPool; BootFailed
// on its SandboxTemplate too).
const (
	// ReasonFillStarted: the pool holds fewer warm microVMs than it asks for.
	ReasonFillStarted = "FillStarted"
	// ReasonFillFinished: it holds them all again.
	ReasonFillFinished = "FillFinished"
	// ReasonBootFailed (Warning): a node's warm boots of the pool fail
	// (an image that cannot be pulled, a backend error); the note carries
	// the node's last error.
	ReasonBootFailed = "BootFailed"
	// ReasonEvicted (Warning): a node's health sweep evicted warm microVMs
	// of the pool (their agent stopped answering).
	ReasonEvicted = "Evicted"
	// ReasonNodeGone (Warning): a node that held the pool's warm microVMs
	// is gone (its NodeInventory deleted or without an address).
	ReasonNodeGone = "NodeGone"
)

// poolEvent is one event the controller records.
type poolEvent struct {
	Pool pool.Ref
	// OnTemplate records it on the pool's template as well.
	OnTemplate         bool
	Type, Reason, Note string
}

// nodeKey is a pool key on one node.
type nodeKey struct {
	node string
	key  pool.Key
}

// eventState is what the controller remembers between ticks to record
// changes, not states: a pool filling, the boot failures and evictions
// each node last reported.
type eventState struct {
	filling map[pool.Ref]bool
	boot    map[nodeKey]int32
	evicted map[nodeKey]int64
}

// tickView is what one tick observed.
type tickView struct {
	pools    []pool.WarmPool
	keys     map[pool.Ref]pool.Key
	observed map[pool.Ref]int32
	// answers are the pools of the nodes that answered a PUT this tick.
	answers map[string][]nodeapi.PoolInfo
	// gone are the nodes gone since the last tick, with the keys they
	// held warm targets for.
	gone map[string][]pool.Key
}

// next returns the events of v against s and advances s. It is pure.
func (s *eventState) next(v tickView) []poolEvent {
	if s.filling == nil {
		s.filling, s.boot, s.evicted = map[pool.Ref]bool{}, map[nodeKey]int32{}, map[nodeKey]int64{}
	}
	byKey := map[pool.Key][]pool.Ref{}
	for _, wp := range v.pools {
		if k, ok := v.keys[wp.Ref]; ok {
			byKey[k] = append(byKey[k], wp.Ref)
		}
	}
	var out []poolEvent
	live := map[pool.Ref]bool{}
	for _, wp := range v.pools {
		live[wp.Ref] = true
		got := v.observed[wp.Ref]
		switch {
		case got < wp.Replicas && !s.filling[wp.Ref]:
			s.filling[wp.Ref] = true
			out = append(out, poolEvent{Pool: wp.Ref, Type: kubeevents.Normal, Reason: ReasonFillStarted,
				Note: fmt.Sprintf("Filling to %d warm microVMs (%d ready)", wp.Replicas, got)})
		case got >= wp.Replicas && s.filling[wp.Ref]:
			delete(s.filling, wp.Ref)
			out = append(out, poolEvent{Pool: wp.Ref, Type: kubeevents.Normal, Reason: ReasonFillFinished,
				Note: fmt.Sprintf("%d warm microVMs ready", got)})
		}
	}
	for ref := range s.filling {
		if !live[ref] {
			delete(s.filling, ref)
		}
	}
	for _, node := range sortedNodes(v.answers) {
		for _, p := range v.answers[node] {
			nk := nodeKey{node, pool.Key{Template: p.Template, Net: p.Net, Size: p.Size}}
			if p.BootFailures > s.boot[nk] {
				for _, ref := range byKey[nk.key] {
					out = append(out, poolEvent{Pool: ref, OnTemplate: true, Type: kubeevents.Warning, Reason: ReasonBootFailed,
						Note: fmt.Sprintf("Node %s: %d warm boots failed in a row: %s", node, p.BootFailures, p.BootError)})
				}
			}
			if p.BootFailures == 0 {
				delete(s.boot, nk)
			} else {
				s.boot[nk] = p.BootFailures
			}
			if seen, ok := s.evicted[nk]; ok && p.Evicted > seen {
				for _, ref := range byKey[nk.key] {
					out = append(out, poolEvent{Pool: ref, Type: kubeevents.Warning, Reason: ReasonEvicted,
						Note: fmt.Sprintf("Node %s evicted %d warm microVMs whose agent failed its health checks", node, p.Evicted-seen)})
				}
			}
			s.evicted[nk] = p.Evicted
		}
	}
	for _, node := range sortedNodes(v.gone) {
		seen := map[pool.Ref]bool{}
		for _, k := range v.gone[node] {
			for _, ref := range byKey[k] {
				if !seen[ref] {
					seen[ref] = true
					out = append(out, poolEvent{Pool: ref, Type: kubeevents.Warning, Reason: ReasonNodeGone,
						Note: fmt.Sprintf("Node %s is gone (its NodeInventory was deleted or lost its address); its warm microVMs no longer count", node)})
				}
			}
		}
		for nk := range s.boot {
			if nk.node == node {
				delete(s.boot, nk)
			}
		}
		for nk := range s.evicted {
			if nk.node == node {
				delete(s.evicted, nk)
			}
		}
	}
	return out
}

func sortedNodes[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
