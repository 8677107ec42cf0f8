package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// root is the repository root: this package is internal/docs.
const root = "../.."

var (
	// cited matches docs/PAGE.md#anchor anywhere, and a Markdown link
	// (PAGE.md#anchor) between pages of docs/.
	citedRE  = regexp.MustCompile(`docs/([A-Za-z0-9_-]+\.md)#([A-Za-z0-9_-]+)`)
	linkRE   = regexp.MustCompile(`\]\(([A-Za-z0-9_-]+\.md)?#([A-Za-z0-9_-]+)\)`)
	headerRE = regexp.MustCompile("(?m)^#{1,6} +(.+?) *$")
	// idRE matches an HTML anchor (<a id="x"></a>), which GitHub keeps:
	// a table row (an alert's runbook) has no heading of its own.
	idRE    = regexp.MustCompile(`<a id="([A-Za-z0-9_-]+)"></a>`)
	fenceRE = regexp.MustCompile("(?ms)^```.*?^```")
)

// anchor is GitHub's anchor of a heading: lower case, punctuation other
// than '-' and '_' dropped, spaces made '-'.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the anchors of page's headings (a repeated heading's
// second anchor gets "-1", as on GitHub) and its HTML anchors.
func anchors(t *testing.T, page string) map[string]bool {
	b, err := os.ReadFile(filepath.Join(root, "docs", page))
	if err != nil {
		t.Fatalf("%s: %v", page, err)
	}
	text := fenceRE.ReplaceAllString(string(b), "")
	out := map[string]bool{}
	for _, m := range headerRE.FindAllStringSubmatch(text, -1) {
		base := anchor(strings.ReplaceAll(m[1], "`", ""))
		a := base
		for i := 1; out[a]; i++ {
			a = base + "-" + strconv.Itoa(i)
		}
		out[a] = true
	}
	for _, m := range idRE.FindAllStringSubmatch(text, -1) {
		out[m[1]] = true
	}
	return out
}

func TestAnchor_IsGitHubs(t *testing.T) {
	for in, want := range map[string]string{
		"Create is a claim": "create-is-a-claim",
		"Node API":          "node-api",
		"e2b API":           "e2b-api",
		"Labels and fields": "labels-and-fields",
		"Update and Patch":  "update-and-patch",
		"Tenant: kernel surface, descriptors and processes (medium)": "tenant-kernel-surface-descriptors-and-processes-medium",
	} {
		if got := anchor(in); got != want {
			t.Errorf("anchor(%q) = %q, want %q", in, got, want)
		}
	}
}

// Every docs/PAGE.md#anchor the repository cites names a heading of PAGE.
func TestAnchors_EveryCitedSectionExists(t *testing.T) {
	pages := map[string]map[string]bool{}
	check := func(where, page, a string) {
		if pages[page] == nil {
			pages[page] = anchors(t, page)
		}
		if !pages[page][a] {
			t.Errorf("%s cites docs/%s#%s, which is no heading of it", where, page, a)
		}
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if name == "node_modules" || name == ".git" || name == "testdata" || name == "_output" || strings.HasPrefix(name, ".cache") {
				return filepath.SkipDir
			}
			return nil
		}
		ext := filepath.Ext(name)
		if ext != ".go" && ext != ".sh" && ext != ".md" && ext != ".yaml" && ext != ".mjs" && ext != ".tpl" && ext != ".txt" {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if filepath.Dir(rel) == filepath.Join("internal", "docs") {
			return nil // this test's own examples
		}
		for _, m := range citedRE.FindAllStringSubmatch(string(b), -1) {
			check(rel, m[1], m[2])
		}
		if ext == ".md" && filepath.Dir(rel) == "docs" {
			for _, m := range linkRE.FindAllStringSubmatch(string(b), -1) {
				page := m[1]
				if page == "" {
					page = filepath.Base(rel)
				}
				check(rel, page, m[2])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
