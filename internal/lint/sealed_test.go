package lint

import (
	"go/ast"
	"strconv"
	"strings"
	"testing"
)

// TestSealedEngine checks that no exported API of table hands out a Pebble
// type: exported functions and methods (of exported types) take and return
// none, and exported types hold none in exported fields.
func TestSealedEngine(t *testing.T) {
	for _, f := range parseModule(t) {
		if f.dir != "table" || f.test {
			continue
		}
		pebble := map[string]bool{} // local names of the Pebble imports
		for _, imp := range f.ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if !strings.HasPrefix(path, "github.com/cockroachdb/pebble") {
				continue
			}
			name := path[strings.LastIndex(path, "/")+1:]
			if name == "v2" {
				name = "pebble"
			}
			if imp.Name != nil {
				name = imp.Name.Name
			}
			pebble[name] = true
		}
		if len(pebble) == 0 {
			continue
		}
		mentions := func(n ast.Node) (found string) {
			ast.Inspect(n, func(n ast.Node) bool {
				if s, ok := n.(*ast.SelectorExpr); ok {
					if id, ok := s.X.(*ast.Ident); ok && pebble[id.Name] {
						found = id.Name + "." + s.Sel.Name
					}
				}
				return found == ""
			})
			return found
		}
		for _, d := range f.ast.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || (d.Recv != nil && !exportedRecv(d.Recv)) {
					continue
				}
				if p := mentions(d.Type); p != "" {
					t.Errorf("%s: %s hands out %s: Pebble stays inside storage and table", f.rel, d.Name.Name, p)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok || !ts.Name.IsExported() {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						if p := mentions(ts.Type); p != "" {
							t.Errorf("%s: type %s is %s: Pebble stays inside storage and table", f.rel, ts.Name.Name, p)
						}
						continue
					}
					for _, fl := range st.Fields.List {
						for _, n := range fl.Names {
							if p := mentions(fl.Type); n.IsExported() && p != "" {
								t.Errorf("%s: %s.%s holds %s: Pebble stays inside storage and table", f.rel, ts.Name.Name, n.Name, p)
							}
						}
					}
				}
			}
		}
	}
}

// exportedRecv reports whether a method's receiver type is exported.
func exportedRecv(r *ast.FieldList) bool {
	t := r.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	if g, ok := t.(*ast.IndexExpr); ok {
		t = g.X
	}
	id, ok := t.(*ast.Ident)
	return ok && id.IsExported()
}
