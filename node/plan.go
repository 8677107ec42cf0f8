package node

import (
	"sort"
	"time"

	"github.com/hearthvm/hearth/pool"
)

// poolView is what the refill planner knows of one pool.
type poolView struct {
	Key     pool.Key
	Target  int32
	Warm    int32
	Booting int32
	// GoldenReady is true once the pool's golden checkpoint exists. Until
	// then at most one boot (the golden one) runs for the pool.
	GoldenReady bool
	// Blocked is true while the pool backs off after boot failures.
	Blocked bool
}

// deficit is how many more VMs the pool needs beyond those ready or booting.
func (v poolView) deficit() int32 {
	d := v.Target - v.Warm - v.Booting
	if d < 0 {
		return 0
	}
	return d
}

// planBoots decides which pools start a boot now, one entry per boot, given
// free node-wide boot slots. Slots are shared round-robin between pools
// with a deficit, largest deficit first (ties by key), so one big pool does
// not starve the others. A pool without its golden checkpoint gets at most
// one boot in flight. It is a pure function.
func planBoots(pools []poolView, free int) []pool.Key {
	if free <= 0 {
		return nil
	}
	type cand struct {
		key  pool.Key
		want int32
	}
	var cands []cand
	for _, p := range pools {
		if p.Blocked {
			continue
		}
		want := p.deficit()
		if !p.GoldenReady {
			if p.Booting > 0 {
				want = 0
			} else if want > 1 {
				want = 1
			}
		}
		if want > 0 {
			cands = append(cands, cand{p.Key, want})
		}
	}
	sort.Slice(cands, func(i, j int) bool {
		if cands[i].want != cands[j].want {
			return cands[i].want > cands[j].want
		}
		return keyLess(cands[i].key, cands[j].key)
	})
	var out []pool.Key
	for len(out) < free {
		progressed := false
		for i := range cands {
			if len(out) == free {
				break
			}
			if cands[i].want > 0 {
				out = append(out, cands[i].key)
				cands[i].want--
				progressed = true
			}
		}
		if !progressed {
			break
		}
	}
	return out
}

// surplus is how many warm VMs of the pool to destroy now (scale-down and drain).
func surplus(v poolView) int32 {
	if v.Warm > v.Target {
		return v.Warm - v.Target
	}
	return 0
}

// drained reports whether the pool can be forgotten: nothing asked, held or booting.
func drained(v poolView) bool { return v.Target == 0 && v.Warm == 0 && v.Booting == 0 }

// backoff is the pause after the n-th consecutive boot failure of a pool:
// 500ms doubling up to 30s.
func backoff(n int) time.Duration {
	if n <= 0 {
		return 0
	}
	d := 500 * time.Millisecond
	for i := 1; i < n && d < 30*time.Second; i++ {
		d *= 2
	}
	if d > 30*time.Second {
		d = 30 * time.Second
	}
	return d
}
