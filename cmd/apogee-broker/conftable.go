package main

import (
	"fmt"
	"slices"
	"strings"
)

// The markers around the generated key table in docs/operations.md.
const (
	tableBegin = "<!-- broker.conf keys: generated from cmd/apogee-broker (go test ./cmd/apogee-broker -run TestKeyTableInDocs -update) -->"
	tableEnd   = "<!-- end of broker.conf keys -->"
)

// keyTable renders every key of the Java broker's configuration as Markdown:
// the keys Apogee applies, one row each with its mapping, then the keys it
// accepts and ignores, grouped by the reason their WARN gives.
func keyTable() string {
	var b strings.Builder
	b.WriteString("Keys Apogee applies:\n\n| key | Java class | flag that wins | what Apogee does |\n|---|---|---|---|\n")
	for _, c := range javaKeys {
		for _, k := range c.keys {
			h, ok := honoured[k]
			if !ok || javaKeyClass[k][0] != c.name {
				continue
			}
			flag := ""
			if h.flag != "" {
				flag = "`--" + h.flag + "`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", k, strings.Join(javaKeyClass[k], ", "), flag, h.doc)
		}
	}
	var reasons []string
	byReason := map[string][]string{}
	for _, c := range javaKeys {
		for _, k := range c.keys {
			if _, ok := honoured[k]; ok || javaKeyClass[k][0] != c.name {
				continue
			}
			r := ignoredReason(k)
			if _, ok := byReason[r]; !ok {
				reasons = append(reasons, r)
			}
			byReason[r] = append(byReason[r], k)
		}
	}
	slices.SortStableFunc(reasons, func(a, b string) int { return len(byReason[b]) - len(byReason[a]) })
	n := 0
	for _, r := range reasons {
		n += len(byReason[r])
	}
	fmt.Fprintf(&b, "\nKeys accepted and ignored, each with one WARN line that names it and gives the reason (%d keys):\n\n| reason | keys |\n|---|---|\n", n)
	for _, r := range reasons {
		ks := slices.Clone(byReason[r])
		slices.Sort(ks)
		fmt.Fprintf(&b, "| %s | `%s` |\n", r, strings.Join(ks, "`, `"))
	}
	return b.String()
}
