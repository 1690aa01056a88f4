package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/apogeemq/apogee/client"
	"github.com/apogeemq/apogee/protocol"
)

// The online commands: mqadmin's names and flags, against a running
// cluster through its name server (-n/--namesrv, or NAMESRV_ADDR); a
// command aimed at one broker by its address (-b ADDR, flag brokerAddr)
// needs none and talks to that broker alone. Each
// prints an aligned table (text/tabwriter), or with --json one JSON
// document on the last line of standard output. Exit status: 0 success, 1
// when the cluster refused or failed the operation, 2 on a usage error.

// errUsage marks a usage error (exit status 2).
var errUsage = errors.New("usage")

// command is one mqadmin command.
type command struct {
	name    string
	summary string
	flags   func(fs *pflag.FlagSet)
	run     func(x *cmdCtx) error
	// nsOptional: the command needs no name server (the controller
	// commands: they talk to -a's controllers), though it may use one.
	nsOptional bool
}

// brokerAddrFlag is the long name of -b where it is a broker's address
// (elsewhere -b is a broker name, or a time): a command that has it can
// run without a name server when it is given.
const brokerAddrFlag = "brokerAddr"

// targetsBroker reports whether the command takes -b BROKER_ADDR.
func (c *command) targetsBroker() bool {
	if c.flags == nil {
		return false
	}
	fs := pflag.NewFlagSet(c.name, pflag.ContinueOnError)
	c.flags(fs)
	return fs.Lookup(brokerAddrFlag) != nil
}

// direct reports whether the parsed command line aims at one broker by its
// address (-b ADDR), so that no name server is needed.
func (c *command) direct(fs *pflag.FlagSet) bool {
	f := fs.Lookup(brokerAddrFlag)
	return f != nil && strings.TrimSpace(f.Value.String()) != ""
}

// cmdCtx is what a command runs with.
type cmdCtx struct {
	ctx    context.Context
	fs     *pflag.FlagSet
	stdout io.Writer
	stderr io.Writer
	json   bool
	nsList string
	admin  *client.Admin
	doc    any // the --json document
	// docPrinted: the command printed its documents itself (a command
	// repeated with -i prints one a round).
	docPrinted bool
}

func (x *cmdCtx) str(name string) string { v, _ := x.fs.GetString(name); return strings.TrimSpace(v) }

func (x *cmdCtx) has(name string) bool { return x.fs.Changed(name) }

func (x *cmdCtx) need(names ...string) error {
	for _, n := range names {
		if x.str(n) == "" {
			return fmt.Errorf("%w: --%s is required", errUsage, n)
		}
	}
	return nil
}

func (x *cmdCtx) int64(name string, def int64) (int64, error) {
	s := x.str(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: --%s %q is not a number", errUsage, name, s)
	}
	return v, nil
}

func (x *cmdCtx) bool(name string, def bool) (bool, error) {
	s := x.str(name)
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%w: --%s %q is not true or false", errUsage, name, s)
	}
	return v, nil
}

// table prints rows under headers, aligned, unless --json.
func (x *cmdCtx) table(headers []string, rows [][]string) {
	if x.json {
		return
	}
	tw := tabwriter.NewWriter(x.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#"+strings.Join(headers, "\t#"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// say prints a line unless --json.
func (x *cmdCtx) say(format string, args ...any) {
	if !x.json {
		fmt.Fprintf(x.stdout, format+"\n", args...)
	}
}

// broker is a broker's name and master address.
type broker struct {
	Cluster string `json:"cluster"`
	Name    string `json:"brokerName"`
	Addr    string `json:"brokerAddr"`
}

// brokers returns the master brokers: the one at -b, or those of cluster
// -c, or (all) every master when neither is given and all is set.
func (x *cmdCtx) brokers(all bool) ([]broker, error) {
	if addr := x.flagString("b"); addr != "" {
		if x.nsList == "" {
			return []broker{{Addr: addr}}, nil // no name server to name it
		}
		ci, err := x.admin.ClusterInfo(x.ctx)
		if err == nil {
			for _, bd := range ci.BrokerAddrTable {
				for _, a := range bd.BrokerAddrs {
					if a == addr {
						return []broker{{Cluster: bd.Cluster, Name: bd.BrokerName, Addr: addr}}, nil
					}
				}
			}
		}
		return []broker{{Addr: addr}}, nil
	}
	cluster := x.flagString("c")
	if cluster == "" && !all {
		return nil, fmt.Errorf("%w: give -b BROKER_ADDR or -c CLUSTER", errUsage)
	}
	ci, err := x.admin.ClusterInfo(x.ctx)
	if err != nil {
		return nil, err
	}
	var out []broker
	for c, names := range ci.ClusterAddrTable {
		if cluster != "" && c != cluster {
			continue
		}
		for _, n := range names {
			bd, ok := ci.BrokerAddrTable[n]
			if !ok || bd.BrokerAddrs[0] == "" {
				continue
			}
			out = append(out, broker{Cluster: c, Name: n, Addr: bd.BrokerAddrs[0]})
		}
	}
	if len(out) == 0 {
		if cluster != "" {
			return nil, fmt.Errorf("no master broker in cluster %q", cluster)
		}
		return nil, errors.New("no master broker registered with the name server")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster+"/"+out[i].Name < out[j].Cluster+"/"+out[j].Name })
	return out, nil
}

// flagString reads a flag by its one-letter name, whichever long name the
// command gave it.
func (x *cmdCtx) flagString(short string) string {
	f := x.fs.ShorthandLookup(short)
	if f == nil {
		return ""
	}
	return strings.TrimSpace(f.Value.String())
}

// topicBrokers returns a topic's brokers (name → master address) from its route.
func (x *cmdCtx) topicBrokers(topic string) ([]broker, error) {
	rd, err := x.admin.TopicRoute(x.ctx, topic)
	if err != nil {
		return nil, err
	}
	var out []broker
	for _, bd := range rd.BrokerDatas {
		if a := bd.BrokerAddrs[0]; a != "" {
			out = append(out, broker{Cluster: bd.Cluster, Name: bd.BrokerName, Addr: a})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	if len(out) == 0 {
		return nil, fmt.Errorf("topic %q has no master broker", topic)
	}
	return out, nil
}

func fmtTime(ms int64) string {
	if ms <= 0 {
		return "N/A"
	}
	return time.UnixMilli(ms).Format("2006-01-02 15:04:05")
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// commands are mqadmin's, by lower-case name.
var commands = map[string]*command{}

func register(c *command) { commands[strings.ToLower(c.name)] = c }

// runOnline runs an online command; false when name is none.
func runOnline(name string, args []string, stdout, stderr io.Writer) (int, bool) {
	c, ok := commands[strings.ToLower(name)]
	if !ok {
		return 0, false
	}
	fs := pflag.NewFlagSet("apogee-admin "+c.name, pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringP("namesrv", "n", "", "name server address list, host:port;host:port (default $NAMESRV_ADDR)")
	asJSON := fs.Bool("json", false, "print one JSON document on the last line instead of a table")
	timeout := fs.Duration("timeout", 10*time.Second, "time limit of the whole command")
	sec := addSecurityFlags(fs)
	if c.flags != nil {
		c.flags(fs)
	}
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: apogee-admin %s [flags]\n%s\n\n", c.name, c.summary)
		fs.PrintDefaults()
	}
	if err := fs.Parse(mqadminArgs(args)); err != nil {
		return flagError(fs, c.name, err, stderr), true
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "apogee-admin %s: unexpected arguments %q: every value goes with its flag (run \"apogee-admin %s --help\")\n",
			c.name, fs.Args(), c.name)
		return 2, true
	}
	ns, _ := fs.GetString("namesrv")
	if ns == "" {
		ns = os.Getenv("NAMESRV_ADDR")
	}
	nsOpt := client.NameServer(ns)
	if ns == "" {
		// A command aimed at one broker (-b ADDR) talks to it directly, as
		// mqadmin does: no name server needed.
		if !c.direct(fs) && !c.nsOptional {
			hint := ""
			if c.targetsBroker() {
				hint = ", or -b BROKER_ADDR to talk to one broker directly"
			}
			fmt.Fprintf(stderr, "apogee-admin: no name server: give -n host:port or set NAMESRV_ADDR%s\n", hint)
			return 2, true
		}
		nsOpt = client.DirectOnly()
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	secOpts, err := sec.options()
	if err != nil {
		fmt.Fprintln(stderr, "apogee-admin:", err)
		return 2, true
	}
	admin, err := client.NewAdmin(append([]client.AdminOpt{nsOpt, client.InstanceName(fmt.Sprintf("apogee-admin-%d", os.Getpid()))}, secOpts...)...)
	if err != nil {
		fmt.Fprintln(stderr, "apogee-admin:", err)
		return 2, true
	}
	defer admin.Close(context.Background())
	x := &cmdCtx{ctx: ctx, fs: fs, stdout: stdout, stderr: stderr, json: *asJSON, nsList: ns, admin: admin}
	err = c.run(x)
	if err != nil {
		fmt.Fprintf(stderr, "apogee-admin %s: %v\n", c.name, err)
		if errors.Is(err, errUsage) {
			return 2, true
		}
		return 1, true
	}
	if x.json && !x.docPrinted {
		doc := x.doc
		if doc == nil {
			doc = map[string]any{"ok": true}
		}
		b, err := json.Marshal(doc)
		if err != nil {
			fmt.Fprintln(stderr, "apogee-admin:", err)
			return 1, true
		}
		fmt.Fprintln(stdout, string(b))
	}
	return 0, true
}

// commandList is the usage text's list of online commands.
func commandList() string {
	names := make([]string, 0, len(commands))
	for _, c := range commands {
		names = append(names, c.name)
	}
	sort.Slice(names, func(i, j int) bool { return strings.ToLower(names[i]) < strings.ToLower(names[j]) })
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "  %-22s %s\n", n, commands[strings.ToLower(n)].summary)
	}
	return b.String()
}

// parsePerm reads mqadmin's -p (2 write, 4 read, 6 read-write).
func parsePerm(s string) (int32, error) {
	v, err := strconv.Atoi(s)
	if err != nil || (v != 2 && v != 4 && v != 6) {
		return 0, fmt.Errorf("%w: perm %q: 2 (write), 4 (read) or 6 (read-write)", errUsage, s)
	}
	return int32(v), nil
}

var _ = protocol.PermRead
