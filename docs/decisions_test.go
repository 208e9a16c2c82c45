// Package docs_test checks that the repository's documents stay true to
// the tree: the decision records form one numbered sequence with an index
// (decisions_test.go), and docs/architecture.md names every package and
// the import rules the packages keep (architecture_test.go).
package docs_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const decisionsDir = "decisions"

// adrName is a decision file's name: four digits, then lower-case words.
var adrName = regexp.MustCompile(`^([0-9]{4})-[a-z0-9]+(-[a-z0-9]+)*\.md$`)

// adr is one decision file.
type adr struct {
	file  string
	num   int
	title string // the first line without "# NNNN: "
}

// readDecisions returns the decision files of dir in name order, failing
// t for each file that is not numbered or whose first line is not
// "# NNNN: Title" with its own number.
func readDecisions(t *testing.T, dir string) []adr {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []adr
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || name == "README.md" {
			continue
		}
		m := adrName.FindStringSubmatch(name)
		if m == nil {
			t.Errorf("docs/decisions/%s: not numbered: name it NNNN-short-name.md with the next free number (README.md says how)", name)
			continue
		}
		num, _ := strconv.Atoi(m[1])
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		first, _, _ := strings.Cut(string(b), "\n")
		title, ok := strings.CutPrefix(first, "# "+m[1]+": ")
		if !ok || strings.TrimSpace(title) == "" {
			t.Errorf("docs/decisions/%s: first line is %q, want \"# %s: Title\"", name, first, m[1])
		}
		out = append(out, adr{file: name, num: num, title: title})
	}
	return out
}

// The decision files are one sequence: 0001, 0002, ... with no number
// twice and none skipped, each titled with its own number.
func TestDecisionsAreOneNumberedSequence(t *testing.T) {
	adrs := readDecisions(t, decisionsDir)
	if len(adrs) == 0 {
		t.Fatal("no decision files found")
	}
	seen := map[int]string{}
	for _, a := range adrs {
		if other, dup := seen[a.num]; dup {
			t.Errorf("docs/decisions: %04d is both %s and %s: give the later one the next free number", a.num, other, a.file)
		}
		seen[a.num] = a.file
	}
	for n := 1; n <= len(seen); n++ {
		if _, ok := seen[n]; !ok {
			t.Errorf("docs/decisions: %04d is missing: the numbers run 0001 to %04d with no gap", n, len(seen))
		}
	}
}

// indexRow is one row of docs/decisions/README.md's index table:
// | [NNNN](NNNN-name.md) | title | status | in one line |
var indexRow = regexp.MustCompile(`^\| \[([0-9]{4})\]\(([^)]+)\) \| (.+) \| (.+) \| (.+) \|$`)

// The index lists every decision once, by its number and file, with the
// title the file has, a status and a line of summary; it lists nothing
// else.
func TestDecisionsIndexListsEveryDecision(t *testing.T) {
	adrs := readDecisions(t, decisionsDir)
	b, err := os.ReadFile(filepath.Join(decisionsDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]int{}
	titles := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "| [") {
			continue
		}
		m := indexRow.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("docs/decisions/README.md:%d: %q is not | [NNNN](NNNN-name.md) | title | status | in one line |", i+1, line)
			continue
		}
		num, file, title, status, summary := m[1], m[2], m[3], m[4], m[5]
		if !strings.HasPrefix(file, num+"-") {
			t.Errorf("docs/decisions/README.md:%d: row %s links to %s", i+1, num, file)
		}
		if strings.TrimSpace(status) == "" || strings.TrimSpace(summary) == "" {
			t.Errorf("docs/decisions/README.md:%d: row %s has no status or summary", i+1, num)
		}
		rows[file]++
		titles[file] = title
	}
	for _, a := range adrs {
		switch n := rows[a.file]; {
		case n == 0:
			t.Errorf("docs/decisions/README.md: no row for %s: add | [%04d](%s) | %s | status | in one line |", a.file, a.num, a.file, a.title)
		case n > 1:
			t.Errorf("docs/decisions/README.md: %d rows for %s", n, a.file)
		case titles[a.file] != a.title:
			t.Errorf("docs/decisions/README.md: %s is titled %q in the index, %q in the file", a.file, titles[a.file], a.title)
		}
		delete(rows, a.file)
	}
	for file := range rows {
		t.Errorf("docs/decisions/README.md: a row links to %s, which does not exist", file)
	}
}

// References to decision files, wherever they are written.
var (
	// decisions/<name>.md, in any file (docs, code comments, CHANGELOG).
	decisionPath = regexp.MustCompile(`decisions/([A-Za-z0-9_.-]+\.md)`)
	// A numbered decision's bare name, as decisions cite each other.
	decisionBare = regexp.MustCompile(`(?:^|[^A-Za-z0-9/_-])([0-9]{4}-[a-z0-9-]+\.md)`)
	// A relative Markdown link inside docs/decisions.
	markdownLink = regexp.MustCompile(`\]\(([^)#:]+\.md)(?:#[^)]*)?\)`)
)

// Every reference to a decision file anywhere in the repository names a
// file that exists, so renumbering one cannot leave a stale link behind.
func TestDecisionLinksResolve(t *testing.T) {
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(decisionsDir, name))
		return err == nil
	}
	for path, text := range repoTextFiles(t) {
		for i, line := range strings.Split(text, "\n") {
			var refs []string
			for _, m := range decisionPath.FindAllStringSubmatch(line, -1) {
				refs = append(refs, m[1])
			}
			for _, m := range decisionBare.FindAllStringSubmatch(line, -1) {
				refs = append(refs, m[1])
			}
			if strings.HasPrefix(path, "docs/decisions/") {
				for _, m := range markdownLink.FindAllStringSubmatch(line, -1) {
					refs = append(refs, m[1])
				}
			}
			slices.Sort(refs)
			for _, ref := range slices.Compact(refs) {
				if !exists(ref) {
					t.Errorf("%s:%d: links to decision %s, which does not exist", path, i+1, ref)
				}
			}
		}
	}
}

// repoTextFiles returns the text files of the repository (paths relative
// to its root), skipping hidden directories and binary files.
func repoTextFiles(t *testing.T) map[string]string {
	t.Helper()
	files := map[string]string{}
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != ".." && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil || !info.Mode().IsRegular() || info.Size() > 4<<20 {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b, 0) >= 0 {
			return nil
		}
		rel, err := filepath.Rel("..", p)
		if err != nil {
			return err
		}
		files[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatal(fmt.Errorf("walk the repository: %w", err))
	}
	return files
}
