package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGeneratedFileIsCurrent fails when protocol/headers_gen.go is not what
// the header tables in protocol/header_*.go generate: run go generate.
func TestGeneratedFileIsCurrent(t *testing.T) {
	want, err := Generate("../..")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("../..", outName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("protocol/%s is out of date: run go generate ./protocol", outName)
	}
}

// TestGenerateRejects feeds tables the generator must refuse, each in a
// package of its own.
func TestGenerateRejects(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"unknown option", "type H struct { A string `rmq:\"a,requried\"` }", `unknown option "requried"`},
		{"empty key", "type H struct { A string `rmq:\",required\"` }", "empty key"},
		{"duplicate key", "type H struct { A string `rmq:\"a\"`\nB string `rmq:\"b,alias=a\"` }", `key "a" is used by both A and B`},
		{"short clashes", "type H struct { A string `rmq:\"a,short=x\"`\nB string `rmq:\"x\"` }", `key "x" is used by both A and B`},
		{"unsupported type", "type H struct { A int `rmq:\"a\"` }", "unsupported type"},
		{"default on a string", "type H struct { A string `rmq:\"a,default=1\"` }", "default= needs an integer field"},
		{"default out of range", "type H struct { A int32 `rmq:\"a,default=4294967296\"` }", "default=4294967296"},
		{"has without flag", "type H struct { A int32 `rmq:\"a,has=HasA\"` }", "no untagged bool field"},
		{"has on a required field", "type H struct { A int32 `rmq:\"a,required,has=HasA\"`\nHasA bool }", "a required field is always present"},
		{"has with omitempty", "type H struct { A int32 `rmq:\"a,omitempty,has=HasA\"`\nHasA bool }", "omitempty and default= do not apply"},
		{"has flag shared", "type H struct { A int32 `rmq:\"a,has=F\"`\nB int32 `rmq:\"b,has=F\"`\nF bool }", "already serves another field"},
		{"two names", "type H struct { A, B string `rmq:\"a\"` }", "declare each tagged field on its own"},
		{"no headers", "type H struct { A string }", "no struct with rmq tags"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			src := "package protocol\n\n" + tc.src + "\n"
			if err := os.WriteFile(filepath.Join(dir, "h.go"), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Generate(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Generate: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestGenerateSkips checks that test files, the generated file itself and
// type aliases are not read as tables.
func TestGenerateSkips(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"h.go":      "package protocol\n\ntype H struct {\n\tA []byte `rmq:\"a,required\"`\n}\n\ntype Alias = H\n",
		"h_test.go": "package protocol\n\ntype T struct {\n\tB string `rmq:\"b\"`\n}\n",
		outName:     generatedMarker + "\n\npackage protocol\n\ntype G struct {\n\tC string `rmq:\"c\"`\n}\n",
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src, err := Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	if !strings.Contains(s, "func (h *H) Decode(") || !strings.Contains(s, "func (h *H) Encode(") {
		t.Fatalf("no codec for H:\n%s", s)
	}
	for _, other := range []string{"(h *T)", "(h *G)", "(h *Alias)", "EncodeV2"} {
		if strings.Contains(s, other) {
			t.Fatalf("generated %s:\n%s", other, s)
		}
	}
}
