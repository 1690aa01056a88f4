package proctest

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// Controller is one member of an apogee-controller group that a test
// runs. Its first run binds its remoting and Raft listeners on ports from
// :0; its restarts keep the addresses that run bound (a restarted member
// keeps its identity: its peers and the brokers reach it where they did).
// The group's first member is its seed (--peers ID=127.0.0.1:0, a group of
// one); every other joins through the members started before it (--join),
// as docs/failover.md's "Members on any port" describes.
type Controller struct {
	ID      string
	DataDir string
	// Addr and Raft are the remoting and Raft addresses its first run
	// bound.
	Addr, Raft string
	// Joins are the members it joins through (none for the seed).
	Joins []*Controller
	// Extra flags go to every run (timings, TLS).
	Extra []string
	P     *Proc
}

// StartControllers starts n members on one host, c1 to cN, each running
// bin with extra flags and its data in a temporary directory: c1 the seed,
// each other joining through those before it. It returns once each has
// written its ready file; that each has joined is the caller's to wait for
// (GET_METADATA_INFO's peers list the group as its configuration holds it).
func StartControllers(t testing.TB, bin string, n int, extra ...string) []*Controller {
	t.Helper()
	var cs []*Controller
	for i := range n {
		c := &Controller{ID: fmt.Sprintf("c%d", i+1), DataDir: t.TempDir(), Extra: extra, Joins: slices.Clone(cs)}
		c.P = New(t, "apogee-controller-"+c.ID, bin)
		c.Start()
		cs = append(cs, c)
	}
	return cs
}

// Args are the member's flags for its next run.
func (c *Controller) Args() []string {
	listen, raft := "127.0.0.1:0", "127.0.0.1:0"
	if c.Addr != "" {
		listen, raft = c.Addr, c.Raft
	}
	args := []string{"--id", c.ID, "--listen", listen, "--raft-listen", raft, "--data-dir", c.DataDir}
	if len(c.Joins) == 0 {
		args = append(args, "--peers", c.ID+"=127.0.0.1:0")
	} else {
		args = append(args, "--join", ControllerAddrs(c.Joins))
	}
	return append(args, c.Extra...)
}

// Start runs the member (again) and waits for its ready file; the first
// run records the addresses it bound.
func (c *Controller) Start() {
	c.P.t.Helper()
	c.P.Run(c.Args()...)
	if c.Addr == "" {
		c.Addr, c.Raft = c.P.Ready.Listen, c.P.Ready.Raft
	}
}

// ControllerAddrs is the members' remoting addresses as --controller-addr
// and --join take them ("host:port;host:port").
func ControllerAddrs(cs []*Controller) string {
	a := make([]string, len(cs))
	for i, c := range cs {
		a[i] = c.Addr
	}
	return strings.Join(a, ";")
}
