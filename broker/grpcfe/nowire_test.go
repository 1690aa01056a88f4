package grpcfe

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoRemotingWire keeps the gRPC front end off the remoting wire, as
// the core is: it imports neither remoting nor namesrv, and of protocol it
// names no header type (the typed headers, ExtFields, Command), only codes,
// constants and JSON bodies. The import-graph test checks the packages;
// this one the types.
func TestNoRemotingWire(t *testing.T) {
	const module = "github.com/apogeemq/apogee/"
	fset := token.NewFileSet()
	wire := map[string]bool{"ExtFields": true, "Command": true}
	headers, err := filepath.Glob("../../protocol/header*.go")
	if err != nil || len(headers) == 0 {
		t.Fatalf("protocol's header files: %v", err)
	}
	for _, path := range headers {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					wire[s.(*ast.TypeSpec).Name.Name] = true
				}
			}
		}
	}
	if !wire["SendMessageRequest"] {
		t.Fatal("protocol's header types were not found")
	}
	files, _ := filepath.Glob("*.go")
	checked := 0
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		name := ""
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			switch p {
			case module + "remoting", module + "namesrv", module + "broker":
				t.Errorf("%s imports %s", path, p)
			case module + "protocol":
				name = "protocol"
				if imp.Name != nil {
					name = imp.Name.Name
				}
			}
		}
		if name == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == name && wire[sel.Sel.Name] {
					t.Errorf("%s: uses protocol.%s, a remoting header type", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no source file checked")
	}
}
