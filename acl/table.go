package acl

import (
	"fmt"
	"slices"
	"strings"

	"github.com/apogeemq/apogee/protocol"
)

// Permission is one row of the permission table: a request code and what
// a user needs to be served it.
type Permission struct {
	Code int32
	Name string // RocketMQ's name of the code ("" if the protocol package names none)
	// Needs says which checks the request makes, in the words of the model:
	// "Pub on Topic:topic", "Update on Cluster (admin rights)", ...
	Needs string
	// Admin is true when the code needs rights on the cluster (Update: admin
	// rights; Get: reading the broker's state).
	Admin bool
}

// Permissions returns the permission every named request code needs (and
// every code of the rules), by code. A code not listed needs what the last
// row, Code -1, says: admin rights.
func Permissions() []Permission {
	codes := protocol.RequestCodes()
	for c := range rules {
		if !slices.Contains(codes, c) {
			codes = append(codes, c)
		}
	}
	slices.Sort(codes)
	out := make([]Permission, 0, len(codes)+1)
	for _, c := range codes {
		r := ruleOf(c)
		out = append(out, Permission{Code: c, Name: protocol.RequestCodeName(c), Needs: r.describe(), Admin: r.kind == kindCluster})
	}
	return append(out, Permission{Code: -1, Name: "any other code", Needs: defaultRule.describe(), Admin: true})
}

// describe words what a rule needs.
func (r rule) describe() string {
	acts := strings.Join(r.actions.Names(), " or ")
	if r.note != "" {
		return r.note
	}
	switch r.kind {
	case kindOpen:
		return "authentication only"
	case kindCluster:
		if r.actions == Get {
			return "Get on Cluster:name (reading the broker's state)"
		}
		return acts + " on Cluster:name (admin rights)"
	case kindFields:
		var rs []string
		for _, f := range r.fields {
			s := f.typ.String() + ":"
			switch {
			case f.key == "":
				s += "* (every " + strings.ToLower(f.typ.String()) + ")"
			case f.split != "":
				s += fmt.Sprintf("each name of %s (%q-separated, when sent)", f.key, f.split)
			default:
				s += f.key
			}
			if f.skipRetry {
				s += " (unless a %RETRY% topic)"
			}
			rs = append(rs, s)
		}
		return acts + " on " + strings.Join(rs, " and ")
	}
	return acts
}

// PermissionTable is Permissions as a Markdown table (docs/security.md).
func PermissionTable() string {
	var b strings.Builder
	b.WriteString("| code | name | needs |\n|---:|---|---|\n")
	for _, p := range Permissions() {
		code := fmt.Sprint(p.Code)
		if p.Code < 0 {
			code = "other"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", code, p.Name, strings.ReplaceAll(p.Needs, "|", "\\|"))
	}
	return b.String()
}
