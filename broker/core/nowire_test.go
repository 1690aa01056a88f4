package core_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestNoWireFormat keeps the core free of the remoting wire: it imports
// neither remoting (nor namesrv, which serves remoting) and names none of
// protocol's header types (the typed request and response headers, the
// ExtFields they are encoded in, the Command frame), and none of the JSON
// bodies of the remoting protocol (the types of protocol's body files with
// an Encode method or documented as a body) but those listed in
// bodiesAllowed: the remoting front end builds and decodes the bodies from
// the core's own types (TopicTable, GroupTable, OffsetTable,
// ConsumeQueueEntries, GroupStats, BrokerGroupStats, TopicQueueStats,
// StatsWindows, []protocol.Connection). The configuration tables' state
// files (topics.json, subscriptionGroup.json, consumerOffset.json) have
// the shape of the tables' bodies, so the managers that read and write
// them (topicManager, groupManager, offsetManager) may use those three
// wrappers as the files' codec, and nothing else in the core may.
// protocol's codes, constants and value types (TopicConfig, MessageQueue,
// OffsetWrapper, ...) are allowed. The import-graph test checks packages;
// this one checks the types used from protocol.
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

	bodies := map[string]bool{}
	bodyFiles, err := filepath.Glob("../../protocol/bodies*.go")
	if err != nil || len(bodyFiles) == 0 {
		t.Fatalf("protocol's body files: %v", err)
	}
	for _, path := range bodyFiles {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.Name == "Encode" && d.Recv != nil {
					if name := recvTypeName(d); name != "" {
						bodies[name] = true
					}
				}
			case *ast.GenDecl:
				// A type documented as a body ("X is the body of ...",
				// "X is GET_...'s (208) body"), not as one element of one.
				if d.Tok != token.TYPE {
					continue
				}
				for _, sp := range d.Specs {
					ts := sp.(*ast.TypeSpec)
					doc := ts.Doc
					if doc == nil {
						doc = d.Doc
					}
					if doc == nil {
						continue
					}
					first, _, _ := strings.Cut(doc.Text(), "\n")
					if bodyDoc.MatchString(first) && !strings.HasPrefix(first, ts.Name.Name+" is one ") {
						bodies[ts.Name.Name] = true
					}
				}
			}
		}
	}
	for _, name := range []string{"TopicConfigSerializeWrapper", "ConsumerOffsetSerializeWrapper", "QueryConsumeQueueResponseBody", "ProducerConnection", "BrokerStatsData"} {
		if !bodies[name] {
			t.Fatalf("the body type %s was not found: %v", name, bodies)
		}
	}
	if bodies["TopicConfig"] || bodies["MessageQueue"] || bodies["OffsetWrapper"] {
		t.Fatalf("value types taken for bodies: %v", bodies)
	}
	// The one body the core still names: the heartbeat, which both front
	// ends hand to Heartbeat (the gRPC one builds it from its own request).
	bodiesAllowed := map[string]bool{"HeartbeatData": true}
	// The state files' codecs, allowed in their managers' methods only.
	stateFiles := map[string]bool{"TopicConfigSerializeWrapper": true, "SubscriptionGroupWrapper": true, "ConsumerOffsetSerializeWrapper": true}
	managers := map[string]bool{"topicManager": true, "groupManager": true, "offsetManager": true}

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
		for _, d := range f.Decls {
			inManager := false
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv != nil {
				inManager = managers[recvTypeName(fd)]
			}
			ast.Inspect(d, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				id, ok := sel.X.(*ast.Ident)
				if !ok || id.Name != protocolName {
					return true
				}
				name := sel.Sel.Name
				switch {
				case wire[name]:
					t.Errorf("%s: uses protocol.%s, a wire header type", fset.Position(sel.Pos()), name)
				case bodies[name] && !bodiesAllowed[name] && !(stateFiles[name] && inManager):
					t.Errorf("%s: uses protocol.%s, a remoting JSON body (the front end builds it from the core's types)", fset.Position(sel.Pos()), name)
				}
				return true
			})
		}
	}
	if checked == 0 {
		t.Fatal("no source file checked")
	}
}

// bodyDoc matches the first line of a body type's doc comment.
var bodyDoc = regexp.MustCompile(`\bbody\b`)

// recvTypeName returns the name of a method's receiver type ("" for a
// function).
func recvTypeName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	x := fd.Recv.List[0].Type
	if st, ok := x.(*ast.StarExpr); ok {
		x = st.X
	}
	if id, ok := x.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}
