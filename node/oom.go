package node

import (
	"context"
	"fmt"
	"sort"

	"golang.org/x/sync/errgroup"

	"github.com/hearthvm/hearth/nodeapi"
	"github.com/hearthvm/hearth/pool"
	"github.com/hearthvm/hearth/vmm"
)

// OOM kills: a sweep of its own (oomLoop, at the health sweep's cadence
// and never delaying it: the count may be the guest's answer) reads the
// OOM kill count (vmm.OOMCounter) of each claimed, non-paused sandbox and, when it grew
// since the count the sweep holds for it, records a Warning OOMKilled
// event ("N processes killed for memory (limit X MiB)") with one write
// (note). The counts are kept in memory only: a sandbox the node held at
// its first sweep (after a start: it may have counted kills before)
// takes its first reading as its baseline; one claimed later starts from
// 0 (its VM's counter started with it). A count that went down (a
// Restore restarted the VM's processes) becomes the new baseline. A
// sandbox whose lifecycle lock is held (a snapshot, a pause...) keeps its
// old count, so the next sweep reports the kills. sim counts from its
// VM's memory cgroup, qemu from the guest kernel's counter (through the
// guest's agent); drivers without the counter (firecracker,
// cloud-hypervisor) record no such event.

// oomReading is one sweep's OOM kill count of a sandbox.
type oomReading struct {
	ID    string
	Kills uint64
}

// oomCounts is what the sweep holds between sweeps: each sandbox's last
// count (known false: its first reading is a baseline).
type oomCounts struct {
	started bool
	seen    map[string]oomCount
}

type oomCount struct {
	Kills uint64
	Known bool
}

// planOOM is the OOM half of the sweep's decision, free of I/O: held are
// the ids the node holds now (paused ones included: their counts are
// kept), readings this sweep's counts. It returns the sandboxes whose
// count grew, with how many new kills (in reading order), and the counts
// to carry, in which each reported sandbox still has its old count (the
// caller sets the new one once its event is written).
func planOOM(readings []oomReading, held map[string]bool, st oomCounts) (grew map[string]uint64, next oomCounts) {
	next = oomCounts{started: true, seen: make(map[string]oomCount, len(held))}
	for id := range held {
		c, ok := st.seen[id]
		if !ok && st.started {
			c = oomCount{Known: true} // new since the last sweep: its VM counted from 0
		}
		next.seen[id] = c
	}
	for _, r := range readings {
		c, ok := next.seen[r.ID]
		if !ok {
			continue // released meanwhile
		}
		if !c.Known || r.Kills < c.Kills {
			next.seen[r.ID] = oomCount{Kills: r.Kills, Known: true}
			continue
		}
		if r.Kills > c.Kills {
			if grew == nil {
				grew = map[string]uint64{}
			}
			grew[r.ID] = r.Kills - c.Kills
		}
	}
	return grew, next
}

// oomMessage is an OOMKilled event's message.
func oomMessage(kills uint64, size string) string {
	what := "processes"
	if kills == 1 {
		what = "process"
	}
	s, ok := pool.ShapeOf(size)
	if !ok {
		s, _ = pool.ShapeOf("")
	}
	return fmt.Sprintf("%d %s killed for memory (limit %d MiB)", kills, what, s.MemoryMiB)
}

// sweepOOM reads every claimed, non-paused sandbox's OOM kill count and
// records an OOMKilled event for each whose count grew. It returns the
// counts for the next sweep.
func (n *Node) sweepOOM(ctx context.Context, st oomCounts) oomCounts {
	oc, ok := n.driver.(vmm.OOMCounter)
	if !ok {
		return st
	}
	type target struct {
		id string
		h  vmm.Handle
	}
	n.mu.Lock()
	held := make(map[string]bool, len(n.tab.byID))
	var ts []target
	for id, sb := range n.tab.byID {
		held[id] = true
		if !sb.rec.Paused && !sb.rec.Handle.Paused {
			ts = append(ts, target{id: id, h: sb.rec.Handle})
		}
	}
	n.mu.Unlock()
	sort.Slice(ts, func(i, j int) bool { return ts[i].id < ts[j].id })

	readings := make([]oomReading, len(ts))
	read := make([]bool, len(ts))
	var g errgroup.Group
	g.SetLimit(warmProbeConcurrency)
	for i, t := range ts {
		g.Go(func() error {
			k, err := oc.OOMKills(ctx, t.h)
			if err != nil {
				n.log.V(4).Info("Cannot read a sandbox's OOM kills", "id", t.id, "vm", t.h.ID, "err", err)
				return nil
			}
			readings[i], read[i] = oomReading{ID: t.id, Kills: k}, true
			return nil
		})
	}
	_ = g.Wait()
	if ctx.Err() != nil {
		return st
	}
	var got []oomReading
	for i, r := range readings {
		if read[i] {
			got = append(got, r)
		}
	}
	grew, next := planOOM(got, held, st)
	for _, r := range got {
		kills, ok := grew[r.ID]
		if !ok {
			continue
		}
		if n.noteOOM(r.ID, kills) {
			next.seen[r.ID] = oomCount{Kills: r.Kills, Known: true}
		}
	}
	return next
}

// noteOOM records an OOMKilled event of kills on sandbox id (one write)
// unless its lifecycle lock is held (it reports false: the next sweep
// tries again).
func (n *Node) noteOOM(id string, kills uint64) bool {
	sb := n.lookup(id)
	if sb == nil {
		return true
	}
	if !sb.mu.TryLock() {
		return false
	}
	defer sb.mu.Unlock()
	if sb.gone {
		return true
	}
	n.mu.Lock()
	size := sb.rec.Key.Size
	n.mu.Unlock()
	n.note(sb, n.event(nodeapi.EventWarning, nodeapi.ReasonOOMKilled, oomMessage(kills, size)))
	n.log.Info("Processes of a sandbox were killed for memory", "id", id, "kills", kills, "size", size)
	return true
}
