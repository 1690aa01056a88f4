package broker

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/apogeemq/apogee/protocol"
)

// groupManager owns the subscription-group table and
// config/subscriptionGroup.json. Groups are created on first use (heartbeat
// or pull), as RocketMQ's autoCreateSubscriptionGroup does.
type groupManager struct {
	path  string
	write func(string, []byte) error

	mu      sync.RWMutex
	m       map[string]*protocol.SubscriptionGroupConfig // values immutable once published
	version protocol.DataVersion

	persistMu sync.Mutex // serialises file writes; taken before mu
}

func newGroupManager(path string, write func(string, []byte) error) *groupManager {
	return &groupManager{path: path, write: write, m: make(map[string]*protocol.SubscriptionGroupConfig)}
}

func (g *groupManager) load() error {
	b, err := readConfigFile(g.path)
	if err != nil || b == nil {
		return err
	}
	var w protocol.SubscriptionGroupWrapper
	if err := w.Decode(b); err != nil {
		return fmt.Errorf("broker: %s: %w", g.path, err)
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
	return nil
}

// get returns the group's configuration or nil. It does not allocate.
func (g *groupManager) get(name []byte) *protocol.SubscriptionGroupConfig {
	g.mu.RLock()
	c := g.m[string(name)]
	g.mu.RUnlock()
	return c
}

// ensure returns the group's configuration, creating it with RocketMQ's
// defaults; created reports whether it was.
func (g *groupManager) ensure(name []byte) (cfg *protocol.SubscriptionGroupConfig, created bool) {
	if c := g.get(name); c != nil {
		return c, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if c := g.m[string(name)]; c != nil {
		return c, false
	}
	def := protocol.DefaultSubscriptionGroupConfig(string(name))
	g.m[def.GroupName] = &def
	g.version.Timestamp = time.Now().UnixMilli()
	g.version.Counter++
	return &def, true
}

func (g *groupManager) encode() ([]byte, error) {
	g.mu.RLock()
	w := protocol.SubscriptionGroupWrapper{
		SubscriptionGroupTable: make(map[string]*protocol.SubscriptionGroupConfig, len(g.m)),
		DataVersion:            g.version,
	}
	for k, v := range g.m {
		c := *v
		w.SubscriptionGroupTable[k] = &c
	}
	g.mu.RUnlock()
	return w.Encode()
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

func (g *groupManager) persist() error {
	g.persistMu.Lock()
	defer g.persistMu.Unlock()
	b, err := g.encode()
	if err != nil {
		return fmt.Errorf("broker: encode subscription groups: %w", err)
	}
	return g.write(g.path, b)
}
