package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every row of docs/guarantees.md's table names the tests that back it,
// and every test it names (anywhere in the document) is a Test function
// of some _test.go file of the module: a renamed or deleted test breaks
// this test, not the table's word.
func TestGuaranteesTableNamesRealTests(t *testing.T) {
	doc, err := os.ReadFile("../../docs/guarantees.md")
	if err != nil {
		t.Fatal(err)
	}
	var funcs strings.Builder
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			funcs.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	src := funcs.String()
	name := regexp.MustCompile("`(Test[A-Za-z0-9_]+)`")
	rows := 0
	for _, line := range strings.Split(string(doc), "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| **") || len(cells) < 6 {
			continue
		}
		rows++
		if len(name.FindAllString(cells[len(cells)-1], -1)) == 0 {
			t.Errorf("row %q names no test in its last column", cells[0])
		}
	}
	if rows < 6 {
		t.Errorf("found %d rows in the guarantees table, want the 6 deployments of issue 22", rows)
	}
	named := name.FindAllStringSubmatch(string(doc), -1)
	if len(named) == 0 {
		t.Fatal("docs/guarantees.md names no test")
	}
	for _, m := range named {
		if !strings.Contains(src, "func "+m[1]+"(") {
			t.Errorf("docs/guarantees.md names %s, but no _test.go file has func %s(", m[1], m[1])
		}
	}
}
