package core_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoWireFormat keeps the core free of the remoting wire: it imports
// neither remoting (nor namesrv, which serves remoting) and names none of
// protocol's header types (the typed request and response headers, the
// ExtFields they are encoded in, the Command frame). protocol's codes,
// constants and JSON body types are allowed. The import-graph test checks
// packages; this one checks the types used from protocol.
func TestNoWireFormat(t *testing.T) {
	const module = "github.com/apogeemq/apogee/"
	wire := map[string]bool{"ExtFields": true, "Command": true}
	fset := token.NewFileSet()
	headerFiles, err := filepath.Glob("../../protocol/header*.go")
	if err != nil || len(headerFiles) == 0 {
		t.Fatalf("protocol's header files: %v", err)
	}
	for _, path := range headerFiles {
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
	if !wire["SendMessageRequest"] || !wire["PullMessageResponse"] {
		t.Fatalf("the header types were not found: %v", wire)
	}

	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
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
		protocolName := ""
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			switch p {
			case module + "remoting", module + "namesrv":
				t.Errorf("%s imports %s", path, p)
			case module + "protocol":
				protocolName = "protocol"
				if imp.Name != nil {
					protocolName = imp.Name.Name
				}
			}
		}
		if protocolName == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == protocolName && wire[sel.Sel.Name] {
				t.Errorf("%s: uses protocol.%s, a wire header type", fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
	if checked == 0 {
		t.Fatal("no source file checked")
	}
}
