package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/apogeemq/apogee/internal/javaprops"
)

// # broker.conf lines that set one option
//
// A key given twice: the last line wins, as with Java's Properties (the
// Java broker reads broker.conf into one), and a WARN names both lines.
//
// Two keys that set one option (aliases, or a key that sets part of what
// another sets): Apogee applies the file's keys in the order of their
// lines, so the later line wins, and a WARN names both when their values
// differ. The Java broker, whose configuration classes have one setter
// per key, gives no order; this is Apogee's rule. One exception: access
// control is on when any of aclEnable, authenticationEnabled,
// authorizationEnabled or aclFile asks for it (a file that asks for ACL
// anywhere gets it), with the same WARN.

// optionPart is what a key sets: an option, or one part of one (the port
// of the gRPC listener), and the value it gives it.
type optionPart struct {
	name  string
	value func(v string) string
}

// as is the value of a key that sets an option whole.
func as(v string) string { return strings.TrimSpace(v) }

// boolish is a boolean key's value, spelt one way.
func boolish(v string) string {
	if b, err := strconv.ParseBool(strings.TrimSpace(v)); err == nil {
		return strconv.FormatBool(b)
	}
	return v
}

// grpcPort is the port grpcListen gives (or "disabled").
func grpcPort(v string) string {
	if v = strings.TrimSpace(v); v == "" {
		return "disabled"
	}
	if _, p, err := net.SplitHostPort(v); err == nil {
		return p
	}
	return v
}

// aclOnRule says how the ACL switches combine.
const aclOnRule = "access control is on when any of them asks for it"

// sharedOptions lists the keys that set an option another key sets too;
// any other key sets an option of its own.
var sharedOptions = map[string][]optionPart{
	"grpcListen":                 {{"the gRPC listener's port", grpcPort}},
	"grpcServerPort":             {{"the gRPC listener's port", as}},
	"mappedFileSizeCommitLog":    {{"the commit-log segment size", as}},
	"mapedFileSizeCommitLog":     {{"the commit-log segment size", as}},
	"mappedFileSizeConsumeQueue": {{"the consume-queue file size", as}},
	"mapedFileSizeConsumeQueue":  {{"the consume-queue file size", as}},
	"aclEnable":                  {{"access control", boolish}},
	"authenticationEnabled":      {{"access control", boolish}},
	"authorizationEnabled":       {{"access control", boolish}},
	"aclFile":                    {{"access control", func(string) string { return "true" }}},
}

// setBy is the line that last set an option.
type setBy struct {
	key, value, part string
	line             int
}

// optionsSet are the options the file's keys set so far.
type optionsSet map[string]setBy

// noteRepeats notes a WARN for every earlier line of p's key.
func (c *config) noteRepeats(p javaprops.Property) {
	for _, r := range p.Replaced {
		c.notes = append(c.notes, note{"broker.conf: a key given twice; the last line wins (as Java's Properties): remove the other line",
			[]any{"key", p.Key, "line", r.Line, "value", r.Value, "winning_line", p.Line, "winning_value", p.Value}})
	}
}

// noteConflict records what p sets, and notes a WARN when another key set
// the same option to another value on an earlier line.
func (c *config) noteConflict(set *optionsSet, p javaprops.Property) {
	parts, ok := sharedOptions[p.Key]
	if !ok {
		return
	}
	if *set == nil {
		*set = optionsSet{}
	}
	for _, part := range parts {
		v := part.value(p.Value)
		prev, seen := (*set)[part.name]
		(*set)[part.name] = setBy{key: p.Key, value: p.Value, part: v, line: p.Line}
		if !seen || prev.key == p.Key || prev.part == v {
			continue
		}
		rule := fmt.Sprintf("the later line (%d, %s) wins", p.Line, p.Key)
		if part.name == "access control" {
			rule = aclOnRule
		}
		c.notes = append(c.notes, note{fmt.Sprintf("broker.conf: two keys set %s; %s: remove one of them", part.name, rule),
			[]any{"key", p.Key, "line", p.Line, "value", p.Value, "other_key", prev.key, "other_line", prev.line, "other_value", prev.value}})
	}
}

// checkNames refuses a required name that is empty: a broker in routes
// without a name, or a cluster without one, is one no client can find.
func (c *config) checkNames() error {
	for _, n := range []struct{ value, key, flag string }{
		{c.brokerName, "brokerName", "--broker-name"},
		{c.cluster, "brokerClusterName", "--cluster"},
		{c.dataDir, "storePathRootDir", "--data-dir"},
	} {
		if strings.TrimSpace(n.value) == "" {
			return fmt.Errorf("%s (%s) is empty: give it a value, or remove the key to keep the default", n.key, n.flag)
		}
	}
	return nil
}

// withoutHost is addr ("host:port") with its host dropped (":port").
func withoutHost(addr string) string {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return net.JoinHostPort("", port)
}

// listenHost is the host every listener without one takes: --listen's
// (bindAddress), 0.0.0.0 when it has none.
func (c *config) listenHost() string {
	if h, _, err := net.SplitHostPort(c.listen); err == nil && h != "" {
		return h
	}
	return "0.0.0.0"
}

// inheritHosts gives the listen host to the embedded name server's, the
// gRPC front end's and the metrics listener's addresses when they name no
// host (their defaults, ":PORT", grpcServerPort alone). The HA listener's
// address is derived at start (haListenAddr), the same way.
func (c *config) inheritHosts() {
	host := c.listenHost()
	inherit := func(addr string) string {
		if addr == "" {
			return "" // disabled
		}
		h, port, err := net.SplitHostPort(addr)
		if err != nil || h != "" {
			return addr
		}
		return net.JoinHostPort(host, port)
	}
	c.namesrvListen = inherit(c.namesrvListen)
	c.grpcListen = inherit(c.grpcListen)
	c.metricsListen = inherit(c.metricsListen)
	c.defaultNamesrv = inherit(withoutHost(defaultNamesrvListen))
	c.defaultGRPC = inherit(withoutHost(defaultGRPCListen))
}
