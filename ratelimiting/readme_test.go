package ratelimiting_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// TestReadmeQuickStart checks that README.md's library quick start, the
// ```go block after the marker <!-- readme-test: example -->, is the program
// Example_readme runs: readme_example_test.go's imports, and the example's
// body as package main's main.
func TestReadmeQuickStart(t *testing.T) {
	const mark = "<!-- readme-test: example -->"
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), mark+"\n```go\n")
	if !ok {
		t.Fatalf("README.md: no %q marker followed by a ```go block", mark)
	}
	shown, _, ok := strings.Cut(after, "\n```\n")
	if !ok {
		t.Fatal("README.md: the quick start's ```go block is not closed")
	}

	const file = "readme_example_test.go"
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	text := func(n ast.Node) string {
		return string(src[fset.Position(n.Pos()).Offset:fset.Position(n.End()).Offset])
	}
	var imports, body string
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			if d.Tok == token.IMPORT {
				imports = text(d)
			}
		case *ast.FuncDecl:
			if d.Name.Name == "Example_readme" {
				b := text(d.Body)
				body, _, _ = strings.Cut(strings.TrimPrefix(b, "{\n"), "\t// Output:")
			}
		}
	}
	if imports == "" || body == "" {
		t.Fatalf("%s: want an import declaration and Example_readme", file)
	}
	want := "package main\n\n" + imports + "\n\nfunc main() {\n" + strings.TrimRight(body, "\n") + "\n}"
	if shown != want {
		t.Errorf("README.md's library quick start is not Example_readme's program.\nREADME.md shows:\n%s\n\n%s makes it:\n%s", shown, file, want)
	}
}
