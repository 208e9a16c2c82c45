package testenv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// StringConsts returns, per type name, the string values of the
// constants declared with that type in the non-test Go files of dir, in
// declaration order (files by name), so that a test can check a list or a
// document against the code's enum. A constant of those types that is not
// a string literal fails the test.
func StringConsts(t testing.TB, dir string, types ...string) map[string][]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	out := map[string][]string{}
	// os.ReadDir sorts by name: the order is the source's.
	for _, e := range entries {
		n := e.Name()
		if !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				id, ok := vs.Type.(*ast.Ident)
				if !ok || !slices.Contains(types, id.Name) {
					continue
				}
				for _, v := range vs.Values {
					lit, ok := v.(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						t.Fatalf("a %s constant that is not a string literal", id.Name)
					}
					val, _ := strconv.Unquote(lit.Value)
					out[id.Name] = append(out[id.Name], val)
				}
			}
		}
	}
	return out
}
