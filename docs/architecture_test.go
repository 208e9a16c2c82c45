package docs_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const architectureDoc = "architecture.md"

// goPackages returns the module's path and, by directory relative to the
// repository root, the imports of each package's non-test files (module
// packages relative to the root, others by their full path).
func goPackages(t *testing.T) (module string, imports map[string][]string) {
	t.Helper()
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(mod), "\n") {
		if m, ok := strings.CutPrefix(line, "module "); ok {
			module = strings.TrimSpace(m)
		}
	}
	if module == "" {
		t.Fatal("go.mod names no module")
	}
	imports = map[string][]string{}
	fset := token.NewFileSet()
	err = filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != ".." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		rel, err := filepath.Rel("..", filepath.Dir(p))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if _, ok := imports[rel]; !ok {
			imports[rel] = nil
		}
		if strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, is := range f.Imports {
			path, _ := strconv.Unquote(is.Path.Value)
			if r, ok := strings.CutPrefix(path, module+"/"); ok {
				path = r
			}
			if !slices.Contains(imports[rel], path) {
				imports[rel] = append(imports[rel], path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return module, imports
}

// matches reports whether path is pattern, or below it when pattern ends
// in "/...".
func matches(pattern, path string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return path == base || strings.HasPrefix(path, base+"/")
	}
	return path == pattern
}

// Every package of the module is named in docs/architecture.md, so a new
// package (or a moved one) comes with its line in the map.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile(architectureDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, pkgs := goPackages(t)
	if len(pkgs) < 10 {
		t.Fatalf("found only %d packages: %v", len(pkgs), pkgs)
	}
	for dir := range pkgs {
		if dir == "." {
			continue
		}
		if !strings.Contains(string(doc), "`"+dir+"`") {
			t.Errorf("docs/architecture.md does not name package `%s`: add it to the table under \"Packages\"", dir)
		}
	}
}

// importRule is one row of docs/architecture.md's "Import rules" table.
type importRule struct {
	line      int
	packages  []string
	forbidden []string
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// readImportRules parses the table under "## Import rules".
func readImportRules(t *testing.T) []importRule {
	t.Helper()
	doc, err := os.ReadFile(architectureDoc)
	if err != nil {
		t.Fatal(err)
	}
	var rules []importRule
	in := false
	for i, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "## ") {
			in = line == "## Import rules"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 3 {
			t.Fatalf("docs/architecture.md:%d: want | packages | must not import | why |", i+1)
		}
		r := importRule{line: i + 1}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[0], -1) {
			r.packages = append(r.packages, m[1])
		}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
			r.forbidden = append(r.forbidden, m[1])
		}
		if len(r.packages) == 0 || len(r.forbidden) == 0 {
			t.Fatalf("docs/architecture.md:%d: a rule needs packages and what they must not import", i+1)
		}
		rules = append(rules, r)
	}
	if len(rules) < 5 {
		t.Fatalf("docs/architecture.md: found %d import rules under \"## Import rules\"", len(rules))
	}
	return rules
}

// The import rules docs/architecture.md states hold for every package's
// non-test files, and every rule still names packages that exist (a rule
// about a renamed package would pass silently otherwise).
func TestArchitectureImportRules(t *testing.T) {
	_, pkgs := goPackages(t)
	mod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	isExternal := func(pattern string) bool {
		first, _, _ := strings.Cut(pattern, "/")
		return strings.Contains(first, ".")
	}
	exists := func(pattern string) bool {
		if isExternal(pattern) {
			base, _ := strings.CutSuffix(pattern, "/...")
			return strings.Contains(string(mod), "\t"+base+" ") || strings.Contains(string(mod), "\t"+base+"/")
		}
		for dir := range pkgs {
			if matches(pattern, dir) {
				return true
			}
		}
		return false
	}
	for _, r := range readImportRules(t) {
		for _, p := range slices.Concat(r.packages, r.forbidden) {
			if !exists(p) {
				t.Errorf("docs/architecture.md:%d: `%s` matches no package of the module or go.mod", r.line, p)
			}
		}
		for dir, imps := range pkgs {
			if !slices.ContainsFunc(r.packages, func(p string) bool { return matches(p, dir) }) {
				continue
			}
			for _, imp := range imps {
				for _, f := range r.forbidden {
					if matches(f, imp) {
						t.Errorf("%s imports %s, which docs/architecture.md:%d forbids (%s must not import %s)", dir, imp, r.line, strings.Join(r.packages, ", "), f)
					}
				}
			}
		}
	}
}

// A citation of a section of docs/architecture.md (`architecture.md,
// "Section"`) names a heading the page has.
func TestArchitectureCitationsNameSections(t *testing.T) {
	doc, err := os.ReadFile(architectureDoc)
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, line := range strings.Split(string(doc), "\n") {
		if strings.HasPrefix(line, "#") {
			headings[strings.TrimSpace(strings.TrimLeft(line, "#"))] = true
		}
	}
	cite := regexp.MustCompile(`architecture\.md, "([^"]+)"`)
	found := 0
	for path, text := range repoTextFiles(t) {
		for i, line := range strings.Split(text, "\n") {
			for _, m := range cite.FindAllStringSubmatch(line, -1) {
				found++
				if !headings[m[1]] {
					t.Errorf("%s:%d: cites docs/architecture.md, %q, which has no such heading", path, i+1, m[1])
				}
			}
		}
	}
	if found == 0 {
		t.Error("no citation of a docs/architecture.md section found: the pattern is stale")
	}
}
