package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apogeemq/apogee/internal/vfs"
	"github.com/apogeemq/apogee/protocol"
)

// groupManager owns the subscription-group table and
// config/subscriptionGroup.json. Groups are created on first use (heartbeat
// or pull), as RocketMQ's autoCreateSubscriptionGroup does. A change is
// O(1) under mu; the file is written whole by the core's background
// stateWriter (persist), coalescing the changes made meanwhile.
type groupManager struct {
	fs    vfs.FS // load reads the file through it (Options.FS)
	path  string
	write func(string, []byte) error
	log   *slog.Logger

	mu      sync.RWMutex
	m       map[string]*protocol.SubscriptionGroupConfig // values immutable once published
	logOffs map[string]int64                             // offset of the record that set a group (configlog.go); absent: none did
	version protocol.DataVersion
	changes uint64 // bumped by every change of m

	persistMu sync.Mutex // serialises file writes; taken before mu
	persisted uint64     // changes covered by the last successful write (under persistMu)
}

func newGroupManager(fsys vfs.FS, path string, write func(string, []byte) error, log *slog.Logger) *groupManager {
	return &groupManager{fs: fsys, path: path, write: write, log: log, m: make(map[string]*protocol.SubscriptionGroupConfig)}
}

// load reads subscriptionGroup.json (or its previous version, see
// loadStateFile) if it exists.
func (g *groupManager) load() error {
	w, found, fellBack, err := loadStateFile(g.fs, g.path, g.log, func(b []byte) (protocol.SubscriptionGroupWrapper, error) {
		var w protocol.SubscriptionGroupWrapper
		return w, w.Decode(b)
	})
	if err != nil || !found {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for name, c := range w.SubscriptionGroupTable {
		if c == nil {
			continue
		}
		cfg := *c
		if cfg.GroupName == "" {
			cfg.GroupName = name
		}
		g.m[cfg.GroupName] = &cfg
	}
	g.version = w.DataVersion
	if fellBack {
		g.changes++ // write subscriptionGroup.json again
	}
	return nil
}

// get returns the group's configuration or nil. It does not allocate.
func (g *groupManager) get(name []byte) *protocol.SubscriptionGroupConfig {
	g.mu.RLock()
	c := g.m[string(name)]
	g.mu.RUnlock()
	return c
}

// bump records a change; g.mu must be held.
func (g *groupManager) bump() {
	g.version.Timestamp = time.Now().UnixMilli()
	g.version.Counter++
	g.changes++
}

// encode returns the table as JSON. It is O(groups).
func (g *groupManager) encode() ([]byte, error) {
	w := g.wrapper()
	return w.Encode()
}

// wrapper returns the table in subscriptionGroup.json's shape. O(groups).
func (g *groupManager) wrapper() protocol.SubscriptionGroupWrapper {
	g.mu.RLock()
	w := protocol.SubscriptionGroupWrapper{
		SubscriptionGroupTable: make(map[string]*protocol.SubscriptionGroupConfig, len(g.m)),
		DataVersion:            g.version,
	}
	for k, v := range g.m {
		w.SubscriptionGroupTable[k] = v // immutable once published
	}
	g.mu.RUnlock()
	return w
}

func (g *groupManager) names() []string {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make([]string, 0, len(g.m))
	for k := range g.m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// persist writes subscriptionGroup.json if the table changed since the last
// successful write, or always with force.
func (g *groupManager) persist(force bool) error {
	g.persistMu.Lock()
	defer g.persistMu.Unlock()
	g.mu.RLock()
	changes := g.changes
	g.mu.RUnlock()
	if changes == g.persisted && !force {
		return nil
	}
	b, err := g.encode() // covers at least changes
	if err != nil {
		return fmt.Errorf("broker: encode subscription groups: %w", err)
	}
	if err := g.write(g.path, b); err != nil {
		return err
	}
	g.persisted = changes
	return nil
}

// put creates or replaces a group's configuration (set by no record).
func (g *groupManager) put(cfg protocol.SubscriptionGroupConfig) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c := cfg
	g.m[c.GroupName] = &c
	delete(g.logOffs, c.GroupName)
	g.bump()
}

// putAt creates or replaces a group's configuration as the configuration
// record at off sets it and reports whether the configuration changed.
func (g *groupManager) putAt(cfg protocol.SubscriptionGroupConfig, off int64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.logOffs == nil {
		g.logOffs = make(map[string]int64)
	}
	g.logOffs[cfg.GroupName] = off
	if old := g.m[cfg.GroupName]; old != nil && sameGroupConfig(old, &cfg) {
		return false
	}
	c := cfg
	g.m[c.GroupName] = &c
	g.bump()
	return true
}

// logOff returns the offset of the record that set a group, -1 when none
// did (or the group is absent).
func (g *groupManager) logOff(name string) int64 {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if off, ok := g.logOffs[name]; ok {
		return off
	}
	return -1
}

// disown marks every group as set by no record (configlog.go).
func (g *groupManager) disown() {
	g.mu.Lock()
	defer g.mu.Unlock()
	clear(g.logOffs)
}

// remove deletes a group's configuration and reports whether it existed.
func (g *groupManager) remove(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.m[name]; !ok {
		return false
	}
	delete(g.m, name)
	delete(g.logOffs, name)
	g.bump()
	return true
}

// retryPolicy is RocketMQ 5's group retry policy (GroupRetryPolicy): how
// long a message consumed n times before waits before its next delivery.
type retryPolicy struct {
	customized  []int64 // ms: CUSTOMIZED "next" durations
	initial     int64   // ms: EXPONENTIAL
	maxDelay    int64
	multiplier  int64
	exponential bool
}

// groupRetryPolicyJSON is the 5.x JSON shape.
type groupRetryPolicyJSON struct {
	Type                   string `json:"type"`
	ExponentialRetryPolicy *struct {
		Initial    int64 `json:"initial"`
		Max        int64 `json:"max"`
		Multiplier int64 `json:"multiplier"`
	} `json:"exponentialRetryPolicy"`
	CustomizedRetryPolicy *struct {
		Next []int64 `json:"next"`
	} `json:"customizedRetryPolicy"`
}

// parseRetryPolicy parses a group's groupRetryPolicy. A CUSTOMIZED policy
// without "next" and a missing type mean RocketMQ's delay levels (nil).
func parseRetryPolicy(raw []byte) (*retryPolicy, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var j groupRetryPolicyJSON
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("groupRetryPolicy: %w", err)
	}
	switch strings.ToUpper(j.Type) {
	case "", "CUSTOMIZED":
		if j.CustomizedRetryPolicy == nil || len(j.CustomizedRetryPolicy.Next) == 0 {
			return nil, nil
		}
		for _, d := range j.CustomizedRetryPolicy.Next {
			if d <= 0 {
				return nil, fmt.Errorf("groupRetryPolicy: a customized delay must be positive, got %d", d)
			}
		}
		return &retryPolicy{customized: j.CustomizedRetryPolicy.Next}, nil
	case "EXPONENTIAL":
		e := j.ExponentialRetryPolicy
		if e == nil || e.Initial <= 0 || e.Max < e.Initial || e.Multiplier < 1 {
			return nil, errors.New("groupRetryPolicy: EXPONENTIAL needs initial > 0, max >= initial and multiplier >= 1")
		}
		return &retryPolicy{exponential: true, initial: e.Initial, maxDelay: e.Max, multiplier: e.Multiplier}, nil
	}
	return nil, fmt.Errorf("groupRetryPolicy: unknown type %q", j.Type)
}

// delay is the wait before the next delivery of a message consumed
// reconsumeTimes times: CUSTOMIZED takes next[reconsumeTimes+2] (so that the
// default list matches delay levels 3, 4, ...), the last one beyond the
// list; EXPONENTIAL is initial * multiplier^reconsumeTimes, capped at max.
func (p *retryPolicy) delay(reconsumeTimes int32) time.Duration {
	if p.exponential {
		d := p.initial
		for i := int32(0); i < reconsumeTimes && d < p.maxDelay; i++ {
			d *= p.multiplier
		}
		return time.Duration(min(d, p.maxDelay)) * time.Millisecond
	}
	i := int(max(reconsumeTimes, 0)) + 2
	if i >= len(p.customized) {
		i = len(p.customized) - 1
	}
	return time.Duration(p.customized[i]) * time.Millisecond
}

// UpdateSubscriptionGroup creates or replaces a subscription group's
// configuration (UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, 200: consume
// enabled, retryMaxTimes, the 5.x groupRetryPolicy, consumeMessageOrderly,
// ...) and returns once subscriptionGroup.json holds it.
func (a Admin) UpdateSubscriptionGroup(cfg protocol.SubscriptionGroupConfig) error {
	c := a.c
	if c.slave.Load() {
		return errSlaveAdmin
	}
	if !validGroupName([]byte(cfg.GroupName)) {
		return newError(ReasonGroupIllegal, "invalid group name "+strconv.Quote(cfg.GroupName))
	}
	if len(cfg.GroupRetryPolicy) > 0 {
		if _, err := parseRetryPolicy(cfg.GroupRetryPolicy); err != nil {
			return wrapError(ReasonInvalidParameter, err.Error(), err)
		}
	}
	// The attributes are changes to the group's (groupattrs.go).
	old := c.groups.get([]byte(cfg.GroupName))
	var cur map[string]string
	if old != nil {
		cur = old.Attributes
	}
	attrs, err := alterGroupAttributes(old == nil, cur, cfg.Attributes)
	if err != nil {
		return wrapError(ReasonInvalidParameter, err.Error(), err)
	}
	cfg.Attributes = attrs
	if _, _, err := c.setGroup(cfg, false); err != nil {
		return err
	}
	if err := c.groupsChanged(true); err != nil {
		return wrapError(ReasonPersistFailed, "the group is updated but could not be persisted: "+err.Error(), err)
	}
	c.opts.Logger.Info("broker: subscription group updated", "group", cfg.GroupName, "consumeEnable", cfg.ConsumeEnable,
		"retryMaxTimes", cfg.RetryMaxTimes, "orderly", cfg.ConsumeMessageOrderly, "attributes", cfg.Attributes)
	return nil
}

// SubscriptionGroup returns a group's configuration
// (GET_SUBSCRIPTIONGROUP_CONFIG, 352); SUBSCRIPTION_GROUP_NOT_EXIST (26)
// for an unknown group.
func (c *Core) SubscriptionGroup(name []byte) (protocol.SubscriptionGroupConfig, error) {
	g := c.groups.get(name)
	if g == nil {
		return protocol.SubscriptionGroupConfig{}, newError(ReasonSubscriptionGroupNotExist, "subscription group not exist, "+string(name))
	}
	return *g, nil
}

// DeleteSubscriptionGroup deletes a group's configuration
// (DELETE_SUBSCRIPTIONGROUP, 207) and, with cleanOffset, its committed
// offsets of every topic. It returns once subscriptionGroup.json holds the
// deletion.
func (a Admin) DeleteSubscriptionGroup(name string, cleanOffset bool) error {
	c := a.c
	if c.slave.Load() {
		return errSlaveAdmin
	}
	removed, err := c.deleteGroupConfig(name)
	if err != nil {
		return err
	}
	if removed {
		if err := c.groupsChanged(true); err != nil {
			return wrapError(ReasonSystemError, err.Error(), err)
		}
	}
	if cleanOffset {
		c.offsets.removeGroup(name)
	}
	return nil
}

// SubscriptionGroupTable returns the subscription-group table and its
// version (what GET_ALL_SUBSCRIPTIONGROUP_CONFIG answers). O(groups).
func (rp Replication) SubscriptionGroupTable() GroupTable {
	c := rp.c
	w := c.groups.wrapper()
	return GroupTable{Groups: w.SubscriptionGroupTable, Version: w.DataVersion}
}

// groupForConsumer returns a consuming group's configuration, creating it
// with RocketMQ's defaults on first use (a pull or pop of a group no
// heartbeat registered; a slave answers the defaults without creating it); SUBSCRIPTION_GROUP_NOT_EXIST for an unknown group
// whose name is not one RocketMQ allows, NO_PERMISSION for a group whose
// consumption is disabled.
func (c *Core) groupForConsumer(name []byte, src netip.Addr) (*protocol.SubscriptionGroupConfig, error) {
	g := c.groups.get(name)
	if g == nil {
		if !validGroupName(name) {
			return nil, newError(ReasonSubscriptionGroupNotExist,
				"subscription group ["+string(name)+"] does not exist and its name is illegal, allowing only ^[%|a-zA-Z0-9_-]+$ up to 255 characters")
		}
		if c.slave.Load() {
			// A slave creates nothing (its tables follow its master's):
			// it serves a group it does not know yet with the defaults.
			def := protocol.DefaultSubscriptionGroupConfig(string(name))
			return &def, nil
		}
		if err := c.autoCreate.allow("group", c.groups.count(), src, c.opts.Logger); err != nil {
			return nil, newError(ReasonSubscriptionGroupNotExist, "subscription group ["+string(name)+"] does not exist, "+err.Error())
		}
		var created bool
		var err error
		if g, created, err = c.setGroup(protocol.DefaultSubscriptionGroupConfig(string(name)), true); err != nil {
			return nil, err
		}
		if created {
			c.groupsChanged(false)
		}
	}
	if !g.ConsumeEnable {
		return nil, newError(ReasonGroupConsumeDisabled, "subscription group no permission, "+g.GroupName)
	}
	return g, nil
}

// RetryDelay returns how long a message of a group with this configuration,
// consumed reconsumeTimes times, waits before its next delivery by the
// group's groupRetryPolicy; ok is false when the group has none (RocketMQ's
// delay levels apply).
func RetryDelay(cfg protocol.SubscriptionGroupConfig, reconsumeTimes int32) (d time.Duration, ok bool) {
	p, err := parseRetryPolicy(cfg.GroupRetryPolicy)
	if err != nil || p == nil {
		return 0, false
	}
	return p.delay(reconsumeTimes), true
}
