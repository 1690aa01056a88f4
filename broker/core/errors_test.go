package core_test

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apogeemq/apogee/broker/core"
	"github.com/apogeemq/apogee/protocol"
)

// TestReasons checks the table's accessors and what errors.Is, ReasonOf and
// Code make of the core's errors, a front end's code-only errors and other
// errors.
func TestReasons(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range core.Reasons() {
		if r.String() == "" || seen[r.String()] || r.Description() == "" || r.Code() == protocol.RespSuccess {
			t.Errorf("reason %d: name %q (seen %v), code %d, description %q", r, r.String(), seen[r.String()], r.Code(), r.Description())
		}
		seen[r.String()] = true
	}
	if core.ReasonNone.Code() != protocol.RespSuccess || core.ReasonNone.String() != "None" {
		t.Errorf("ReasonNone: %d %q", core.ReasonNone.Code(), core.ReasonNone.String())
	}

	gate := &core.Error{Reason: core.ReasonFenced, Code: core.ReasonFenced.Code(), Remark: "fenced"}
	wrapped := fmt.Errorf("send: %w", gate)
	cases := []struct {
		name   string
		err    error
		reason core.Reason
		code   int32
	}{
		{"nil", nil, core.ReasonNone, protocol.RespSuccess},
		{"core error", wrapped, core.ReasonFenced, protocol.RespSystemError},
		{"code only", &core.Error{Code: protocol.RespTopicNotExist, Remark: "x"}, core.ReasonTopicNotExist, protocol.RespTopicNotExist},
		{"unknown code", &core.Error{Code: protocol.RespGoAway}, core.ReasonSystemError, protocol.RespGoAway},
		{"reason only", &core.Error{Reason: core.ReasonTopicIllegal}, core.ReasonTopicIllegal, protocol.RespSystemError},
		{"other error", errors.New("x"), core.ReasonSystemError, protocol.RespSystemError},
	}
	for _, tc := range cases {
		if got := core.ReasonOf(tc.err); got != tc.reason {
			t.Errorf("%s: ReasonOf = %v, want %v", tc.name, got, tc.reason)
		}
		if got := core.Code(tc.err); got != tc.code {
			t.Errorf("%s: Code = %d, want %d", tc.name, got, tc.code)
		}
	}

	// A generic sentinel matches its whole code; any other target its reason.
	if !errors.Is(wrapped, core.ErrSystem) {
		t.Error("a SYSTEM_ERROR refusal is not errors.Is ErrSystem")
	}
	if errors.Is(wrapped, core.ErrNoTopic) {
		t.Error("a fenced refusal is errors.Is ErrNoTopic (same code, another reason)")
	}
	if errors.Is(wrapped, core.ErrTopicNotExist) {
		t.Error("a SYSTEM_ERROR refusal is errors.Is ErrTopicNotExist")
	}
	if !errors.Is(fmt.Errorf("x: %w", &core.Error{Reason: core.ReasonResetNoTopic, Code: protocol.RespSystemError}), core.ErrNoTopic) {
		t.Error("a ReasonResetNoTopic refusal is not errors.Is ErrNoTopic")
	}
}

// TestErrorsCarryReasons fails when a non-test file of the core builds an
// Error literal outside errors.go: the core's refusals are built with
// newError and wrapError, which take a Reason and derive the code from it.
func TestErrorsCarryReasons(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == "errors.go" {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.CompositeLit); ok {
				if id, ok := lit.Type.(*ast.Ident); ok && id.Name == "Error" {
					t.Errorf("%s: an Error literal: use newError or wrapError with a Reason", fset.Position(lit.Pos()))
				}
			}
			return true
		})
	}
}
