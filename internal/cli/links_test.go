package cli

// No Markdown link leaves the repository: a standalone clone has no broken
// links.

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// anchors returns the GitHub-style anchors of a Markdown file's headings.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	inCode := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(l, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ' || r == '-':
				b.WriteRune('-')
			case r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// Every link in every Markdown file points to a file (and heading) inside
// the repository: a standalone clone has no broken links.
func TestMarkdownLinksStayInRepo(t *testing.T) {
	mds := repoFiles(t, func(p string) bool { return strings.HasSuffix(p, ".md") })
	if len(mds) < 3 {
		t.Fatalf("found only %v", mds)
	}
	for _, md := range mds {
		b, err := os.ReadFile(filepath.Join(repoRoot, md))
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") || strings.HasPrefix(target, "//") {
				t.Errorf("%s: link %s leaves the repository", md, target)
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			dest := md
			if file != "" {
				dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(md), file)))
				if dest == ".." || strings.HasPrefix(dest, "../") || filepath.IsAbs(file) {
					t.Errorf("%s: link %s leaves the repository", md, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(repoRoot, dest)); err != nil {
					t.Errorf("%s: link %s: %s does not exist", md, target, dest)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(dest, ".md") {
				text, _ := os.ReadFile(filepath.Join(repoRoot, dest))
				if !anchors(string(text))[anchor] {
					t.Errorf("%s: link %s: no heading #%s in %s", md, target, anchor, dest)
				}
			}
		}
	}
}
