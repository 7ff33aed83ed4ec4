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

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	type cnt struct{ names, fields, methods int }
	res := map[string]*cnt{}
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
		if err != nil {
			return err
		}
		if f.Name.Name == "main" {
			return nil
		}
		dir, _ := filepath.Rel(root, filepath.Dir(p))
		c := res[dir]
		if c == nil {
			c = &cnt{}
			res[dir] = c
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				if d.Recv != nil {
					c.methods++
				} else {
					c.names++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						c.names++
						if st, ok := s.Type.(*ast.StructType); ok {
							for _, fl := range st.Fields.List {
								for _, n := range fl.Names {
									if n.IsExported() {
										c.fields++
									}
								}
								if len(fl.Names) == 0 {
									c.fields++
								}
							}
						}
						if it, ok := s.Type.(*ast.InterfaceType); ok {
							c.methods += len(it.Methods.List)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								c.names++
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "exported:", err)
		os.Exit(1)
	}
	var ks []string
	for k := range res {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var t, pub cnt
	for _, k := range ks {
		c := res[k]
		fmt.Printf("%-28s names %4d  methods %4d  fields %4d\n", k, c.names, c.methods, c.fields)
		t.names += c.names
		t.methods += c.methods
		t.fields += c.fields
		if k != "internal" && !strings.HasPrefix(k, "internal/") {
			pub.names += c.names
			pub.methods += c.methods
			pub.fields += c.fields
		}
	}
	fmt.Printf("%-28s names %4d  methods %4d  fields %4d\n", "importable (not internal/)", pub.names, pub.methods, pub.fields)
	fmt.Printf("%-28s names %4d  methods %4d  fields %4d\n", "total", t.names, t.methods, t.fields)
}
