// Command errgen writes the Go of the messaging core's table of refusal
// reasons, broker/core/errors.json, in the manner of nats-server's
// server/errors.json: one row per reason, code generated from it.
//
// It is run by go generate in the broker/core directory (see
// broker/core/errors.go):
//
//	go generate ./broker/core
//
// and writes two files:
//
//   - broker/core/errors_gen.go: a Reason constant per row (numbered from 1
//     in the table's order; 0 is ReasonNone), the table the Reason methods
//     read (name, remoting code, description), and genericReason, the
//     reason of a bare remoting code;
//   - broker/grpcfe/status_gen.go: reasonCodes, the status code the gRPC
//     front end answers for each reason.
//
// Each row of errors.json is an object:
//
//	constant     the Go identifier, "Reason" followed by an upper-case letter
//	remoting     the RocketMQ remoting response code: a protocol.Resp* constant
//	grpc         the apache.rocketmq.v2 status code: an rmqpb.Code_* name without the prefix
//	description  when the core refuses with it (the constant's doc comment)
//	generic      true for the one row of a remoting code that stands for the
//	             whole code: its sentinel matches every error of the code
//	             (errors.Is), and a bare code maps to it (ReasonOf)
//
// The generator refuses a table it does not understand (an unknown field, a
// duplicate constant, two generic rows of one code, an empty description,
// names that are not identifiers) rather than write code from it. Whether
// the remoting and gRPC names exist is checked by the compiler.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"strings"
)

// The files, relative to the broker/core directory.
const (
	tableName = "errors.json"
	coreName  = "errors_gen.go"
	grpcName  = "../grpcfe/status_gen.go"
)

// row is one reason of errors.json.
type row struct {
	Constant    string `json:"constant"`
	Remoting    string `json:"remoting"`
	GRPC        string `json:"grpc"`
	Description string `json:"description"`
	Generic     bool   `json:"generic"`
}

func main() {
	dir := "."
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	if err := run(dir); err != nil {
		fmt.Fprintln(os.Stderr, "errgen:", err)
		os.Exit(1)
	}
}

func run(dir string) error {
	table, err := os.ReadFile(filepath.Join(dir, tableName))
	if err != nil {
		return err
	}
	coreSrc, grpcSrc, err := Generate(table)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, coreName), coreSrc, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, grpcName), grpcSrc, 0o644)
}

// Generate returns the two files written from a table (errors.json's
// content): broker/core's and broker/grpcfe's.
func Generate(table []byte) (coreSrc, grpcSrc []byte, err error) {
	rows, err := parse(table)
	if err != nil {
		return nil, nil, err
	}
	coreSrc, err = format.Source(coreFile(rows))
	if err != nil {
		return nil, nil, fmt.Errorf("format %s: %w", coreName, err)
	}
	grpcSrc, err = format.Source(grpcFile(rows))
	if err != nil {
		return nil, nil, fmt.Errorf("format %s: %w", grpcName, err)
	}
	return coreSrc, grpcSrc, nil
}

// parse decodes and checks the table.
func parse(table []byte) ([]row, error) {
	dec := json.NewDecoder(bytes.NewReader(table))
	dec.DisallowUnknownFields()
	var rows []row
	if err := dec.Decode(&rows); err != nil {
		return nil, fmt.Errorf("%s: %w", tableName, err)
	}
	if len(rows) == 0 {
		return nil, errors.New(tableName + ": no reasons")
	}
	if len(rows) >= 1<<16 {
		return nil, fmt.Errorf("%s: %d reasons do not fit a uint16", tableName, len(rows))
	}
	constants := map[string]bool{}
	generic := map[string]string{}
	for i, r := range rows {
		where := fmt.Sprintf("%s: row %d (%s)", tableName, i+1, r.Constant)
		name, ok := strings.CutPrefix(r.Constant, "Reason")
		if !ok || !identifier(name) || name[0] < 'A' || name[0] > 'Z' || name == "None" {
			return nil, fmt.Errorf("%s: constant %q is not Reason followed by an exported identifier (nor ReasonNone)", where, r.Constant)
		}
		if constants[r.Constant] {
			return nil, fmt.Errorf("%s: constant %q is listed twice", where, r.Constant)
		}
		constants[r.Constant] = true
		if code, ok := strings.CutPrefix(r.Remoting, "Resp"); !ok || !identifier(code) {
			return nil, fmt.Errorf("%s: remoting %q is not a protocol.Resp* constant", where, r.Remoting)
		}
		if !upperSnake(r.GRPC) {
			return nil, fmt.Errorf("%s: grpc %q is not an rmqpb.Code name (upper case, without Code_)", where, r.GRPC)
		}
		if strings.TrimSpace(r.Description) == "" {
			return nil, fmt.Errorf("%s: no description", where)
		}
		if r.Generic {
			if other, dup := generic[r.Remoting]; dup {
				return nil, fmt.Errorf("%s: %s has two generic reasons, %s and %s", where, r.Remoting, other, r.Constant)
			}
			generic[r.Remoting] = r.Constant
		}
	}
	if generic["RespSystemError"] == "" {
		return nil, errors.New(tableName + ": no generic reason of RespSystemError (the reason of an unknown code)")
	}
	return rows, nil
}

func identifier(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_', i > 0 && c >= '0' && c <= '9':
		default:
			return false
		}
	}
	return true
}

func upperSnake(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'A' && c <= 'Z', c == '_', i > 0 && c >= '0' && c <= '9':
		default:
			return false
		}
	}
	return true
}

const header = "// Code generated by broker/core/internal/errgen from broker/core/errors.json; DO NOT EDIT.\n\n"

func coreFile(rows []row) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("package core\n\nimport \"github.com/apogeemq/apogee/protocol\"\n\n")
	b.WriteString("// The reasons of the core's refusals, one per row of errors.json.\nconst (\n")
	for i, r := range rows {
		comment(&b, "\t", r.Constant+": "+r.Description)
		fmt.Fprintf(&b, "\t%s Reason = %d\n", r.Constant, i+1)
	}
	b.WriteString(")\n\n")
	fmt.Fprintf(&b, "// numReasons is one more than the largest Reason.\nconst numReasons = %d\n\n", len(rows)+1)
	b.WriteString("// reasons is errors.json, indexed by Reason.\nvar reasons = [numReasons]reasonRow{\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "\t%s: {name: %q, code: protocol.%s, generic: %t, description: %q},\n",
			r.Constant, strings.TrimPrefix(r.Constant, "Reason"), r.Remoting, r.Generic, r.Description)
	}
	b.WriteString("}\n\n")
	b.WriteString("// genericReason returns the generic reason of a remoting response code\n")
	b.WriteString("// (ReasonSystemError for a code no row of errors.json stands for).\n")
	b.WriteString("func genericReason(code int32) Reason {\n\tswitch code {\n")
	for _, r := range rows {
		if r.Generic {
			fmt.Fprintf(&b, "\tcase protocol.%s:\n\t\treturn %s\n", r.Remoting, r.Constant)
		}
	}
	b.WriteString("\t}\n\treturn ReasonSystemError\n}\n")
	return b.Bytes()
}

func grpcFile(rows []row) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteString("package grpcfe\n\nimport (\n\t\"github.com/apogeemq/apogee/broker/core\"\n\t\"github.com/apogeemq/apogee/rmqpb\"\n)\n\n")
	b.WriteString("// reasonCodes is the status code answered for each reason of the core\n")
	b.WriteString("// (the grpc column of broker/core/errors.json).\n")
	b.WriteString("var reasonCodes = [...]rmqpb.Code{\n\tcore.ReasonNone: rmqpb.Code_OK,\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "\tcore.%s: rmqpb.Code_%s,\n", r.Constant, r.GRPC)
	}
	b.WriteString("}\n")
	return b.Bytes()
}

// comment writes text as // lines of at most about 76 characters.
func comment(b *bytes.Buffer, indent, text string) {
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > 76 {
			fmt.Fprintf(b, "%s// %s\n", indent, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		fmt.Fprintf(b, "%s// %s\n", indent, line)
	}
}
