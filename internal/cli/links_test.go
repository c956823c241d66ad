package cli

// No Markdown link leaves the repository: a standalone clone has no broken
// links.

import (
	"fmt"
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
		// GitHub numbers a repeated heading: #tested, #tested-1, ...
		a := b.String()
		for i := 1; out[a]; i++ {
			a = fmt.Sprintf("%s-%d", b.String(), i)
		}
		out[a] = true
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

var (
	// refDef is a reference-style link definition: [label]: target.
	refDef = regexp.MustCompile(`(?m)^ {0,3}\[[^\]]+\]:\s*(\S+)`)
	// htmlRef is a link or image in inline HTML.
	htmlRef = regexp.MustCompile(`(?i)(?:href|src)\s*=\s*["']([^"']+)["']`)
	// bareURL is what GitHub turns into a link by itself.
	bareURL = regexp.MustCompile(`(?i)\b(?:[a-z][a-z0-9+.-]*://|www\.)[^\s)>\]]*`)
	// codeSpan is inline code, where a URL is text, not a link.
	codeSpan = regexp.MustCompile("`[^`\n]*`")
)

// prose returns a Markdown file's text outside fenced code blocks and
// inline code.
func prose(text string) string {
	var b strings.Builder
	inCode := false
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inCode = !inCode
			continue
		}
		if !inCode {
			b.WriteString(codeSpan.ReplaceAllString(l, ""))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// Besides [text](target) links, Markdown links by reference definitions,
// inline HTML and bare URLs (GitHub links those by itself): none of them
// may leave the repository either, and those that point inside it must
// exist.
func TestMarkdownHasNoOtherLinksOut(t *testing.T) {
	mds := repoFiles(t, func(p string) bool { return strings.HasSuffix(p, ".md") })
	for _, md := range mds {
		b, err := os.ReadFile(filepath.Join(repoRoot, md))
		if err != nil {
			t.Fatal(err)
		}
		text := prose(string(b))
		for _, u := range bareURL.FindAllString(text, -1) {
			t.Errorf("%s: %s is a link that leaves the repository", md, u)
		}
		var targets []string
		for _, m := range refDef.FindAllStringSubmatch(text, -1) {
			targets = append(targets, m[1])
		}
		for _, m := range htmlRef.FindAllStringSubmatch(text, -1) {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			file, _, _ := strings.Cut(target, "#")
			if file == "" {
				continue
			}
			if strings.Contains(target, ":") || filepath.IsAbs(file) {
				t.Errorf("%s: link %s leaves the repository", md, target)
				continue
			}
			dest := filepath.Join(filepath.Dir(md), file)
			if rel := filepath.ToSlash(filepath.Clean(dest)); rel == ".." || strings.HasPrefix(rel, "../") {
				t.Errorf("%s: link %s leaves the repository", md, target)
			} else if _, err := os.Stat(filepath.Join(repoRoot, dest)); err != nil {
				t.Errorf("%s: link %s: %s does not exist", md, target, rel)
			}
		}
	}
}

// The repository stands alone: no file cites the developers' notes kept
// outside it (the project's reading of the draft is docs/DESIGN.md). The
// names are split so that this file does not match itself.
func TestRepositoryStandsAlone(t *testing.T) {
	outside := []string{"DECI" + "SIONS", "shared/" + "spec", "chainsync-draft" + ".txt"}
	n := 0
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		n++
		for _, s := range outside {
			if i := strings.Index(string(b), s); i >= 0 {
				line := strings.Count(string(b[:i]), "\n") + 1
				rel, _ := filepath.Rel(repoRoot, p)
				t.Errorf("%s:%d cites %s, which is not in the repository: point to docs/DESIGN.md (its sections by name) instead", filepath.ToSlash(rel), line, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 100 {
		t.Fatalf("looked at only %d files", n)
	}
}
