package errtext

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// matchFuncs are the functions of strings and bytes that look into a text
// (a branch on its content when the text is an error's).
var matchFuncs = map[string]bool{
	"Contains": true, "ContainsAny": true, "ContainsRune": true, "ContainsFunc": true,
	"HasPrefix": true, "HasSuffix": true, "Index": true, "IndexAny": true, "IndexByte": true,
	"IndexRune": true, "IndexFunc": true, "LastIndex": true, "LastIndexAny": true, "LastIndexByte": true,
	"EqualFold": true, "Compare": true, "Cut": true, "CutPrefix": true, "CutSuffix": true, "Count": true,
}

// regexpFuncs are the methods of *regexp.Regexp (and regexp's functions)
// that match a text.
var regexpFuncs = map[string]bool{
	"MatchString": true, "Match": true, "FindString": true, "FindStringIndex": true,
	"FindStringSubmatch": true, "FindAllString": true,
}

// allowed lists the functions (by file and name) that may compare an
// error's text: none.
var allowed = map[string]string{}

// TestNoBranchOnErrorText walks the repository's non-test, non-generated Go
// files and reports every place that matches an error's text.
func TestNoBranchOnErrorText(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the repository root %s has no go.mod: %v", root, err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		files++
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		for _, f := range check(t, path, allowed[rel]) {
			t.Errorf("%s:%s", rel, f)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("checked only %d files under %s", files, root)
	}
}

// TestCheckFinds feeds check the forms it must report and the ones it must
// let through.
func TestCheckFinds(t *testing.T) {
	src := `package p

import (
	"regexp"
	"strings"
)

var re = regexp.MustCompile("x")

func bad(err error, resp struct{ Remark []byte }) bool {
	if strings.Contains(err.Error(), "wrong") { // 1
		return true
	}
	if err.Error() == "x" { // 2
		return true
	}
	switch err.Error() { // 3
	case "a":
	}
	if strings.HasPrefix(string(resp.Remark), "in-sync") { // 4
		return true
	}
	msg := err.Error()
	if strings.HasSuffix(msg, "!") { // 5
		return true
	}
	return re.MatchString(core.Remark(err)) // 6
}

func good(err error, resp struct{ Remark string }, f interface{ Error() error }) string {
	if f.Error() != nil || resp.Remark == "" || resp.Remark != "" {
		return "x: " + err.Error()
	}
	return strings.TrimSpace(resp.Remark)
}
`
	dir := t.TempDir()
	path := filepath.Join(dir, "p.go")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	got := check(t, path, "")
	if len(got) != 6 {
		t.Fatalf("check found %d, want 6:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// check returns the places of a file that match on error text ("line:
// what"), none for a generated file, none in the function named allow.
func check(t *testing.T, path, allow string) []string {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		t.Errorf("parse %s: %v", path, err)
		return nil
	}
	if ast.IsGenerated(f) {
		return nil
	}
	var found []string
	report := func(n ast.Node, what string) {
		found = append(found, strconv.Itoa(fset.Position(n.Pos()).Line)+": "+what)
	}
	for _, decl := range f.Decls {
		if allow != "" && funcName(decl) == allow {
			continue
		}
		c := &checker{tainted: map[string]bool{}}
		// Names assigned from error text, in this declaration (twice, so
		// that a name assigned from another tainted name is caught).
		for range 2 {
			ast.Inspect(decl, c.taint)
		}
		ast.Inspect(decl, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CallExpr:
				sel, ok := n.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				pkg, _ := sel.X.(*ast.Ident)
				isStrings := pkg != nil && (pkg.Name == "strings" || pkg.Name == "bytes") && matchFuncs[sel.Sel.Name]
				if isStrings || regexpFuncs[sel.Sel.Name] {
					for _, a := range n.Args {
						if c.text(a) {
							report(n, "matches an error's text with "+sel.Sel.Name)
							break
						}
					}
				}
			case *ast.BinaryExpr:
				if (n.Op == token.EQL || n.Op == token.NEQ) && !trivial(n.X) && !trivial(n.Y) && (c.text(n.X) || c.text(n.Y)) {
					report(n, "compares an error's text")
				}
			case *ast.SwitchStmt:
				if n.Tag != nil && c.text(n.Tag) {
					report(n, "switches on an error's text")
				}
			}
			return true
		})
	}
	return found
}

type checker struct {
	tainted map[string]bool
}

// taint records the names assigned from error text.
func (c *checker) taint(n ast.Node) bool {
	switch n := n.(type) {
	case *ast.AssignStmt:
		if len(n.Lhs) != len(n.Rhs) {
			return true
		}
		for i, r := range n.Rhs {
			if id, ok := n.Lhs[i].(*ast.Ident); ok && id.Name != "_" && c.text(r) {
				c.tainted[id.Name] = true
			}
		}
	case *ast.ValueSpec:
		if len(n.Names) != len(n.Values) {
			return true
		}
		for i, v := range n.Values {
			if c.text(v) {
				c.tainted[n.Names[i].Name] = true
			}
		}
	}
	return true
}

// text reports whether e holds error text: a call of an Error method, a
// Remark field or function, or a name assigned from them.
func (c *checker) text(e ast.Expr) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if found {
			return false
		}
		switch n := n.(type) {
		case *ast.FuncLit:
			return false
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Error" && len(n.Args) == 0 {
				found = true
			}
		case *ast.SelectorExpr:
			if n.Sel.Name == "Remark" {
				found = true
			}
		case *ast.Ident:
			if c.tainted[n.Name] {
				found = true
			}
		}
		return !found
	})
	return found
}

// trivial reports whether e is nil or the empty string: a comparison with
// it tests presence, not content.
func trivial(e ast.Expr) bool {
	if id, ok := e.(*ast.Ident); ok && id.Name == "nil" {
		return true
	}
	lit, ok := e.(*ast.BasicLit)
	return ok && lit.Kind == token.STRING && (lit.Value == `""` || lit.Value == "``")
}

// funcName returns a function declaration's name, "(*T).M" or "(T).M" for
// a method, "" for other declarations.
func funcName(decl ast.Decl) string {
	fd, ok := decl.(*ast.FuncDecl)
	if !ok {
		return ""
	}
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	switch r := fd.Recv.List[0].Type.(type) {
	case *ast.StarExpr:
		if id, ok := r.X.(*ast.Ident); ok {
			return "(*" + id.Name + ")." + fd.Name.Name
		}
	case *ast.Ident:
		return "(" + r.Name + ")." + fd.Name.Name
	}
	return fd.Name.Name
}
