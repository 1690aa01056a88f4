package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedFilesAreCurrent fails when broker/core/errors_gen.go or
// broker/grpcfe/status_gen.go is not what broker/core/errors.json
// generates: run go generate ./broker/core.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	dir := "../.."
	table, err := os.ReadFile(filepath.Join(dir, tableName))
	if err != nil {
		t.Fatal(err)
	}
	coreSrc, grpcSrc, err := Generate(table)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{coreName: coreSrc, grpcName: grpcSrc} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is out of date: run go generate ./broker/core", name)
		}
	}
}

// TestGenerateRejects feeds tables the generator must refuse.
func TestGenerateRejects(t *testing.T) {
	const sys = `{"constant": "ReasonSystemError", "remoting": "RespSystemError", "grpc": "INTERNAL_SERVER_ERROR", "generic": true, "description": "d"}`
	cases := []struct {
		name, table, want string
	}{
		{"not JSON", `[`, "errors.json"},
		{"empty", `[]`, "no reasons"},
		{"unknown field", `[` + sys + `, {"constant": "ReasonX", "remoting": "RespSystemError", "grpc": "OK", "descripton": "d"}]`, "unknown field"},
		{"no prefix", `[` + sys + `, {"constant": "X", "remoting": "RespSystemError", "grpc": "OK", "description": "d"}]`, `constant "X"`},
		{"unexported", `[` + sys + `, {"constant": "Reasonx", "remoting": "RespSystemError", "grpc": "OK", "description": "d"}]`, `constant "Reasonx"`},
		{"ReasonNone", `[` + sys + `, {"constant": "ReasonNone", "remoting": "RespSystemError", "grpc": "OK", "description": "d"}]`, `constant "ReasonNone"`},
		{"duplicate", `[` + sys + `, ` + strings.Replace(sys, `"generic": true, `, "", 1) + `]`, "listed twice"},
		{"bad remoting", `[` + sys + `, {"constant": "ReasonX", "remoting": "SystemError", "grpc": "OK", "description": "d"}]`, `remoting "SystemError"`},
		{"bad grpc", `[` + sys + `, {"constant": "ReasonX", "remoting": "RespSystemError", "grpc": "Code_OK", "description": "d"}]`, `grpc "Code_OK"`},
		{"no description", `[` + sys + `, {"constant": "ReasonX", "remoting": "RespSystemError", "grpc": "OK", "description": " "}]`, "no description"},
		{"two generic", `[` + sys + `, {"constant": "ReasonX", "remoting": "RespSystemError", "grpc": "OK", "generic": true, "description": "d"}]`, "two generic reasons"},
		{"no system error", `[{"constant": "ReasonX", "remoting": "RespSystemBusy", "grpc": "OK", "description": "d"}]`, "no generic reason of RespSystemError"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Generate([]byte(tc.table))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Generate: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
