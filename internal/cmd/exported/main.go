// Command exported counts the exported names of each package of the module,
// tests and package main left out: top-level names (types, functions,
// constants, variables), methods (interface methods included) and struct
// fields.
//
//	go run ./internal/cmd/exported [ROOT]
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// counts is what one package exports.
type counts struct{ names, methods, fields int }

func (c *counts) add(o counts) {
	c.names += o.names
	c.methods += o.methods
	c.fields += o.fields
}

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	byDir, err := walk(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "exported:", err)
		os.Exit(1)
	}
	dirs := make([]string, 0, len(byDir))
	for d := range byDir {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	var all, importable counts
	for _, d := range dirs {
		c := byDir[d]
		row(d, *c)
		all.add(*c)
		if d != "internal" && !strings.HasPrefix(d, "internal/") {
			importable.add(*c)
		}
	}
	row("importable (not internal/)", importable)
	row("total", all)
}

func row(name string, c counts) {
	fmt.Printf("%-28s names %4d  methods %4d  fields %4d\n", name, c.names, c.methods, c.fields)
}

// walk counts the exports of every package under root, by directory.
func walk(root string) (map[string]*counts, error) {
	byDir := map[string]*counts{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil || f.Name.Name == "main" {
			return err
		}
		dir, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		if byDir[dir] == nil {
			byDir[dir] = &counts{}
		}
		byDir[dir].add(file(f))
		return nil
	})
	return byDir, err
}

// file counts the exports of one file.
func file(f *ast.File) counts {
	var c counts
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			switch {
			case !d.Name.IsExported():
			case d.Recv != nil:
				c.methods++
			default:
				c.names++
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				c.add(spec(s))
			}
		}
	}
	return c
}

// spec counts the exports of one type, constant or variable spec.
func spec(s ast.Spec) counts {
	var c counts
	switch s := s.(type) {
	case *ast.TypeSpec:
		if !s.Name.IsExported() {
			return c
		}
		c.names++
		switch t := s.Type.(type) {
		case *ast.StructType:
			for _, fl := range t.Fields.List {
				c.fields += exportedNames(fl.Names, len(fl.Names) == 0)
			}
		case *ast.InterfaceType:
			c.methods += len(t.Methods.List)
		}
	case *ast.ValueSpec:
		c.names += exportedNames(s.Names, false)
	}
	return c
}

// exportedNames returns how many of names are exported; an embedded field
// (no names) counts as one.
func exportedNames(names []*ast.Ident, embedded bool) int {
	if embedded {
		return 1
	}
	n := 0
	for _, id := range names {
		if id.IsExported() {
			n++
		}
	}
	return n
}
