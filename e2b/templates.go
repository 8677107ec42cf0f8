package e2b

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/hearthvm/hearth/pool"
)

// isPool reports whether some node advertises a pool of k's template (from
// the view: no node call), so a 503 for it is only a capacity shortage.
func (g *gateway) isPool(ctx context.Context, k pool.Key) bool {
	pools, err := g.fleet.Pools(ctx)
	if err != nil {
		return true // do not widen a failure into a fan-out
	}
	for _, p := range pools {
		if p.Template == k.Template {
			return true
		}
	}
	return false
}

// knownTemplates names what a create may ask for: the templates some
// node has a pool of, and the aliases (at most 20 of each).
func (g *gateway) knownTemplates(ctx context.Context) string {
	seen := map[string]bool{}
	var tpls []string
	if pools, err := g.fleet.Pools(ctx); err == nil {
		for _, p := range pools {
			if p.Template != "" && !seen[p.Template] {
				seen[p.Template] = true
				tpls = append(tpls, strconv.Quote(p.Template))
			}
		}
	}
	var aliases []string
	for a, t := range g.aliases {
		if t != "" {
			aliases = append(aliases, strconv.Quote(a)+" → "+strconv.Quote(t))
		}
	}
	sort.Strings(tpls)
	sort.Strings(aliases)
	list := func(xs []string) string {
		if len(xs) == 0 {
			return "none"
		}
		if len(xs) > 20 {
			return strings.Join(xs[:20], ", ") + fmt.Sprintf(" and %d more", len(xs)-20)
		}
		return strings.Join(xs, ", ")
	}
	return "the templates are " + list(tpls) + "; the aliases are " + list(aliases) + "; or a snapshot of the namespace by id or name"
}

// template resolves a create's templateID: an alias (Config.TemplateAliases,
// e.g. @e2b/code-interpreter's default "code-interpreter-v1") names its
// target unless some node serves a pool of the alias itself.
func (g *gateway) template(ctx context.Context, id string) string {
	target, ok := g.aliases[id]
	if !ok || target == "" || g.isPool(ctx, pool.Key{Template: id}) {
		return id
	}
	return target
}

type templateJSON struct {
	TemplateID  string   `json:"templateID"`
	BuildID     string   `json:"buildID"`
	CPUCount    int      `json:"cpuCount"`
	MemoryMB    int      `json:"memoryMB"`
	DiskSizeMB  int      `json:"diskSizeMB"`
	Public      bool     `json:"public"`
	Aliases     []string `json:"aliases"`
	Names       []string `json:"names"`
	CreatedAt   string   `json:"createdAt"`
	UpdatedAt   string   `json:"updatedAt"`
	SpawnCount  int      `json:"spawnCount"`
	BuildCount  int      `json:"buildCount"`
	EnvdVersion string   `json:"envdVersion"`
}

func (g *gateway) handleTemplates(w http.ResponseWriter, r *http.Request) {
	type shape struct{ template, size string }
	var shapes []shape
	pools, err := g.fleet.Pools(r.Context())
	if err != nil {
		fail(w, err, "templates")
		return
	}
	for _, p := range pools {
		shapes = append(shapes, shape{p.Template, p.Size})
	}
	seen := map[string]bool{}
	out := []templateJSON{}
	for _, s := range shapes {
		if s.template == "" || seen[s.template] {
			continue
		}
		seen[s.template] = true
		cpus, mem := sizeShape(s.size)
		out = append(out, templateJSON{
			TemplateID: s.template, BuildID: s.template, CPUCount: cpus, MemoryMB: mem, Public: true,
			Aliases: []string{}, Names: []string{s.template}, EnvdVersion: g.cfg.EnvdVersion,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].TemplateID < out[j].TemplateID })
	writeJSON(w, http.StatusOK, out)
}
