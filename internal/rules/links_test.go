package rules_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the module's root (this package is internal/rules).
const repoRoot = "../.."

// markdownFiles lists the Markdown files git tracks (every one a reader of
// the repository meets), or without git every *.md outside node_modules.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--", "*.md")
	cmd.Dir = repoRoot
	if out, err := cmd.Output(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		return strings.Fields(string(out))
	}
	var files []string
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, _ := filepath.Rel(repoRoot, p)
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	inlineLink = regexp.MustCompile(`!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	htmlTarget = regexp.MustCompile(`(?:href|src)="([^"]+)"`)
)

// links returns the link and image targets of a Markdown document with
// their line numbers, outside code blocks and code spans.
func links(doc []byte) (targets []string, lines []int) {
	fence := ""
	sc := bufio.NewScanner(bytes.NewReader(doc))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " ")
		if f := fenceOf(trimmed); f != "" {
			switch {
			case fence == "":
				fence = f
			case strings.HasPrefix(trimmed, fence):
				fence = ""
			}
			continue
		}
		if fence != "" {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			targets, lines = append(targets, m[1]), append(lines, n)
		}
		for _, m := range htmlTarget.FindAllStringSubmatch(line, -1) {
			targets, lines = append(targets, m[1]), append(lines, n)
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			targets, lines = append(targets, m[1]), append(lines, n)
		}
	}
	return targets, lines
}

func fenceOf(line string) string {
	for _, f := range []string{"```", "~~~"} {
		if strings.HasPrefix(line, f) {
			return f
		}
	}
	return ""
}

// anchors are the heading anchors GitHub gives a document: each heading
// lowercased, without punctuation but hyphens and underscores, spaces as
// hyphens; a repeated one gets -1, -2, …
func anchors(doc []byte) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fence := ""
	for _, line := range strings.Split(string(doc), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if f := fenceOf(trimmed); f != "" {
			if fence == "" {
				fence = f
			} else if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		if fence != "" || !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.TrimSpace(strings.TrimLeft(line, "#"))
		title = strings.ReplaceAll(title, "`", "")
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	// Explicit anchors (<a id="…">, <a name="…">).
	for _, m := range regexp.MustCompile(`<a (?:id|name)="([^"]+)"`).FindAllStringSubmatch(string(doc), -1) {
		out[m[1]] = true
	}
	return out
}

func itoa(n int) string {
	s := ""
	for ; n > 0; n /= 10 {
		s = string(rune('0'+n%10)) + s
	}
	return s
}

// Every relative link and image in every tracked Markdown file resolves:
// the file or directory it names exists (relative to the linking file, as
// GitHub resolves it), and an anchor into a Markdown file names one of its
// headings (issue 34: the console's five screenshots in docs/operators.md
// were linked as docs/console/… from inside docs/).
func TestMarkdownLinksResolve(t *testing.T) {
	files := markdownFiles(t)
	if len(files) < 10 {
		t.Fatalf("found %d Markdown files: %v", len(files), files)
	}
	docs := map[string][]byte{}
	read := func(p string) ([]byte, bool) {
		if d, ok := docs[p]; ok {
			return d, true
		}
		d, err := os.ReadFile(filepath.Join(repoRoot, p))
		if err != nil {
			return nil, false
		}
		docs[p] = d
		return d, true
	}
	checked := 0
	for _, f := range files {
		doc, ok := read(f)
		if !ok {
			t.Errorf("%s: cannot read it", f)
			continue
		}
		targets, lines := links(doc)
		for i, target := range targets {
			where := f + ":" + itoa(lines[i])
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue // not this repository's
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := f
			if path != "" {
				if strings.HasPrefix(path, "/") {
					dest = strings.TrimPrefix(path, "/")
				} else {
					dest = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(f), path)))
				}
				if strings.HasPrefix(dest, "../") {
					t.Errorf("%s: %s leaves the repository", where, target)
					continue
				}
				if _, err := os.Stat(filepath.Join(repoRoot, dest)); err != nil {
					t.Errorf("%s: %s: %s does not exist", where, target, dest)
					continue
				}
			}
			checked++
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			d, _ := read(dest)
			if !anchors(d)[anchor] {
				t.Errorf("%s: %s: %s has no heading #%s", where, target, dest, anchor)
			}
		}
	}
	t.Logf("%d relative links and images in %d Markdown files", checked, len(files))
}
